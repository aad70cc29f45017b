import CumulusModel
public import CumulusStore
import Foundation
import Logging
import NIOCore
import NIOPosix
public import PostgresNIO
import Synchronization

/// The PostgreSQL store: many stateless Cumulus instances over one database.
///
/// It does not own its client: run the `PostgresClient` in the same `ServiceGroup` as the server (it is a `Service`),
/// and call ``PostgresMigrations/migrate(_:logger:)`` before serving.
///
/// Every method is one transaction. Record semantics come from the same ``RecordBatchPlanner`` and ``SharePlanner`` as
/// the SQLite store's; this type only reads, locks and writes, with set-based statements.
///
/// ```swift
/// let client = PostgresClient(configuration: try PostgresLocation(url: url).clientConfiguration(maximumConnections: 20))
/// let store = PostgresRecordStore(client: client)
/// ```
public final class PostgresRecordStore: RecordStore {
    public let client: PostgresClient
    let planner = RecordBatchPlanner(makeShortGUID: ShortGUID.make)
    /// Fields known to have an expression index (created here or by another instance).
    let knownFieldIndexes = Mutex<Set<String>>([])
    let maximumFieldIndexes: Int
    /// How long a request waits for a connection before it is answered "try again later".
    let connectionWait: Duration
    /// How long an operation may take once it has its connection before it is answered "try again later".
    let operationTimeout: Duration
    let metrics: StoreMetrics
    /// Change announcements to other instances (``announceChange()``).
    let announcements = Mutex(AnnouncementState())
    /// Names this instance's announcements, so that its listener skips its own: this instance woke its connections at
    /// the commit already, and a second wake-up would make each look at the feeds again for nothing.
    let instance = "@" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
    /// Fails an operation whose connection closes under it (``withConnectionWait(wait:_:)``).
    let lostConnections = LostConnections()
    /// Streaming replicas that serve reads, if any.
    public let replicas: PostgresReadReplicas?
    /// How instances wake each other's push connections.
    public let fanOut: ChangeFanOut

    /// - Parameters:
    ///   - client: The connection pool, run by the caller.
    ///   - maximumFieldIndexes: How many queried fields may get an expression index, at most (as the SQLite store).
    ///   - connectionWait: How long an operation waits for a connection (PostgreSQL down, or every connection busy)
    ///     before it fails with ``StoreError/Code/unavailable``: the HTTP edge answers `503 TRY_AGAIN_LATER`, and the
    ///     client retries, instead of every request hanging until the pool gives up (a minute).
    ///   - operationTimeout: How long an operation may take once it has a connection (a statement PostgreSQL stopped
    ///     answering, a connection lost without a word) before it fails with ``StoreError/Code/unavailable``; longer
    ///     than any statement a request runs (bounded by the request limits).
    ///   - metrics: Where the store's metrics go; `nil` makes them through swift-metrics' global system.
    ///   - replicas: Streaming replicas of `client`'s database that serve change feeds, lookups and queries while they
    ///     keep up; run them beside the client.
    ///   - fanOut: How instances wake each other's push connections: `NOTIFY` (the default), or each instance watching
    ///     the databases its connections wait on.
    public init(
        client: PostgresClient, maximumFieldIndexes: Int = 64, connectionWait: Duration = .seconds(5), operationTimeout: Duration = .seconds(30),
        metrics: StoreMetrics? = nil, replicas: PostgresReadReplicas? = nil, fanOut: ChangeFanOut = .notify
    ) {
        self.client = client
        self.replicas = replicas
        self.fanOut = fanOut
        self.metrics = metrics ?? StoreMetrics.postgres(poolSize: nil)
        self.maximumFieldIndexes = maximumFieldIndexes
        self.connectionWait = connectionWait
        self.operationTimeout = operationTimeout
    }

