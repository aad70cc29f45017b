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

    /// - Parameters:
    ///   - client: The connection pool, run by the caller.
    ///   - maximumFieldIndexes: How many queried fields may get an expression index, at most (as the SQLite store).
    public init(client: PostgresClient, maximumFieldIndexes: Int = 64) {
        self.client = client
        self.maximumFieldIndexes = maximumFieldIndexes
    }

    /// Runs a query, translating PostgreSQL's errors into ``StoreError``s: a unique violation is a duplicate, a lost or
    /// refused connection is unavailable (the caller may retry), anything else unexpected.
    func query(_ query: PostgresQuery, logger: Logger, duplicate: String? = nil, missingReference: String? = nil) async throws
        -> PostgresRowSequence
    {
        do {
            return try await client.query(query, logger: logger)
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
