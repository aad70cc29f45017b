import CumulusModel
public import CumulusStore
import Foundation
public import Logging
public import PostgresNIO
import Synchronization

/// The PostgreSQL store: many stateless Cumulus instances over one database.
///
/// It does not own its client: run the `PostgresClient` in the same `ServiceGroup` as the server (it is a `Service`),
/// and call ``PostgresSchema/migrate(_:logger:)`` before serving.
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
    let metrics: StoreMetrics
    /// Change announcements to other instances (``announceChange()``).
    let announcements = Mutex(AnnouncementState())

    /// - Parameters:
    ///   - client: The connection pool, run by the caller.
    ///   - maximumFieldIndexes: How many queried fields may get an expression index, at most (as the SQLite store).
    ///   - connectionWait: How long an operation waits for a connection (PostgreSQL down, or every connection busy)
    ///     before it fails with ``StoreError/Code/unavailable``: the HTTP edge answers `503 TRY_AGAIN_LATER`, and the
    ///     client retries, instead of every request hanging until the pool gives up (a minute).
    ///   - metrics: Where the store's metrics go; `nil` makes them through swift-metrics' global system.
    public init(client: PostgresClient, maximumFieldIndexes: Int = 64, connectionWait: Duration = .seconds(5), metrics: StoreMetrics? = nil) {
        self.client = client
        self.metrics = metrics ?? StoreMetrics.postgres(poolSize: nil)
        self.maximumFieldIndexes = maximumFieldIndexes
        self.connectionWait = connectionWait
    }

    /// Runs `work`, failing with ``StoreError/Code/unavailable`` if it has not called `leased` within
    /// ``connectionWait``. Cancelling a waiting lease takes the request off the pool's queue.
    func withConnectionWait<T: Sendable>(_ work: @escaping @Sendable (_ leased: @escaping @Sendable () -> Void) async throws -> T) async throws -> T {
        let leased = LeaseFlag()
        let wait = connectionWait
        let metrics = self.metrics
        let start = ContinuousClock.now
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await work {
                    leased.value.withLock { $0 = true }
                    metrics.waitedForConnection(ContinuousClock.now - start)
                }
            }
            group.addTask {
                try await Task.sleep(for: wait)
                if !leased.value.withLock({ $0 }) {
                    throw StoreError(.unavailable, "no PostgreSQL connection within \(wait); PostgreSQL is down or every connection is busy")
                }
                return nil
            }
            while let next = try await group.next() {
                if let value = next {
                    group.cancelAll()
                    return value
                }
            }
            throw StoreError(.unexpected, "an operation ended without a result")
        }
    }

    /// Runs a query, translating PostgreSQL's errors into ``StoreError``s: a unique violation is a duplicate, a lost or
    /// refused connection is unavailable (the caller may retry), anything else unexpected.
    func query(_ query: PostgresQuery, logger: Logger, duplicate: String? = nil, missingReference: String? = nil) async throws
        -> PostgresRowSequence
    {
        do {
            let client = self.client
            return try await metrics.measure(.query) {
                try await withConnectionWait { leased in
                    let rows = try await client.query(query, logger: logger)
                    leased()
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

/// Whether an operation got its connection; shared by the operation and its deadline.
private final class LeaseFlag: Sendable {
    let value = Mutex(false)
}