    /// Runs `work`, failing with ``StoreError/Code/unavailable`` if it has not called `leased` within `wait` (by default
    /// ``connectionWait``), or has not finished ``operationTimeout`` after that, or at once if the connection it passed
    /// to `leased` closes before it finishes. Cancelling a waiting lease takes the request off the pool's queue.
    ///
    /// The work runs in a task of its own, and the caller is answered when either deadline passes even if the work does
    /// not respond to cancellation (a statement whose connection PostgreSQL dropped, or that it never answers): every
    /// request gets an answer in bounded time, whatever the database does. Work left behind ends when its connection
    /// fails or answers; a write's outcome is then unknown, and the error says so.
    func withConnectionWait<T: Sendable>(
        wait: Duration? = nil,
        _ work: @escaping @Sendable (_ leased: @escaping @Sendable (_ connection: PostgresConnection?) -> Void) async throws -> T
    ) async throws -> T {
        let outcome = FirstOutcome<T>()
        let (wait, timeout, metrics, lostConnections) = (wait ?? connectionWait, operationTimeout, self.metrics, self.lostConnections)
        let start = ContinuousClock.now
        // The caller's event loop when it runs on one (a request does), for the work and the deadlines. The work starts
        // there rather than on the concurrency pool: leasing and releasing the connection would otherwise wake a pool
        // thread at every operation (the pool's state machine runs where its caller does).
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        let worker = Task(executorPreference: ConnectionLoopExecutor(loop)) {
            do {
                let value = try await work { connection in
                    outcome.leased()
                    metrics.waitedForConnection(ContinuousClock.now - start)
                    // The pool can lease a connection whose close it has not heard of yet, and a statement written to
                    // a closed channel is never answered: without this, the request would wait for the timeout.
                    guard let connection else { return }
                    lostConnections.watch(connection) {
                        outcome.finish(
                            .failure(
                                StoreError(
                                    .unavailable,
                                    "the PostgreSQL connection closed during the operation; whether a write was applied is unknown (sending it again is safe: change tags make it idempotent)"
                                )))
                    }
                }
                outcome.finish(.success(value))
            } catch {
                outcome.finish(.failure(error))
            }
        }
        // Timers on that event loop, not a task sleeping: cancelling a sleeping task wakes a thread of the concurrency
        // pool at every operation.
        let deadline = OperationDeadline()
        deadline.schedule(on: loop, in: wait) {
            guard let leasedAt = outcome.leasedAt else {
                outcome.finish(
                    .failure(StoreError(.unavailable, "no PostgreSQL connection within \(wait); PostgreSQL is down or every connection is busy")))
                return
            }
            deadline.schedule(on: loop, in: ContinuousClock.now.duration(to: leasedAt + timeout)) {
                outcome.finish(
                    .failure(
                        StoreError(
                            .unavailable,
                            "PostgreSQL did not finish within \(timeout); whether a write was applied is unknown (sending it again is safe: change tags make it idempotent)"
                        )))
            }
        }
        defer {
            deadline.cancel()
            worker.cancel()
        }
        return try await withTaskCancellationHandler {
            try await outcome.value()
        } onCancel: {
            outcome.finish(.failure(CancellationError()))
        }
    }

    /// Runs a query, translating PostgreSQL's errors into ``StoreError``s: a unique violation is a duplicate, a lost or
    /// refused connection is unavailable (the caller may retry), anything else unexpected.
    @discardableResult
    func query(_ query: PostgresQuery, logger: Logger, duplicate: String? = nil, missingReference: String? = nil) async throws
        -> PostgresRowSequence
    {
        let client = self.client
        return try await onePoolStatement(duplicate: duplicate, missingReference: missingReference) {
            try await client.query(query, logger: logger)
        }
    }

    /// Runs a prepared statement (``PostgresPreparedText``) on a connection of the pool, as ``query(_:logger:duplicate:missingReference:)``;
    /// its rows, read before the connection goes back to the pool.
    @discardableResult
    func run<Text: PostgresPreparedText>(
        _ text: Text.Type, _ bindings: PostgresBindings, logger: Logger, duplicate: String? = nil, missingReference: String? = nil
    ) async throws -> [PostgresRow] {
        let client = self.client
        return try await onePoolStatement(duplicate: duplicate, missingReference: missingReference) {
            // On a connection of its own rather than the pool's `execute`, so that a failed preparation closes it.
            try await client.withConnection { connection in
                var rows: [PostgresRow] = []
                for try await row in try await connection.run(text, bindings, logger: logger) { rows.append(row) }
                return rows
            }
        }
    }

    private func onePoolStatement<Rows: Sendable>(
        duplicate: String?, missingReference: String?, _ statement: @escaping @Sendable () async throws -> Rows
    ) async throws -> Rows {
        do {
            return try await metrics.measure(.query) {
                try await withConnectionWait { leased in
                    // The whole statement is within the connection wait: the pool's client gives no connection to watch.
                    let rows = try await statement()
                    leased(nil)
                    return rows
                }
            }
        } catch let error as StoreError {
            throw error
        } catch let error as PSQLError {
            throw Self.storeError(error, duplicate: duplicate, missingReference: missingReference)
        } catch {
            // The pool gave up connecting (its circuit breaker), or the client is shutting down.
            throw StoreError(.unavailable, "PostgreSQL is unavailable", underlying: error)
        }
    }

