import CumulusModel
import CumulusStore
import Logging
import PostgresNIO
import Testing

@testable import CumulusStorePostgres

/// A batch reads its records by name, one probe of the key per name, whatever PostgreSQL's statistics say of the zone:
/// the rows its statements read from `records` stay within a few per name in a zone of thousands. Two kinds of
/// statistics made PostgreSQL read the zone whole instead: ones taken before the zone grew, where every zone held one
/// record, and fresh ones over many small zones and one large one (the zone of a write comes from a join, so the
/// planner sizes it as the average zone).
@Suite("PostgreSQL store: records read by name", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped), .timeLimit(.minutes(10)))
struct PostgresReadsByNameTests {
    let logger = Logger(label: "test")
    let alice = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice")

    enum Statistics: String, CaseIterable, CustomTestStringConvertible {
        case takenBeforeTheZoneGrew
        case freshOverSkewedZones

        var testDescription: String { rawValue }
    }

    static let smallZones = 100
    static let largeZone = 4_000
    static let batch = 200

    private func modification(_ type: RecordOperationType, _ name: String) -> RecordModification {
        RecordModification(operationType: type, recordName: name, recordType: "Note", fields: ["n": .string(name)])
    }

    private func batch(_ zoneName: String, _ operations: [RecordModification], timestamp: Int64) -> RecordBatch {
        RecordBatch(
            database: alice, zoneName: zoneName, atomic: false, operations: operations, author: "_alice", deviceID: "d",
            timestamp: timestamp, keepsHistory: true)
    }

    /// Rows the statements of `body` read from `records` (heap rows through any index, or by scanning the table), as
    /// PostgreSQL counts them for the transaction `body` runs in.
    private func rowsRead<T: Sendable>(
        _ store: PostgresRecordStore, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> (Int64, T) {
        let logger = self.logger
        return try await store.transaction(logger: logger) { connection in
            @Sendable func count() async throws -> Int64 {
                let rows = try await connection.query(
                    "SELECT seq_tup_read + idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'records'", logger: logger)
                for try await value in rows.decode(Int64.self) { return value }
                return 0
            }
            let before = try await count()
            let result = try await body(connection)
            return (try await count() - before, result)
        }
    }

    @Test(arguments: Statistics.allCases)
    func aBatchReadsItsRecordsNotItsZone(_ statistics: Statistics) async throws {
        try await PostgresTestServer.withFreshDatabase { client, _ in
            let logger = self.logger
            try await PostgresMigrations.migrate(client, logger: logger)
            // Waits with a loaded machine's margins: the suite's other databases, dropped as it runs, make PostgreSQL's
            // checkpoints sync for tens of seconds, and a commit can wait for one.
            let store = PostgresRecordStore(client: client, connectionWait: .seconds(60), operationTimeout: .seconds(180))
            try await store.createContainer("c", createdAt: 0, logger: logger)
            // The statistics stay as the test takes them.
            try await store.transaction(logger: logger) { connection in
                _ = try await connection.query("ALTER TABLE records SET (autovacuum_enabled = false)", logger: logger)
            }
            let zones = (0..<Self.smallZones).map { ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "small\($0)")) }
            let large = ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Large"))
            _ = try await store.modifyZones(zones + [large], in: alice, timestamp: 0, logger: logger)
            for zone in 0..<Self.smallZones {
                _ = try await store.modifyRecords(batch("small\(zone)", [modification(.create, "only")], timestamp: 1), logger: logger)
            }
            if statistics == .takenBeforeTheZoneGrew {
                try await store.transaction(logger: logger) { connection in _ = try await connection.query("ANALYZE records", logger: logger) }
            }
            let names = (0..<Self.largeZone).map { "note-\($0)" }
            for start in stride(from: 0, to: names.count, by: Self.batch) {
                let operations = names[start..<start + Self.batch].map { modification(.create, $0) }
                _ = try await store.modifyRecords(batch("Large", operations, timestamp: 2), logger: logger)
            }
            if statistics == .freshOverSkewedZones {
                try await store.transaction(logger: logger) { connection in _ = try await connection.query("ANALYZE records", logger: logger) }
            }
            // Half the batch replaces records spread over the zone, half creates new ones.
            let replaced = (0..<Self.batch / 2).map { names[$0 * (Self.largeZone / (Self.batch / 2))] }
            let wanted = replaced + (0..<Self.batch / 2).map { "new-\($0)" }
            // A row or two per name for each statement that reads by name (a write and a delete read twice, 400 rows); one
            // read of the zone alone is 4,000.
            let bound = Int64(3 * Self.batch)

            /// A batch as the store writes it, in a transaction whose reads are counted.
            func modify(_ operations: [RecordModification], timestamp: Int64) async throws -> (Int64, [RecordModificationResult]) {
                let written = batch("Large", operations, timestamp: timestamp)
                let planner = RecordBatchPlanner(makeShortGUID: { "guid" })
                return try await rowsRead(store) { connection in
                    try await PostgresRecordStore.run(ModifyRecordsScript.script(written, planner: planner), connection, logger: logger)
                }
            }

            let (written, results) = try await modify(wanted.map { modification(.forceReplace, $0) }, timestamp: 3)
            #expect(results.filter { if case .saved = $0 { true } else { false } }.count == Self.batch, "\(results.prefix(3))")
            #expect(written <= bound, "a write of \(Self.batch) read \(written) rows of records")

            let (looked, found) = try await rowsRead(store) { connection in
                try await PostgresRecordStore.run(
                    ZoneScripts.records(named: wanted, zoneName: "Large", in: alice, access: nil), connection, logger: logger)
            }
            #expect(found.count == Self.batch)
            #expect(looked <= bound, "a lookup of \(Self.batch) read \(looked) rows of records")

            let (deleted, outcomes) = try await modify(replaced.map { modification(.forceDelete, $0) }, timestamp: 4)
            #expect(outcomes.filter { if case .deleted = $0 { true } else { false } }.count == replaced.count, "\(outcomes.prefix(3))")
            #expect(deleted <= bound, "a delete of \(replaced.count) read \(deleted) rows of records")
        }
    }
}
