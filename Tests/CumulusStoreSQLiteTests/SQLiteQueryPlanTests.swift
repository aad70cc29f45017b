import CumulusModel
import CumulusStore
import GRDB
import GRDBSQLite
import Logging
import Testing

@testable import CumulusStoreSQLite

/// Queries must use indexes, not scan every record: checked on SQLite's own query plans.
@Suite("SQLite query plans", .timeLimit(.minutes(10)))
struct SQLiteQueryPlanTests {
    let logger = Logger(label: "test")
    let alice = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice")

    func plan(_ query: RecordQuery, store: SQLiteRecordStore) async throws -> String {
        let compiled = try SQLiteQueryCompiler(query: query)
        try await store.ensureFieldIndexes(compiled.indexedFields, query: query)
        let (sql, arguments) = compiled.statements(zoneRowIDs: [2])[0]
        return try await store.writer.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments).map { $0["detail"] as String }.joined(separator: "\n")
        }
    }

    /// A store with one record holding `fields`: only fields some record holds are indexed.
    func store(holding fields: [String: FieldValue], maximumFieldIndexes: Int = 64) async throws -> SQLiteRecordStore {
        var config = GRDB.Configuration()
        config.prepareDatabase { db in db.add(function: SQLiteRecordStore.distanceFunction) }
        let store = try SQLiteRecordStore(writer: DatabaseQueue(configuration: config), maximumFieldIndexes: maximumFieldIndexes)
        try await store.createContainer("c", createdAt: 0, logger: logger)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z"))], in: alice, timestamp: 0, logger: logger)
        _ = try await store.modifyRecords(
            RecordBatch(
                database: alice, zoneName: "Z", atomic: true,
                operations: [RecordModification(operationType: .create, recordName: "r", recordType: "Drive", fields: fields.mapValues { $0 })],
                author: "_alice", deviceID: "d", timestamp: 0),
            logger: logger)
        return store
    }

    func fieldIndexes(_ store: SQLiteRecordStore) async throws -> Set<String> {
        try await store.writer.read { db in
            Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'records_field_%'"))
        }
    }

    @Test func madeUpFieldNamesCreateNoIndexAndIndexesAreCapped() async throws {
        let store = try await store(holding: ["name": .string("x"), "a": .int64(1), "b": .int64(2)], maximumFieldIndexes: 2)
        func query(_ field: String) async throws {
            _ = try await store.queryRecords(
                RecordQuery(
                    database: alice, zoneName: "Z", recordType: "Drive",
                    filters: [QueryFilter(comparator: .equals, field: .field(field), value: .string("x"))], sorts: [], limit: 10),
                logger: logger)
        }
        for index in 0..<50 { try await query("madeUp\(index)") }
        #expect(try await fieldIndexes(store).isEmpty, "no record holds those fields")
        try await query("name")
        try await query("a")
        try await query("b")
        #expect(try await fieldIndexes(store) == [SQLiteQueryCompiler.indexName("name"), SQLiteQueryCompiler.indexName("a")], "capped at two")
    }

    @Test func anonymousQueriesMakeNoIndex() async throws {
        let store = try await store(holding: ["name": .string("x")])
        var query = RecordQuery(
            database: alice, zoneName: "Z", recordType: "Drive",
            filters: [QueryFilter(comparator: .equals, field: .field("name"), value: .string("x"))], sorts: [], limit: 10,
            createsIndexes: false)
        #expect(try await store.queryRecords(query, logger: logger).records.count == 1, "answered without an index")
        #expect(try await fieldIndexes(store).isEmpty)
        query.createsIndexes = true
        _ = try await store.queryRecords(query, logger: logger)
        #expect(try await fieldIndexes(store) == [SQLiteQueryCompiler.indexName("name")])
    }

    /// A field declared in production gets its index, and its query uses it, when development's queries hold the whole
    /// budget.
    @Test func aProductionQueryUsesAnIndexPastTheDevelopmentBudget() async throws {
        let store = try await store(holding: ["name": .string("x"), "title": .string("y")], maximumFieldIndexes: 1)
        func query(_ field: String, required: Bool) -> RecordQuery {
            RecordQuery(
                database: alice, zoneName: "Z", recordType: "Drive",
                filters: [QueryFilter(comparator: .equals, field: .field(field), value: .string("x"))], sorts: [], limit: 10,
                indexesRequired: required)
        }
        _ = try await plan(query("name", required: false), store: store)
        let unindexed = try await plan(query("title", required: false), store: store)
        #expect(!unindexed.contains(SQLiteQueryCompiler.indexName("title")), "the budget is held: \(unindexed)")
        let declared = try await plan(query("title", required: true), store: store)
        #expect(declared.contains("USING INDEX \(SQLiteQueryCompiler.indexName("title"))"), "\(declared)")
        #expect(try await fieldIndexes(store) == [SQLiteQueryCompiler.indexName("name"), SQLiteQueryCompiler.indexName("title")])
    }

    @Test func filtersAndSortsUseFieldIndexes() async throws {
        let store = try await store(holding: ["name": .string("x"), "duration": .double(1), "startTime": .timestamp(1)])
        let equality = RecordQuery(
            database: alice, zoneName: "Z", recordType: "Drive",
            filters: [QueryFilter(comparator: .equals, field: .field("name"), value: .string("x"))],
            sorts: [], limit: 10
        )
        let equalityPlan = try await plan(equality, store: store)
        #expect(equalityPlan.contains("USING INDEX \(SQLiteQueryCompiler.indexName("name"))"), "\(equalityPlan)")

        // A range filter with a sort walks the sort key's index: no sort step over all matches.
        let rangeAndSort = RecordQuery(
            database: alice, zoneName: "Z", recordType: "Drive",
            filters: [QueryFilter(comparator: .greaterThan, field: .field("duration"), value: .double(650))],
            sorts: [QuerySort(field: .field("startTime"), ascending: false)], limit: 10
        )
        let rangePlan = try await plan(rangeAndSort, store: store)
        #expect(rangePlan.contains("USING INDEX \(SQLiteQueryCompiler.indexName("startTime"))"), "\(rangePlan)")
        #expect(!rangePlan.contains("TEMP B-TREE"), "\(rangePlan)")

        // After a cursor, the page seeks into the sort index instead of scanning up to the cursor.
        var deepPage = rangeAndSort
        deepPage.after = QueryCursor(keys: [.integer(1_700_000_000_000)], rowID: 500)
        let deepPlan = try await plan(deepPage, store: store)
        #expect(
            deepPlan.contains("USING INDEX \(SQLiteQueryCompiler.indexName("startTime")) (zone_id=? AND record_type=? AND <expr><?)"), "\(deepPlan)")

        let bySystemField = RecordQuery(
            database: alice, zoneName: "Z", recordType: "Drive", filters: [], sorts: [QuerySort(field: .system(.modifiedTimestamp))], limit: 10
        )
        let systemPlan = try await plan(bySystemField, store: store)
        #expect(systemPlan.contains("USING INDEX records_modified"), "\(systemPlan)")
    }

    /// The virtual-machine steps SQLite ran for `body` on the store's one connection: every prepared statement's
    /// count, reset first. It grows with the rows a statement reads, so a scan of the zone shows as a count of its size.
    func steps(_ store: SQLiteRecordStore, _ body: () async throws -> Void) async throws -> Int {
        func sum(reset: Bool) async throws -> Int {
            try await store.writer.read { db in
                var total = 0
                var statement = sqlite3_next_stmt(db.sqliteConnection, nil)
                while let current = statement {
                    total += Int(sqlite3_stmt_status(current, Int32(SQLITE_STMTSTATUS_VM_STEP), reset ? 1 : 0))
                    statement = sqlite3_next_stmt(db.sqliteConnection, current)
                }
                return total
            }
        }
        _ = try await sum(reset: true)
        try await body()
        return try await sum(reset: false)
    }

    /// A reconciliation's ranges read only their part of the zone: 64 empty ranges past its last name cost about what
    /// one record's range costs, not 64 scans of the zone (issue 54: 834 ms on 50,000 records, a feed page 1.6 ms).
    @Test func aReconciliationReadsOnlyItsRanges() async throws {
        let store = try await store(holding: [:])
        for batch in stride(from: 0, to: 2_000, by: 500) {
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: alice, zoneName: "Z", atomic: true,
                    operations: (batch..<batch + 500).map { index in
                        // d00000 to d01999: names in the order of their numbers.
                        let name = "d" + String(100_000 + index).dropFirst()
                        return RecordModification(operationType: .create, recordName: name, recordType: "Drive", fields: [:])
                    },
                    author: "_alice", deviceID: "d", timestamp: 0),
                logger: logger)
        }
        func scan(_ ranges: [RecordNameRange]) async throws -> (steps: Int, records: Int64) {
            var records: Int64 = 0
            let steps = try await steps(store) {
                for range in ranges {
                    records += try await store.scanRecords(DigestScan(), in: range, zoneName: "Z", database: alice, access: nil, logger: logger)
                        .digest.recordCount
                }
            }
            return (steps, records)
        }
        let whole = try await scan([.all])
        #expect(whole.records == 2_001, "the 2,000 and the store's first record")
        let pastTheEnd = try await scan((0..<64).map { RecordNameRange(lowerBound: "z\($0 * 2)", upperBound: "z\($0 * 2 + 1)") })
        #expect(pastTheEnd.records == 0)
        let middle = try await scan([RecordNameRange(lowerBound: "d01000", upperBound: "d01010"), RecordNameRange(upperBound: "d00005")])
        #expect(middle.records == 15)
        // Without the bounds in the index's reach, each empty range stepped through all 2,001 records (64 times the
        // whole zone's count); with them, a range costs a few steps of its own.
        #expect(pastTheEnd.steps < whole.steps / 4, "64 empty ranges: \(pastTheEnd.steps) steps, the whole zone: \(whole.steps)")
        #expect(middle.steps < whole.steps / 20, "15 records in two ranges: \(middle.steps) steps, the whole zone: \(whole.steps)")
    }
}
