import CumulusModel
import CumulusStore
import Logging
import PostgresNIO
import Testing

@testable import CumulusStorePostgres

/// Statements on the hot paths are prepared once per connection (``PostgresPreparedText``): a write runs them by name,
/// and a statement prepared in a transaction that rolls back, or one whose execution failed, still serves the next.
@Suite("PostgreSQL store: prepared statements", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped), .timeLimit(.minutes(10)))
struct PostgresPreparedStatementTests {
    let logger = Logger(label: "test")
    let alice = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice")

    /// A statement of the test's own, first prepared inside a transaction the test rolls back.
    private enum Ratio: PostgresPreparedText {
        static let name = "cumulus_test_ratio"
        static let sql = "SELECT 12 / $1::int"
    }

    /// The store answers it as "unavailable", as any error that is not its own.
    private struct Abandoned: Error {}

    /// The names of the statements prepared on the store's connection (it has one).
    private func prepared(_ store: PostgresRecordStore) async throws -> Set<String> {
        try await store.transaction(logger: logger) { connection in
            var names: Set<String> = []
            for try await name in try await connection.query("SELECT name FROM pg_prepared_statements", logger: logger).decode(String.self) {
                names.insert(name)
            }
            return names
        }
    }

    private func ratio(_ divisor: Int32, _ connection: PostgresConnection) async throws -> Int32? {
        var bindings = PostgresBindings()
        bindings.append(divisor)
        for try await row in try await connection.run(Ratio.self, bindings, logger: logger) { return try row.decode(Int32.self) }
        return nil
    }

    private func write(_ value: Int64, _ store: PostgresRecordStore) async throws {
        _ = try await store.modifyRecords(
            RecordBatch(
                database: alice, zoneName: "Z", atomic: false,
                operations: [RecordModification(operationType: .forceReplace, recordName: "r", recordType: "T", fields: ["n": .int64(value)])],
                author: "_alice", deviceID: "d", timestamp: value, keepsHistory: true), logger: logger)
    }

    @Test func aWriteRunsItsStatementsByNameAndAStatementOutlivesARollbackAndAFailedExecution() async throws {
        let store = try await PostgresTestServer.makeStore(connections: 1)
        try await store.createContainer("c", createdAt: 0, logger: logger)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z"))], in: alice, timestamp: 0, logger: logger)

        // Prepared in a transaction that rolls back: PostgreSQL keeps it, and PostgresNIO runs it by name afterwards.
        await #expect(throws: StoreError.self) {
            try await store.transaction(logger: logger) { connection in
                #expect(try await ratio(4, connection) == 3)
                throw Abandoned()
            }
        }
        #expect(try await prepared(store).contains(Ratio.name))
        // A failed execution (division by zero) leaves the statement in service.
        await #expect(throws: (any Error).self) {
            try await store.transaction(logger: logger) { connection in _ = try await ratio(0, connection) }
        }
        #expect(try await store.transaction(logger: logger) { connection in try await ratio(6, connection) } == 2)

        // A single write three times: a create, then replacements that keep the version they replace; the third runs
        // only what the first two prepared.
        try await write(1, store)
        try await write(2, store)
        let names = try await prepared(store)
        for statement in [
            "cumulus_begin", "cumulus_commit", "cumulus_zone_locked_with_records", "cumulus_save_records_ending_write",
            "cumulus_save_records_ending_write_keeping",
        ] {
            #expect(names.contains(statement), "\(statement) is prepared")
        }
        try await write(3, store)
        #expect(try await prepared(store) == names)
        // Planned with each execution's parameters: a generic plan made while a zone was small would scan it as it grows.
        let mode = try await store.transaction(logger: logger) { connection in
            var mode = ""
            for try await value in try await connection.query("SHOW plan_cache_mode", logger: logger).decode(String.self) { mode = value }
            return mode
        }
        #expect(mode == "force_custom_plan")
        let records = try await store.records(named: ["r"], zoneName: "Z", in: alice, access: nil, logger: logger)
        #expect(try records["r"]?.fields()["n"] == .int64(3))
    }

    @Test func aPreparationALockTimeoutCancelledClosesItsConnectionAndTheNextWriteSucceeds() async throws {
        let store = try await PostgresTestServer.makeStore(connections: 1)
        try await store.createContainer("c", createdAt: 0, logger: logger)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z"))], in: alice, timestamp: 0, logger: logger)
        // For the rest of its session, the store's only connection gives up on a lock after 200 ms.
        let database = try await store.transaction(logger: logger) { connection in
            try await connection.query("SET lock_timeout = '200ms'", logger: logger)
            var name = ""
            for try await value in try await connection.query("SELECT current_database()", logger: logger).decode(String.self) { name = value }
            return name
        }
        var location = try PostgresLocation(url: try #require(PostgresTestServer.url))
        location.database = database
        try await PostgresTestServer.withClient(location) { other in
            try await other.withConnection { holder in
                try await holder.query("BEGIN", logger: logger)
                try await holder.query("LOCK TABLE records IN ACCESS EXCLUSIVE MODE", logger: logger)
                // The write's first statement that reads `records` is prepared now, and its preparation waits for the
                // table: the lock timeout cancels it.
                await #expect(throws: StoreError.self) { try await write(1, store) }
                try await holder.query("ROLLBACK", logger: logger)
            }
        }
        // That connection was closed, so the pool's next one prepares the statement afresh; on the same connection,
        // PostgresNIO would answer every later run of it with the remembered error.
        try await write(2, store)
        let records = try await store.records(named: ["r"], zoneName: "Z", in: alice, access: nil, logger: logger)
        #expect(try records["r"]?.fields()["n"] == .int64(2))
    }
}
