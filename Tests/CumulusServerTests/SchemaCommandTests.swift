import CumulusModel
import CumulusStore
import CumulusStoreSQLite
import Foundation
import GRDB
import GhostCarExample
import Logging
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
        #expect(try await ServeProcessTests.run(["containers", "create", "iCloud.com.example.cli", "--create"], data: data).status == 0)
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

/// `cumulus doctor` on a deployment: it names what users would meet (a record type development has and production
/// lacks, links that point past a proxy) and exits 1, and exits 0 once it is set right.
@Suite("cumulus doctor", .timeLimit(.minutes(10)))
struct DoctorCommandTests {
    @Test func doctorNamesASchemaMissingFromProductionAndAProxyThatHidesThePublicURL() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("doctor-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: data) }
        let container = "iCloud.com.example.doctor"
        #expect(try await ServeProcessTests.run(["containers", "create", container, "--create"], data: data).status == 0)
        let file = data.appendingPathComponent("schema.txt")
        try "RECORD TYPE Drive (distance DOUBLE QUERYABLE, name STRING);".write(to: file, atomically: true, encoding: .utf8)
        let development = try await ServeProcessTests.run(
            ["schema", "deploy", file.path, "--container", container, "--environment", "development"], data: data)
        #expect(development.status == 0, "\(development.stderr)")

        // A development-only trial (production has no schema and no API token): told what to do before shipping, and
        // not failed.
        let trial = try await ServeProcessTests.run(["doctor"], data: data)
        #expect(trial.status == 0, "\(trial.stdout)\(trial.stderr)")
        #expect(trial.stdout.contains("warning schema \(container): a development-only trial"), "\(trial.stdout)")
        #expect(!trial.stdout.contains("PROBLEM"), "\(trial.stdout)")

        // Once production has an API token, an app may ship to it: development has a record type production lacks, and
        // every write of it would be refused.
        let production = try await ServeProcessTests.run(["tokens", "create", "--container", container, "--environment", "production"], data: data)
        #expect(production.status == 0, "\(production.stderr)")
        let sick = try await ServeProcessTests.run(["doctor"], data: data)
        #expect(sick.status == 1, "\(sick.stdout)\(sick.stderr)")
        #expect(sick.stdout.contains("PROBLEM schema \(container): development has what production lacks"), "\(sick.stdout)")
        #expect(sick.stdout.contains("Drive"))
        #expect(sick.stdout.contains("ok      disk:"))

        let deployed = try await ServeProcessTests.run(["schema", "deploy", file.path, "--container", container], data: data)
        #expect(deployed.status == 0, "\(deployed.stderr)")
        let healthy = try await ServeProcessTests.run(["doctor"], data: data)
        #expect(healthy.status == 0, "\(healthy.stdout)")
        #expect(healthy.stdout.contains("no problem found"), "\(healthy.stdout)")
        #expect(healthy.stdout.contains("warning indexes \(container): production declares Drive.distance QUERYABLE"), "\(healthy.stdout)")

        // Reached at its own address, the server's links start there; told another public URL, doctor says so.
        let server = try await ServeProcessTests.Server.start(data: data)
        let direct = try await ServeProcessTests.run(["doctor", "--url", server.url], data: data)
        #expect(direct.status == 0 && direct.stdout.contains("ok      proxy: links start with \(server.url)"), "\(direct.stdout)")
        #expect(direct.stdout.contains("ok      clock:"))
        #expect(server.stop() == 0)
        let behindProxy = try await ServeProcessTests.Server.start(arguments: ["--data", data.path, "--public-url", "https://cloud.example.com"])
        let hidden = try await ServeProcessTests.run(["doctor", "--url", behindProxy.url], data: data)
        #expect(hidden.status == 1 && hidden.stdout.contains("PROBLEM proxy: the server hands out links starting https://cloud.example.com"))
        #expect(behindProxy.stop() == 0)
        let unreachable = try await ServeProcessTests.run(["doctor", "--url", "http://127.0.0.1:1"], data: data)
        #expect(unreachable.status == 1 && unreachable.stdout.contains("PROBLEM public URL"))
    }

