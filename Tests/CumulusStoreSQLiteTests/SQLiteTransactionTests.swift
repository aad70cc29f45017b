import CumulusStore
import Foundation
import GRDB
import Testing

@testable import CumulusStoreSQLite

/// The store's write transactions (with `BEGIN` and `COMMIT` prepared once) keep GRDB's: all or nothing, and the
/// connection is never left inside a transaction.
@Suite("SQLite write transactions", .timeLimit(.minutes(10)))
struct SQLiteTransactionTests {
    struct Refused: Error {}

    @Test func aWriteThatFailsLeavesNothingAndTheNextWriteCommits() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-transactions-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteRecordStore(path: directory.appendingPathComponent("cumulus.sqlite").path)
        try await store.write { try $0.execute(sql: "CREATE TABLE scratch (id INTEGER PRIMARY KEY, value TEXT)") }
        func values() async throws -> [String] {
            try await store.read { try String.fetchAll($0, sql: "SELECT value FROM scratch ORDER BY id") }
        }

        try await store.write { try $0.execute(sql: "INSERT INTO scratch VALUES (1, 'kept')") }
        // The body throws after writing: rolled back.
        await #expect(throws: StoreError.self) {
            try await store.write { db in
                try db.execute(sql: "INSERT INTO scratch VALUES (2, 'lost')")
                throw Refused()
            }
        }
        // A statement fails after another wrote: rolled back, and told as the store's error.
        let duplicate = await #expect(throws: StoreError.self) {
            try await store.write { db in
                try db.execute(sql: "INSERT INTO scratch VALUES (3, 'lost')")
                try db.execute(sql: "INSERT INTO scratch VALUES (1, 'again')")
            }
        }
        #expect(duplicate?.code == .duplicate)
        #expect(try await values() == ["kept"])
        // The writer is not left inside a transaction: the next write commits, and the same statements are reused.
        try await store.write { try $0.execute(sql: "INSERT INTO scratch VALUES (4, 'next')") }
        let outside = try await store.writer.writeWithoutTransaction { $0.isInsideTransaction }
        #expect(!outside)
        #expect(try await values() == ["kept", "next"])
    }
}
