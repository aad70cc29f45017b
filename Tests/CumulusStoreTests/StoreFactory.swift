import CumulusStore
import CumulusStorePostgres
import CumulusStoreSQLite
import CumulusStores
import Foundation
import Logging
import Testing

/// Makes a fresh, empty store for each conformance case: SQLite in memory and in a file, and PostgreSQL when
/// `CUMULUS_TEST_POSTGRES` names a server (see ``PostgresTestServer``).
struct StoreFactory: Sendable, CustomTestStringConvertible {
    var name: String
    /// Makes a store; with a number, one that makes at most that many field indexes for development queries.
    var makeLimited: @Sendable (_ maximumFieldIndexes: Int?) async throws -> any RecordStore

    var testDescription: String { name }

    func make() async throws -> any RecordStore { try await makeLimited(nil) }

    static let all: [StoreFactory] =
        [
            StoreFactory(name: "SQLite in memory") { maximum in
                try SQLiteRecordStore.inMemory(maximumFieldIndexes: maximum ?? SQLiteRecordStore.Configuration().maximumFieldIndexes)
            },
            StoreFactory(name: "SQLite file") { maximum in
                // Opened as `cumulus serve` opens its store.
                let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-store-\(UUID().uuidString)")
                var settings = StoreSettings()
                settings.maximumFieldIndexes = maximum
                return try await StoreLocation.sqlite(directory: directory.path).open(settings, logger: Logger(label: "test")).store
            },
        ]
        + (PostgresTestServer.url == nil
            ? []
            : [
                StoreFactory(name: "PostgreSQL") { try await PostgresTestServer.makeStore(maximumFieldIndexes: $0) },
                StoreFactory(name: "PostgreSQL sharded") { try await PostgresTestServer.makeShardedStore(maximumFieldIndexes: $0) },
            ])
}
