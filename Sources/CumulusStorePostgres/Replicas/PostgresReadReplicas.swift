public import CoreMetrics
import CumulusStore
public import Logging
public import PostgresNIO
public import ServiceLifecycle
import Synchronization

/// Streaming replicas of the primary that serve the store's reads (change feeds, lookups, queries), each only while it
/// keeps up.
///
/// A read is served by a replica only once the replica has replayed the primary's write-ahead log up to where it stood
/// when the read began: every write acknowledged before the read, through any instance, is in what it reads, and so is
/// the position of any change token a client holds. A replica that has not got there within ``wait`` leaves that read
/// to the primary.
///
/// A replica is taken out of service when it fails, when a read found it behind, or when a probe (every
/// ``probeInterval``) finds that it has not replayed what the primary had written at the probe before; the probe puts it
/// back once it has. Reads go round the replicas in service, and to the primary when there is none.
///
/// It is a `Service`: run it beside the primary's client; it runs the replicas' clients and the probe.
///
/// ```swift
/// let replicas = PostgresReadReplicas(primary: client, replicas: [(replicaClient, location.redacted)], logger: logger)
/// let store = PostgresRecordStore(client: client, replicas: replicas)
/// ```
public final class PostgresReadReplicas: Service, Sendable {
    /// How long a read waits for a replica to replay the primary's position before the primary serves it.
    public let wait: Duration
    /// How often each replica's lag is checked.
    public let probeInterval: Duration
    /// How long a read waits for a connection to a replica before the primary serves it.
    public let connectionWait: Duration
    let primary: PostgresClient
    let replicas: [Replica]
    private let logger: Logger
    private let turn = Atomic(0)
    /// Reads a replica could have served that the primary served (none in service, or the one picked behind or failing).
    let servedByPrimary: Counter

    /// - Parameters:
    ///   - primary: The primary's client (the store's).
    ///   - replicas: Each replica's client, with a name for logs and metrics (its location without the password).
    ///   - wait: How long a read waits for a replica to catch up before the primary serves it.
    ///   - probeInterval: How often each replica's lag is checked, and so how soon one comes back into service.
    ///   - connectionWait: How long a read waits for a replica's connection before the primary serves it.
    ///   - metrics: Where the metrics go; swift-metrics' global system by default.
    public init(
        primary: PostgresClient, replicas: [(client: PostgresClient, name: String)], wait: Duration = .milliseconds(50),
        probeInterval: Duration = .seconds(1), connectionWait: Duration = .seconds(1), logger: Logger,
        metrics: any MetricsFactory = MetricsSystem.factory
    ) {
        self.primary = primary
        self.replicas = replicas.map { Replica(client: $0.client, name: $0.name, metrics: metrics) }
        self.wait = wait
        self.probeInterval = probeInterval
        self.connectionWait = connectionWait
        self.logger = logger
        servedByPrimary = Counter(label: "cumulus_postgres_reads_total", dimensions: [("served_by", "primary")], factory: metrics)
    }

    /// One replica: its client, whether it serves reads, and how far it has replayed.
    final class Replica: Sendable {
        let client: PostgresClient
        let name: String
        let served: Counter
        private let inServiceGauge: Gauge
        private let state = Mutex(State())

        struct State {
            var inService = false
            /// Whether a probe has put it in or out of service yet.
            var probed = false
            /// The furthest position this replica was seen to have replayed.
            var replayed = WALPosition.start
        }

        init(client: PostgresClient, name: String, metrics: any MetricsFactory) {
            self.client = client
            self.name = name
            served = Counter(label: "cumulus_postgres_reads_total", dimensions: [("served_by", "replica")], factory: metrics)
            inServiceGauge = Gauge(label: "cumulus_postgres_replica_in_service", dimensions: [("replica", name)], factory: metrics)
            inServiceGauge.record(0)
        }

        var inService: Bool { state.withLock { $0.inService } }
        var replayed: WALPosition { state.withLock { $0.replayed } }

        func saw(replayed position: WALPosition) {
            state.withLock { $0.replayed = max($0.replayed, position) }
        }

        /// Puts the replica in or out of service; logs a change.
        func set(inService: Bool, reason: String, logger: Logger) {
            let changed = state.withLock { state -> Bool in
                defer { (state.inService, state.probed) = (inService, true) }
                return state.inService != inService || !state.probed
            }
            inServiceGauge.record(inService ? 1 : 0)
            guard changed else { return }
            if inService {
                logger.notice("read replica in service", metadata: ["cumulus.replica": "\(name)"])
            } else {
                logger.warning("read replica out of service", metadata: ["cumulus.replica": "\(name)", "cumulus.reason": "\(reason)"])
            }
        }
    }

    /// The next replica in service, taking turns; `nil` when none is.
    func next() -> Replica? {
        let serving = replicas.filter(\.inService)
        guard !serving.isEmpty else { return nil }
        return serving[turn.add(1, ordering: .relaxed).newValue % serving.count]
    }

    /// Counts a read `replica` served, or the primary when `nil`.
    func served(by replica: Replica?) {
        if let replica { replica.served.increment() } else { servedByPrimary.increment() }
    }