    /// A zone whose kept digest drifted from its records (devices would verify out of sync while holding what the server
    /// holds) is a problem doctor names, changing nothing; `cumulus zones check-digests` sets it right.
    @Test func doctorNamesAZoneWhoseDigestDrifted() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("doctor-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: data) }
        let container = "iCloud.com.example.drift"
        #expect(try await ServeProcessTests.run(["containers", "create", container, "--create"], data: data).status == 0)
        let path = data.appendingPathComponent("cumulus.sqlite").path
        let logger = Logger(label: "test")
        do {
            let store = try SQLiteRecordStore(path: path)
            let alice = DatabaseRef(container: container, environment: .development, scope: .private, ownerRecordName: "_alice")
            _ = try await store.modifyZones(
                [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Drives"))], in: alice, timestamp: 1, logger: logger)
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: alice, zoneName: "Drives", atomic: false,
                    operations: [RecordModification(operationType: .forceUpdate, recordName: "d1", recordType: "Drive")], author: "_alice",
                    deviceID: "d", timestamp: 1), logger: logger)
        }
        #expect(try await ServeProcessTests.run(["doctor"], data: data).stdout.contains("ok      zone digests:"))
        try await DatabaseQueue(path: path).write { db in try db.execute(sql: "UPDATE zones SET digest_0 = digest_0 + 1 WHERE zone_name = 'Drives'") }
        let drifted = try await ServeProcessTests.run(["doctor"], data: data)
        #expect(drifted.status == 1, "\(drifted.stdout)")
        #expect(
            drifted.stdout.contains("PROBLEM zone digests: 1 zones' digests differ from their records (\(container) private Drives)"),
            "\(drifted.stdout)")
        #expect(try await ServeProcessTests.run(["doctor"], data: data).status == 1, "doctor changed nothing")
        #expect(try await ServeProcessTests.run(["zones", "check-digests"], data: data).status == 1, "check-digests sets it right, and says so")
        #expect(try await ServeProcessTests.run(["doctor"], data: data).stdout.contains("ok      zone digests:"))
    }

    /// A mistyped data directory is a problem named with its absolute path, and doctor creates nothing there.
    @Test func doctorCreatesNoStoreWhereThereIsNone() async throws {
        let missing = "doctor-missing-\(UUID().uuidString)"
        let absolute = URL(fileURLWithPath: missing).standardizedFileURL.path
        defer { try? FileManager.default.removeItem(atPath: absolute) }
        let answer = try await ServeProcessTests.run(["doctor", "--data", missing])
        #expect(answer.status == 1, "\(answer.stdout)\(answer.stderr)")
        #expect(answer.stdout.contains("PROBLEM store: no data directory at \(absolute)"), "\(answer.stdout)")
        #expect(!FileManager.default.fileExists(atPath: absolute), "doctor created the directory")
        // An empty directory is not a store either.
        try FileManager.default.createDirectory(atPath: absolute, withIntermediateDirectories: true)
        let empty = try await ServeProcessTests.run(["doctor", "--data", missing])
        #expect(empty.status == 1 && empty.stdout.contains("PROBLEM store: no store in \(absolute)"), "\(empty.stdout)")
        #expect(!FileManager.default.fileExists(atPath: absolute + "/cumulus.sqlite"))
        // Nor do the administration commands make one unless asked: in another working directory, an empty store would
        // show no container, as if the data were gone.
        let listed = try await ServeProcessTests.run(["containers", "list", "--data", missing])
        #expect(listed.status == 1 && listed.stderr.contains("no store in \(absolute)") && listed.stderr.contains("--create"), "\(listed.stderr)")
        try FileManager.default.removeItem(atPath: absolute)
        let created = try await ServeProcessTests.run(["tokens", "create", "--container", "iCloud.com.example.x", "--data", missing])
        #expect(created.status == 1 && created.stderr.contains("no data directory at \(absolute)"), "\(created.stderr)")
        #expect(!FileManager.default.fileExists(atPath: absolute), "a command created the directory")
        let asked = try await ServeProcessTests.run(["containers", "create", "iCloud.com.example.x", "--data", missing, "--create"])
        #expect(asked.status == 0 && FileManager.default.fileExists(atPath: absolute + "/cumulus.sqlite"), "\(asked.stderr)")
    }
}
