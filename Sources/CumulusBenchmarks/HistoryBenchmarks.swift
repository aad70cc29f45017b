import CumulusCore
import CumulusModel
import CumulusStore
import CumulusStorePostgres
import Foundation
import GRDB
import Logging
import PostgresNIO
import Synchronization

extension Benchmarks {
    /// `--only history`: what keeping the versions a write replaces costs (single and batched writes of existing
    /// records, with and without history, alternating; bytes per kept version), and the time of a restore of a zone of
    /// `records` records every one of which changed since the moment.
    static func history(records: Int, on kind: BenchStore) async throws {
        let (store, cleanUp, location) = try await kind.makeLocated()
        defer { cleanUp() }
        let logger = Logger(label: "bench")
        try await store.createContainer("c", createdAt: 0, logger: logger)
        let database = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_u")
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Drives"))], in: database, timestamp: 0, logger: logger)
        let route = Data((0..<675).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        // A drive of about 1 KB, as the other write benchmarks write.
        func write(_ indices: some Sequence<Int>, round: Int, keepsHistory: Bool, timestamp: Int64) async throws {
            let operations = indices.map { index in
                RecordModification(
                    operationType: .forceReplace, recordName: String(format: "drive-%06d", index), recordType: "Drive",
                    fields: [
                        "startTime": .timestamp(1_700_000_000_000 + Int64(index)), "distance": .double(Double(index)),
                        "coordinatesData": .bytes(route), "customName": .string("Drive \(index), round \(round)"), "modifiedAt": .int64(Int64(round)),
                    ])
            }
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: database, zoneName: "Drives", atomic: true, operations: operations, author: "_u", deviceID: "d", timestamp: timestamp,
                    keepsHistory: keepsHistory), logger: logger)
        }
        for start in stride(from: 0, to: records, by: batchSize) {
            try await write(start..<min(start + batchSize, records), round: 0, keepsHistory: false, timestamp: 1)
        }

        // Single writes: one record a batch, 500 a round, rounds alternating without and with history.
        var single: [Bool: Duration] = [false: .zero, true: .zero]
        let perRound = 500
        for round in 1...8 {
            let keeps = round % 2 == 0
            let start = ContinuousClock.now
            for index in 0..<perRound { try await write([(round * perRound + index) % records], round: round, keepsHistory: keeps, timestamp: 10) }
            single[keeps, default: .zero] += ContinuousClock.now - start
        }
        let singleWrites = 4 * perRound
        for keeps in [false, true] {
            let seconds = single[keeps]!.seconds
            print(
                "| single write of an existing record, \(kind.name), history \(keeps ? "on" : "off") | \(singleWrites) | \(format(seconds)) | \(Int(Double(singleWrites) / seconds)) | \(String(format: "%.0f", seconds / Double(singleWrites) * 1e6)) µs a write; rounds alternate |"
            )
        }

        // Batched writes: the whole zone in batches of 200, twice each way, alternating, after a round that warms the
        // store (on PostgreSQL, the first rewrite of every row pays for the table's growth).
        var batched: [Bool: Duration] = [false: .zero, true: .zero]
        for first in stride(from: 0, to: records, by: batchSize) {
            try await write(first..<min(first + batchSize, records), round: 100, keepsHistory: false, timestamp: 20)
        }
        for round in 1...4 {
            let keeps = round % 2 == 0
            let start = ContinuousClock.now
            for first in stride(from: 0, to: records, by: batchSize) {
                try await write(first..<min(first + batchSize, records), round: 100 + round, keepsHistory: keeps, timestamp: 20)
            }
            batched[keeps, default: .zero] += ContinuousClock.now - start
        }
        for keeps in [false, true] {
            let seconds = batched[keeps]!.seconds
            print(
                "| batched write of existing records, \(kind.name), history \(keeps ? "on" : "off") | \(2 * records) | \(format(seconds)) | \(Int(Double(2 * records) / seconds)) | batches of 200; \(String(format: "%.1f", seconds / Double(2 * records) * 1e6)) µs a record |"
            )
        }

        // Every record changes once more after the moment; a restore brings every one back.
        for first in stride(from: 0, to: records, by: batchSize) {
            try await write(first..<min(first + batchSize, records), round: 999, keepsHistory: true, timestamp: 100)
        }
        let versions = singleWrites / 2 + 2 * records + records
        let bytes = try await historyBytes(kind, location: location)
        print(
            "| history size, \(kind.name) | \(versions) | — | — | \(bytes / versions) bytes a kept version of a 1 KB record, indexes included (\(bytes / 1_048_576) MiB) |"
        )
        let service = DatabaseService(store: store, clock: WallClock { Date(timeIntervalSince1970: 1) }, historyRetention: .seconds(86_400))
        for pass in ["first", "second"] {
            let dryStart = ContinuousClock.now
            let dry = try await service.history.restoreZone("Drives", in: database, to: 50, dryRun: true, logger: logger)
            let drySeconds = (ContinuousClock.now - dryStart).seconds
            print(
                "| restore dry run (\(pass)), \(kind.name) | \(dry.changed) | \(format(drySeconds)) | \(Int(Double(dry.changed) / drySeconds)) | the difference of a \(records)-record zone, every record changed since |"
            )
        }
        let restoreStart = ContinuousClock.now
        let restored = try await service.history.restoreZone("Drives", in: database, to: 50, dryRun: false, logger: logger)
        let restoreSeconds = (ContinuousClock.now - restoreStart).seconds
        precondition(restored.changed == records && restored.failures.isEmpty, "\(restored)")
        print(
            "| restore, \(kind.name) | \(restored.changed) | \(format(restoreSeconds)) | \(Int(Double(restored.changed) / restoreSeconds)) | pages of 400, each one transaction, history kept so it can be undone |"
        )
    }

    /// The bytes the history takes on disk, its indexes included.
    static func historyBytes(_ kind: BenchStore, location: String) async throws -> Int {
        switch kind {
        case .sqlite:
            let queue = try DatabaseQueue(path: location)
            defer { try? queue.close() }
            return try await queue.read { db in
                try Int.fetchOne(
                    db, sql: "SELECT SUM(pgsize) FROM dbstat WHERE name IN ('record_history', 'record_history_zone', 'record_history_age')")
                    ?? 0
            }
        case .postgres:
            let found = Mutex(0)
            try await BenchStore.onServer(try PostgresLocation(url: location)) { client in
                let rows = try await client.query("SELECT pg_total_relation_size('record_history')", logger: Logger(label: "bench"))
                for try await size in rows.decode(Int64.self) { found.withLock { $0 = Int(size) } }
            }
            return found.withLock { $0 }
        }
    }
}
