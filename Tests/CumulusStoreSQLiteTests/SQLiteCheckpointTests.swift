import Foundation
import GRDB
import Logging
import Testing

@testable import CumulusStoreSQLite

/// While a server runs, the write-ahead log is checkpointed in the background, never inside a request's commit.
@Suite("SQLite background checkpoints", .timeLimit(.minutes(10)))
struct SQLiteCheckpointTests {
    let logger = Logger(label: "test")

    func withStore(
        maximumWriteAheadLogBytes: Int64 = 64 << 20, _ body: (SQLiteRecordStore, String) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-checkpoints-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("cumulus.sqlite").path
        let store = try SQLiteRecordStore(
            path: path,
            configuration: .init(checkpointInterval: .milliseconds(10), maximumWriteAheadLogBytes: maximumWriteAheadLogBytes))
        try await store.writer.write { try $0.execute(sql: "CREATE TABLE scratch (payload BLOB)") }
        try await body(store, path)
    }

    /// Writes `count` rows of 4 KiB, one transaction each, as requests do.
    func writeRows(_ count: Int, to store: SQLiteRecordStore) async throws {
        for _ in 0..<count {
            try await store.writer.write { try $0.execute(sql: "INSERT INTO scratch (payload) VALUES (zeroblob(4096))") }
        }
    }

    func fileSize(_ path: String) -> Int64 {
        ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? NSNumber)?.int64Value ?? 0
    }

    func writerAutocheckpoint(_ store: SQLiteRecordStore) async throws -> Int {
        try await store.writer.writeWithoutTransaction { try Int.fetchOne($0, sql: "PRAGMA wal_autocheckpoint") } ?? -1
    }

    /// Looks every 20 ms for up to two minutes: the background checkpoints run beside every other suite, and on a loaded
    /// machine they fall behind for seconds.
    func waitUntil(_ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline, !(try await condition()) { try await Task.sleep(for: .milliseconds(20)) }
    }

    @Test func whileMaintainedTheWriterLeavesCheckpointsToTheBackgroundAndTakesThemBackAfter() async throws {
        try await withStore { store, path in
            #expect(try await writerAutocheckpoint(store) == 1000)
            let maintenance = Task { await store.maintainInBackground(logger: logger) }
            try await waitUntil { store.backgroundCheckpointCount > 0 }
            #expect(try await writerAutocheckpoint(store) == 0)

            // 2 MiB written: the log's pages reach the database file without any commit checkpointing.
            let before = fileSize(path)
            try await writeRows(500, to: store)
            try await waitUntil { fileSize(path) >= before + 2 << 20 }
            #expect(fileSize(path) >= before + 2 << 20)

            maintenance.cancel()
            await maintenance.value
            #expect(try await writerAutocheckpoint(store) == 1000)
        }
    }

    @Test func theLogFileIsCutBackToItsBoundOnceCheckpointed() async throws {
        try await withStore(maximumWriteAheadLogBytes: 1 << 20) { store, path in
            let maintenance = Task { await store.maintainInBackground(logger: logger) }
            defer { maintenance.cancel() }
            try await waitUntil { store.backgroundCheckpointCount > 0 }
            // One transaction of 4 MiB: the log grows past its bound whatever the checkpoints do.
            try await store.writer.write { db in
                for _ in 0..<500 { try db.execute(sql: "INSERT INTO scratch (payload) VALUES (zeroblob(8000))") }
            }
            #expect(fileSize(path + "-wal") > 1 << 20)
            // Once a checkpoint has copied the whole log, the next commit starts it over and cuts the file back.
            try await waitUntil {
                try await writeRows(1, to: store)
                return fileSize(path + "-wal") <= 1 << 20
            }
            #expect(fileSize(path + "-wal") <= 1 << 20)
            // Nothing written was lost on the way.
            let rows = try await store.writer.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM scratch") } ?? 0
            #expect(rows > 500)
        }
    }

    /// Under a steady stream of writes some write always commits while a checkpoint runs, so no write finds the whole
    /// log copied, which is when SQLite starts it over: without help the log grows as long as the stream lasts.
    @Test func aLogPastItsBoundStartsOverWhileWritesKeepComing() async throws {
        try await withStore(maximumWriteAheadLogBytes: 1 << 20) { store, path in
            let maintenance = Task { await store.maintainInBackground(logger: logger) }
            defer { maintenance.cancel() }
            try await waitUntil { store.backgroundCheckpointCount > 0 }
            let before = logStarts(path) ?? 0
            let writing = Task {
                while !Task.isCancelled { try await writeRows(1, to: store) }
            }
            defer { writing.cancel() }
            // The first write may find the log all copied and start it over, as SQLite does alone; each start after
            // that needs the log past its bound (about 250 of these writes), with no pause among the writes.
            try await waitUntil { logStarts(path) ?? 0 >= before + 3 }
            #expect(logStarts(path) ?? 0 >= before + 3)
            writing.cancel()
            _ = await writing.result
        }
    }

    /// The checkpoint sequence in the write-ahead log's header, which SQLite increments each time the log starts over.
    func logStarts(_ path: String) -> UInt32? {
        guard let file = FileHandle(forReadingAtPath: path + "-wal") else { return nil }
        defer { try? file.close() }
        guard let header = try? file.read(upToCount: 16), header.count == 16 else { return nil }
        return header.suffix(4).reduce(0) { $0 << 8 | UInt32($1) }
    }

    @Test func anInMemoryStoreHasNothingToCheckpoint() async throws {
        let store = try SQLiteRecordStore.inMemory()
        // Returns at once rather than running until cancelled.
        await store.maintainInBackground(logger: logger)
        #expect(store.backgroundCheckpointCount == 0)
    }
}