    /// Takes a replica out of service until a probe finds it caught up.
    func takeOutOfService(_ replica: Replica, reason: String) {
        replica.set(inService: false, reason: reason, logger: logger)
    }

    /// Runs the replicas' clients and the probe until the service group shuts down.
    public func run() async throws {
        await withDiscardingTaskGroup { group in
            for replica in replicas {
                group.addTask { await replica.client.run() }
            }
            await cancelWhenGracefulShutdown { await self.probe() }
            // Shutting down: the clients end with the group.
            group.cancelAll()
        }
    }

    /// Checks every replica each ``probeInterval``: in service when it has replayed what the primary had written at the
    /// probe before (so it is less than an interval behind), out when it has not, cannot be reached, or is no longer a
    /// replica (promoted, or never one).
    private func probe() async {
        var previous: WALPosition?
        while !Task.isCancelled {
            do {
                let primaryPosition = try await Self.position(of: primary, "pg_current_wal_flush_lsn()", wait: connectionWait, logger: logger)
                for replica in replicas {
                    do {
                        guard
                            let replayed = try await Self.position(
                                of: replica.client, "pg_last_wal_replay_lsn()", wait: connectionWait, logger: logger)
                        else {
                            replica.set(inService: false, reason: "not a replica (not in recovery)", logger: logger)
                            continue
                        }
                        replica.saw(replayed: replayed)
                        let target = previous ?? primaryPosition ?? .start
                        if replayed >= target {
                            replica.set(inService: true, reason: "", logger: logger)
                        } else {
                            replica.set(inService: false, reason: "lagging: \(target.bytes(after: replayed)) bytes behind", logger: logger)
                        }
                    } catch {
                        replica.set(inService: false, reason: "unreachable", logger: logger)
                    }
                }
                previous = primaryPosition
            } catch {
                // The primary is down: nothing to compare with; the replicas keep their state, and reads fail over to
                // the primary as they find it.
                previous = nil
            }
            try? await Task.sleep(for: probeInterval)
        }
    }

    /// Whether `replica` has replayed up to `target`, asking it again, after pauses, until ``wait`` has passed.
    func waitForReplay(_ replica: Replica, upTo target: WALPosition) async throws -> Bool {
        if replica.replayed >= target { return true }
        let deadline = ContinuousClock.now + wait
        var pause = Duration.microseconds(500)
        while true {
            guard
                let replayed = try await Self.position(
                    of: replica.client, "pg_last_wal_replay_lsn()", wait: connectionWait, logger: logger)
            else {
                takeOutOfService(replica, reason: "not a replica (not in recovery)")
                return false
            }
            replica.saw(replayed: replayed)
            if replayed >= target { return true }
            guard ContinuousClock.now + pause < deadline else { return false }
            try await Task.sleep(for: pause)
            pause *= 2
        }
    }

    /// A position read with one statement (`nil` when PostgreSQL answers none: a replica's on a server not in recovery),
    /// failing with ``StoreError/Code/unavailable`` after `wait` without a connection or an answer.
    static func position(of client: PostgresClient, _ function: String, wait: Duration, logger: Logger) async throws -> WALPosition? {
        try await withThrowingTaskGroup(of: WALPosition??.self) { group in
            group.addTask {
                do {
                    let rows = try await client.query(PostgresQuery(unsafeSQL: "SELECT \(function)::text"), logger: logger)
                    for try await text in rows.decode(String?.self) { return .some(text.flatMap(WALPosition.init)) }
                    return .some(nil)
                } catch {
                    // Refused, reset, or starting up: either way this server cannot answer now.
                    throw StoreError(.unavailable, "PostgreSQL did not answer \(function)", underlying: error)
                }
            }
            group.addTask {
                try await Task.sleep(for: wait)
                return nil
            }
            defer { group.cancelAll() }
            guard let position = try await group.next(), let position else {
                throw StoreError(.unavailable, "PostgreSQL did not answer within \(wait)")
            }
            return position
        }
    }
}

/// A position in PostgreSQL's write-ahead log (a `pg_lsn`), compared as a number.
struct WALPosition: Comparable, Sendable, CustomStringConvertible {
    let value: UInt64
    static let start = WALPosition(value: 0)

    init(value: UInt64) {
        self.value = value
    }

    /// Reads PostgreSQL's text form, two hexadecimal halves: `16/B374D848`.
    init?(_ text: String) {
        let halves = text.split(separator: "/")
        guard halves.count == 2, let high = UInt64(halves[0], radix: 16), let low = UInt64(halves[1], radix: 16), high <= UInt32.max,
            low <= UInt32.max
        else { return nil }
        value = high << 32 | low
    }

    static func < (lhs: WALPosition, rhs: WALPosition) -> Bool { lhs.value < rhs.value }

    var description: String { String(value >> 32, radix: 16, uppercase: true) + "/" + String(value & 0xFFFF_FFFF, radix: 16, uppercase: true) }

    /// How far this position is past `earlier`, in bytes of log.
    func bytes(after earlier: WALPosition) -> UInt64 { value > earlier.value ? value - earlier.value : 0 }
}