    static func storeError(_ error: PSQLError, duplicate: String? = nil, missingReference: String? = nil) -> StoreError {
        switch error.serverInfo?[.sqlState] {
        case "23505"?: return StoreError(.duplicate, duplicate ?? "already exists", underlying: error)
        case "23503"?: return StoreError(.notFound, missingReference ?? "a referenced row does not exist", underlying: error)
        case let state? where state.hasPrefix("08") || state.hasPrefix("57P"):
            return StoreError(.unavailable, "PostgreSQL is unavailable", underlying: error)
        case "40P01"?, "40001"?:
            return StoreError(.unavailable, "PostgreSQL aborted a transaction in a conflict; retry", underlying: error)
        case "53100"?: return StoreError(.storageFull, "PostgreSQL's disk is full", underlying: error)
        case "25006"?:
            // A standby, or a database set read-only: nothing was written; writable again once an operator fixes it.
            return StoreError(.cannotWrite, "the PostgreSQL database cannot be written (read-only)", underlying: error)
        case "22021"?, "22P05"?:
            return StoreError(.invalidValue, "a text holds a character the store cannot hold (U+0000)", underlying: error)
        case "28P01"?, "28000"?: return StoreError(.misconfigured, "PostgreSQL refused the credentials", underlying: error)
        case "3D000"?: return StoreError(.misconfigured, "the PostgreSQL database does not exist", underlying: error)
        case let state?:
            // For logs: the server's own words (the HTTP edge answers an unexpected error without them).
            return StoreError(.unexpected, "PostgreSQL failed (\(state): \(error.serverInfo?[.message] ?? "no message"))", underlying: error)
        case nil:
            // No server answer: the connection failed or was lost.
            return StoreError(.unavailable, "PostgreSQL is unreachable", underlying: error)
        }
    }
}

extension StoreError {
    /// A deadlock or serialization failure: PostgreSQL aborted the transaction, nothing was written, and running it
    /// again succeeds.
    var isRetryableConflict: Bool {
        guard code == .unavailable, let error = underlying as? PSQLError else { return false }
        return ["40P01", "40001"].contains(error.serverInfo?[.sqlState])
    }
}

/// An operation's deadline: one timer at a time, replaced as the operation moves from waiting for a connection to
/// running on it, and cancelled when it ends.
private final class OperationDeadline: Sendable {
    private struct State {
        var timer: Scheduled<Void>?
        var cancelled = false
    }

    private let state = Mutex(State())

    func schedule(on loop: any EventLoop, in delay: Duration, _ fire: @escaping @Sendable () -> Void) {
        let nanoseconds = delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
        let timer = loop.scheduleTask(in: .nanoseconds(max(0, nanoseconds)), fire)
        let cancel = state.withLock { state -> Bool in
            state.timer = timer
            return state.cancelled
        }
        if cancel { timer.cancel() }
    }

    func cancel() {
        let timer = state.withLock { state -> Scheduled<Void>? in
            state.cancelled = true
            return state.timer
        }
        timer?.cancel()
    }
}

/// The operation running on each leased connection, failed the moment its connection closes. One close callback per
/// connection, registered when the connection is first seen, rather than one per operation: a connection's close future
/// keeps every callback until the connection closes, which for a pooled connection may be days.
final class LostConnections: Sendable {
    /// Keyed by the connection object: IDs are numbered per client, and a replica's client numbers its own.
    private let running = Mutex<[ObjectIdentifier: @Sendable () -> Void]>([:])

    /// Calls `lost` if `connection` closes (or has closed) before the next ``watch(_:lost:)`` or ``forget(_:)`` of it.
    func watch(_ connection: PostgresConnection, lost: @escaping @Sendable () -> Void) {
        let key = ObjectIdentifier(connection)
        let first = running.withLock { running in
            defer { running[key] = lost }
            return running[key] == nil
        }
        guard first else { return }
        // The callback holds the connection, so its key is not reused before the entry goes.
        connection.closeFuture.whenComplete { _ in
            _ = connection
            self.running.withLock { $0.removeValue(forKey: key) }?()
        }
    }

    /// The operation on `connection` ended: its close no longer concerns it.
    func forget(_ connection: PostgresConnection) {
        let key = ObjectIdentifier(connection)
        running.withLock { running in
            if running[key] != nil { running[key] = {} }
        }
    }
}

/// Runs a task's jobs on one event loop: a transaction's, on its connection's, so that each statement's answer resumes
/// it on the thread that read the answer, instead of waking a thread of the concurrency pool at every round trip. (The
/// server's `EventLoopTaskExecutor` is its twin for requests; a store does not depend on the server's transport.)
final class ConnectionLoopExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// The first outcome of an operation or its deadline, handed to the one caller waiting for it; and when the operation
/// got its connection.
private final class FirstOutcome<T: Sendable>: Sendable {
    private struct State {
        var result: Result<T, any Error>?
        var waiter: CheckedContinuation<T, any Error>?
        var leasedAt: ContinuousClock.Instant?
    }

    private let state = Mutex(State())

    var leasedAt: ContinuousClock.Instant? { state.withLock { $0.leasedAt } }

    func leased() {
        state.withLock { $0.leasedAt = $0.leasedAt ?? .now }
    }

    /// Keeps the first result; later ones are dropped.
    func finish(_ result: Result<T, any Error>) {
        let waiter = state.withLock { state -> CheckedContinuation<T, any Error>? in
            guard state.result == nil else { return nil }
            state.result = result
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(with: result)
    }

    func value() async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state -> Result<T, any Error>? in
                if let result = state.result { return result }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}
