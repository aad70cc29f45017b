public import CoreMetrics

/// What a store reports through swift-metrics: how long its operations take, how many run at once (against the pool
/// they share, its use), and how long an operation waited for a connection. `cumulus serve` renders them at `/metrics`.
///
/// The dimensions are the store (`sqlite` or `postgres`) and the kind of operation (`read`, `write`, `transaction`,
/// `query`): never a container, a user or a record.
public final class StoreMetrics: Sendable {
    /// What an operation does to the database.
    public enum Kind: String, Sendable, CaseIterable {
        /// An SQLite read, on one of the reader connections.
        case read
        /// An SQLite write transaction, on the one writer connection.
        case write
        /// A PostgreSQL transaction.
        case transaction
        /// A PostgreSQL statement on its own.
        case query
    }

    private let durations: [Kind: Timer]
    private let inFlight: [Kind: Meter]
    private let connectionWait: Timer?

    /// The metrics of an SQLite store: reads and writes.
    ///
    /// - Parameters:
    ///   - poolSize: The reader connections and the writer, reported as `cumulus_store_pool_size`.
    ///   - factory: Where the metrics go; swift-metrics' global system by default.
    public static func sqlite(poolSize: Int, factory: any MetricsFactory = MetricsSystem.factory) -> StoreMetrics {
        StoreMetrics(store: "sqlite", kinds: [.read, .write], poolSize: poolSize, waitsForConnections: false, factory: factory)
    }

    /// The metrics of a PostgreSQL store: transactions, statements, and the wait for a connection of the pool.
    ///
    /// - Parameters:
    ///   - poolSize: The pool's connections, reported as `cumulus_store_pool_size` when known.
    ///   - factory: Where the metrics go; swift-metrics' global system by default.
    public static func postgres(poolSize: Int?, factory: any MetricsFactory = MetricsSystem.factory) -> StoreMetrics {
        StoreMetrics(store: "postgres", kinds: [.transaction, .query], poolSize: poolSize, waitsForConnections: true, factory: factory)
    }

    private init(store: String, kinds: [Kind], poolSize: Int?, waitsForConnections: Bool, factory: any MetricsFactory) {
        var durations: [Kind: Timer] = [:]
        var inFlight: [Kind: Meter] = [:]
        for kind in kinds {
            let dimensions = [("store", store), ("kind", kind.rawValue)]
            durations[kind] = Timer(label: "cumulus_store_operation_duration_seconds", dimensions: dimensions, factory: factory)
            inFlight[kind] = Meter(label: "cumulus_store_operations_in_flight", dimensions: dimensions, factory: factory)
        }
        self.durations = durations
        self.inFlight = inFlight
        connectionWait =
            waitsForConnections ? Timer(label: "cumulus_store_connection_wait_seconds", dimensions: [("store", store)], factory: factory) : nil
        if let poolSize {
            Gauge(label: "cumulus_store_pool_size", dimensions: [("store", store)], factory: factory).record(poolSize)
        }
    }

    /// Runs `body`, counting it in flight while it runs and recording how long it took, failed or not.
    public func measure<T>(_ kind: Kind, _ body: () async throws -> T) async rethrows -> T {
        let start = ContinuousClock.now
        inFlight[kind]?.increment()
        defer {
            inFlight[kind]?.decrement()
            durations[kind]?.record(duration: ContinuousClock.now - start)
        }
        return try await body()
    }

    /// An operation got a connection after waiting this long.
    public func waitedForConnection(_ wait: Duration) {
        connectionWait?.record(duration: wait)
    }
}

extension Timer {
    fileprivate func record(duration: Duration) {
        let (seconds, attoseconds) = duration.components
        recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
