import CumulusStore
import CumulusStorePostgres
import CumulusStoreSQLite
import Foundation
import Testing

/// Makes a fresh, empty store for each conformance case: SQLite in memory and in a file, and PostgreSQL when
/// `CUMULUS_TEST_POSTGRES` names a server (see ``PostgresTestServer``).
struct StoreFactory: Sendable, CustomTestStringConvertible {
    var name: String
    var make: @Sendable () async throws -> any RecordStore

    var testDescription: String { name }

    static let all: [StoreFactory] =
        [
            StoreFactory(name: "SQLite in memory") { try SQLiteRecordStore.inMemory() },
            StoreFactory(name: "SQLite file") {
                let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-store-\(UUID().uuidString)")
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                return try SQLiteRecordStore(path: directory.appendingPathComponent("cumulus.sqlite").path)
            },
        ] + (PostgresTestServer.url == nil ? [] : [StoreFactory(name: "PostgreSQL") { try await PostgresTestServer.makeStore() }])
}
