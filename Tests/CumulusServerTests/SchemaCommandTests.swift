import CumulusModel
import Foundation
import GRDB
import GhostCarExample
import Testing

/// `cumulus schema check`, `export` and `deploy`, through the real binary: the model linter's list and exit status, a
/// schema's round trip, a deploy refused.
@Suite("Schema commands", .timeLimit(.minutes(10)))
struct SchemaCommandTests {
    @Test func schemaCheckExitsNonZeroWithTheList() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lint-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let good = directory.appendingPathComponent("good.sqlite")
        let goodQueue = try DatabaseQueue(path: good.path)
        try GhostCar.migrate(goodQueue)
        try goodQueue.close()
        let passed = try await ServeProcessTests.run(["schema", "check", good.path])
        #expect(passed.status == 0, "\(passed.stderr)")
        let bad = directory.appendingPathComponent("bad.sqlite")
        let badQueue = try DatabaseQueue(path: bad.path)
        try badQueue.inDatabase { db in
            try db.execute(sql: "CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, title TEXT NOT NULL, code TEXT UNIQUE, price NUMERIC)")
        }
        try badQueue.close()
        let failed = try await ServeProcessTests.run(["schema", "check", bad.path])
        #expect(failed.status == 1)
        #expect(failed.stdout.contains("items.title [required-column]"), "\(failed.stdout)")
        #expect(failed.stdout.contains("[unique-constraint]"))
        #expect(failed.stdout.contains("items.price [column-type]"))
        #expect(failed.stderr.contains("3 problems"))
    }

    @Test func schemaExportAndDeployFromTheCommandLine() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("schema-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: data) }
        #expect(try await ServeProcessTests.run(["containers", "create", "iCloud.com.example.cli"], data: data).status == 0)
        let file = data.appendingPathComponent("schema.txt")
        try "RECORD TYPE Drive (distance DOUBLE QUERYABLE SORTABLE, name STRING);".write(to: file, atomically: true, encoding: .utf8)
        let deployed = try await ServeProcessTests.run(["schema", "deploy", file.path, "--container", "iCloud.com.example.cli"], data: data)
        #expect(deployed.status == 0, "\(deployed.stderr)")
        #expect(deployed.stdout.contains("add field Drive.distance DOUBLE QUERYABLE SORTABLE"))
        let exported = try await ServeProcessTests.run(
            ["schema", "export", "--container", "iCloud.com.example.cli", "--environment", "production"], data: data)
        let declared = try SchemaLanguage.read(String(contentsOf: file, encoding: .utf8))
        #expect(try SchemaLanguage.read(exported.stdout) == declared)
        try "RECORD TYPE Drive (distance STRING, name STRING);".write(to: file, atomically: true, encoding: .utf8)
        let refused = try await ServeProcessTests.run(["schema", "deploy", file.path, "--container", "iCloud.com.example.cli"], data: data)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("refused: field Drive.distance: type DOUBLE cannot change to STRING"))
    }
}
