import CumulusModel
public import CumulusStore
import Foundation
public import Logging
public import PostgresNIO

/// The PostgreSQL store: many stateless Cumulus instances over one database.
///
/// It does not own its client: run the `PostgresClient` in the same `ServiceGroup` as the server (it is a `Service`),
/// and call ``PostgresSchema/migrate(_:logger:)`` before serving.
///
/// Being built: containers, credentials, users and the token secret are here; zones, records, feeds, queries, shares
/// and links follow, and the type conforms to `RecordStore` once they do.
public final class PostgresRecordStore: Sendable {
    public let client: PostgresClient

    public init(client: PostgresClient) {
        self.client = client
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
