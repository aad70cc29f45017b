import AsyncHTTPClient
import CumulusModel
import CumulusStorePostgres
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// A store the server can read and not write: writes answer 503 (clients retry), `/health` answers 503 until a write
/// commits again (the server's own probe, every 5 s, finds it), and `cumulus doctor` names it and exits 1. On SQLite
/// the store's files are made immutable (`chattr +i`: root writes through permissions); on PostgreSQL the database is set
/// read-only. Real `cumulus serve` processes.
@Suite("A store that cannot write", .serialized, .timeLimit(.minutes(10)))
struct WriteHealthTests {
    static func health(_ server: ServeProcessTests.Server) async throws -> (Int, String) {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: server.url + "/health"), timeout: .seconds(30))
        return (Int(response.status.code), String(buffer: try await response.body.collect(upTo: 1 << 16)))
    }

    /// Waits (bounded) until `/health` answers `status`.
    static func waitForHealth(_ server: ServeProcessTests.Server, _ status: Int) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if try await health(server).0 == status { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return false
    }

    static func chattr(_ flag: String, _ paths: [String]) throws -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
        process.arguments = [flag] + paths
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus == 0
    }

    /// A zone write through the server, as a device sends it: its HTTP status and `serverErrorCode`.
    static func createZone(_ server: ServeProcessTests.Server, _ query: String, name: String) async throws -> (Int, String?) {
        let (status, json) = try await ServeProcessTests.post(
            "\(server.url)/database/1/\(container)/development/private/zones/modify?\(query)",
            #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"\#(name)"}}}]}"#, timeout: .seconds(30))
        return (status, json["serverErrorCode"]?.stringValue ?? json["zones"]?.arrayValue?.first?["serverErrorCode"]?.stringValue)
    }

    static let container = "iCloud.com.example.health"

    /// Runs SQL with `psql` at `url`; whether it succeeded.
    static func psql(_ url: String, _ sql: String) throws -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
        process.arguments = [url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus == 0
    }

    @Test func anSQLiteStoreThatCannotWriteIsUnhealthyUntilItCanAgain() async throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/chattr") else {
            Issue.record("this test makes files immutable with chattr, as root, as .ci/run runs it")
            return
        }
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-health-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        let files = ["cumulus.sqlite", "cumulus.sqlite-wal"].map { data.appendingPathComponent($0).path }
        defer {
            _ = try? Self.chattr("-i", files)
            try? FileManager.default.removeItem(at: data)
        }
        let server = try await ServeProcessTests.Server.start(data: data)
        defer { _ = server.stop() }
        let (apiToken, webToken) = try await ServeProcessTests.containerWithAlice(Self.container, data: data)
        let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)"
        #expect(try await Self.createZone(server, query, name: "Before").0 == 200)
        #expect(try await Self.health(server).0 == 200)

        #expect(try Self.chattr("+i", files), "chattr +i")
        let refused = try await Self.createZone(server, query, name: "During")
        #expect(refused.0 == 503 && refused.1 == "TRY_AGAIN_LATER", "a write that cannot commit is retried later, not a 500: \(refused)")
        let (status, body) = try await Self.health(server)
        #expect(status == 503 && body.hasPrefix("writes fail since "), "\(status) \(body)")
        #expect(!body.contains(data.path), "a stranger reads no path")
        let doctor = try await ServeProcessTests.run(["doctor"], data: data)
        #expect(doctor.status == 1 && doctor.stdout.contains("PROBLEM writes: the store cannot be written"), "\(doctor.stdout)\(doctor.stderr)")

        // Writable again: the server's probe finds it without a request's write.
        #expect(try Self.chattr("-i", files))
        #expect(try await Self.waitForHealth(server, 200), "/health stayed 503 after the store could write again")
        #expect(try await Self.createZone(server, query, name: "After").0 == 200)
        let healthy = try await ServeProcessTests.run(["doctor"], data: data)
        #expect(healthy.stdout.contains("ok      writes: a write commits"), "\(healthy.stdout)")
    }

    @Test(.enabled(if: TestStore.postgresURL != nil)) func aReadOnlyPostgreSQLDatabaseIsUnhealthyUntilItCanWriteAgain() async throws {
        let location = try await TestStore.makePostgresDatabase()
        let serverURL = try #require(TestStore.postgresURL)
        var components = try #require(URLComponents(string: serverURL))
        components.path = "/" + location.database
        let database = try #require(components.string)
        func run(_ arguments: [String]) async throws -> ServeProcessTests.CommandResult {
            try await ServeProcessTests.run(arguments + ["--database", database])
        }
        _ = try await run(["containers", "create", Self.container])
        let apiToken = try await run(["tokens", "create", "--container", Self.container]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        _ = try await run(["users", "create", "alice", "--container", Self.container])
        let webToken = try await run(["users", "token", "alice", "--container", Self.container]).stdout.trimmingCharacters(
            in: .whitespacesAndNewlines)
        let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)"
        // Connections made after the setting read it: the server keeps none open long (idle ones close), as a pool after a
        // failover would open new ones.
        let server = try await ServeProcessTests.Server.start(arguments: ["--database", database, "--database-connections", "2"])
        defer { _ = server.stop() }
        #expect(try await Self.createZone(server, query, name: "Before").0 == 200)

        let admin = try #require(TestStore.postgresURL)
        func alter(_ readOnly: Bool) async throws {
            let result = try Self.psql(
                admin,
                "ALTER DATABASE \(location.database) SET default_transaction_read_only = \(readOnly ? "on" : "off"); "
                    + "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(location.database)' AND pid <> pg_backend_pid()")
            #expect(result, "psql")
        }
        try await alter(true)
        var refused: (Int, String?) = (0, nil)
        // The server's connections were ended: its first tries may meet a closed one, and are retried by the client.
        for _ in 0..<20 {
            refused = try await Self.createZone(server, query, name: "During")
            if refused.0 == 503, try await Self.health(server).0 == 503 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(refused.0 == 503 && refused.1 == "TRY_AGAIN_LATER", "\(refused)")
        #expect(try await Self.health(server).0 == 503)
        let doctor = try await run(["doctor"])
        #expect(doctor.status == 1 && doctor.stdout.contains("PROBLEM writes: the store cannot be written"), "\(doctor.stdout)\(doctor.stderr)")

        try await alter(false)
        #expect(try await Self.waitForHealth(server, 200), "/health stayed 503 after the database could write again")
        #expect(try await Self.createZone(server, query, name: "After").0 == 200)
    }
}
