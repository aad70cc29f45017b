import CumulusModel
import CumulusSyncGRDB
import Foundation
import GRDB
import GhostCarExample
import Testing

/// The model linter: each rule of CloudKit sync reported on a table that breaks it, and none on the Ghost Car table.
@Suite("Model linter", .timeLimit(.minutes(10)))
struct ModelLinterTests {
    /// The problems of one `items` table mapped with `columns`.
    func problems(_ sql: String, columns: [SyncedColumn], parent: (column: String, table: String?)? = nil) throws -> [ModelProblem] {
        let queue = try DatabaseQueue()
        try queue.write { db in try db.execute(sql: sql) }
        let table = SyncedTable(
            tableName: "items", recordType: "Item", zoneID: ZoneID(zoneName: "Items"), columns: columns, parentColumn: parent?.column,
            parentTable: parent?.table)
        return try queue.read { db in try ModelLinter.check([table], in: db) }
    }

    @Test func theGhostCarTablePasses() throws {
        let queue = try DatabaseQueue()
        try GhostCar.migrate(queue)
        let problems = try queue.read { db in try ModelLinter.check([GhostCar.drivesTable()], in: db) }
        #expect(problems.allSatisfy { $0.isWarning }, "\(problems)")
        // Its route blob is unbounded: flagged, as a record can outgrow 1 MB, but not an error.
        #expect(problems.map(\.rule) == [.recordSize])
        try queue.read { db in try ModelLinter.validate([GhostCar.drivesTable()], in: db) }
    }

    @Test func uniqueConstraintsOtherThanTheRecordNameAreErrors() throws {
        let found = try problems(
            "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, email TEXT UNIQUE, code TEXT); CREATE UNIQUE INDEX items_code ON items(code)",
            columns: [SyncedColumn("email", type: .string), SyncedColumn("code", type: .string)])
        #expect(
            found.filter { $0.rule == .uniqueConstraint }.map(\.column) == ["code", "email"]
                || found.filter { $0.rule == .uniqueConstraint }.count == 2)
        #expect(found.allSatisfy { !$0.isWarning })
    }

    @Test func requiredColumnsWithoutADefaultAreErrors() throws {
        let found = try problems(
            "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, title TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0)",
            columns: [SyncedColumn("title", type: .string), SyncedColumn("done", type: .int64)])
        #expect(found.map(\.rule) == [.requiredColumn])
        #expect(found.first?.column == "title")
        #expect(found.first?.fix.contains("DEFAULT") == true)
    }

    @Test func columnTypesMustHoldTheirFieldType() throws {
        let found = try problems(
            "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, price TEXT, count INTEGER)",
            columns: [SyncedColumn("price", type: .double), SyncedColumn("count", type: .int64)])
        #expect(found.map(\.rule) == [.columnType])
        #expect(found.first?.column == "price")
        #expect(found.first?.fix.contains("REAL") == true)
    }

    @Test func aParentColumnMustPointAtASyncedTable() throws {
        let found = try problems(
            "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, listID TEXT)", columns: [], parent: (column: "listID", table: "lists"))
        #expect(found.map(\.rule) == [.parent])
        #expect(found.first?.message.contains("lists") == true)
    }

    @Test func reservedAndInvalidFieldNamesAreErrors() throws {
        let found = try problems(
            "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, recordName TEXT, \"my field\" TEXT, ok TEXT)",
            columns: [SyncedColumn("recordName", type: .string), SyncedColumn("my field", type: .string), SyncedColumn("ok", type: .string)])
        #expect(found.map(\.rule) == [.fieldName, .fieldName])
        #expect(Set(found.compactMap(\.column)) == ["recordName", "my field"])
    }

    @Test func mappedColumnsMustExist() throws {
        let found = try problems("CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL)", columns: [SyncedColumn("title", type: .string)])
        #expect(found.map(\.rule) == [.missingColumn])
    }

    @Test func unboundedBlobsAreFlaggedAndBoundedOnesPass() throws {
        let unbounded = try problems(
            "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, photo BLOB)", columns: [SyncedColumn("photo", type: .bytes)])
        #expect(unbounded.map(\.rule) == [.recordSize])
        #expect(unbounded.allSatisfy { $0.isWarning })
        let bounded = try problems(
            "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, photo BLOB CHECK (length(photo) <= 200000))",
            columns: [SyncedColumn("photo", type: .bytes)])
        #expect(bounded.isEmpty)
        let tooMuch = try problems(
            "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, a BLOB CHECK (length(a) <= 800000), b BLOB CHECK (length(b) <= 800000))",
            columns: [SyncedColumn("a", type: .bytes), SyncedColumn("b", type: .bytes)])
        #expect(tooMuch.map(\.rule) == [.recordSize])
    }

    @Test func theAdapterRefusesABrokenModelListingEveryProblem() throws {
        let queue = try DatabaseQueue()
        try queue.write { db in try db.execute(sql: "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, title TEXT NOT NULL UNIQUE)") }
        let table = SyncedTable(
            tableName: "items", recordType: "Item", zoneID: ZoneID(zoneName: "Items"), columns: [SyncedColumn("title", type: .string)])
        let error = #expect(throws: ModelLintError.self) { try queue.read { db in try ModelLinter.validate([table], in: db) } }
        #expect(Set(error?.problems.map(\.rule) ?? []) == [.uniqueConstraint, .requiredColumn])
        #expect(error?.description.contains("Fix:") == true)
    }

    @Test func typesAreComparedWithTheServersSchema() throws {
        let schema = try SchemaLanguage.read("RECORD TYPE Drive (distance STRING, duration DOUBLE);")
        let found = ModelLinter.compare([GhostCar.drivesTable()], with: schema)
        #expect(found.map(\.column) == ["distance"])
        #expect(found.first?.message.contains("DOUBLE") == true && found.first?.message.contains("STRING") == true)
    }
}
