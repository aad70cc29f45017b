import AsyncHTTPClient
import Crypto
import CumulusCore
import CumulusModel
import CumulusServer
import Foundation
import GRDB
import NIOCore
import NIOHTTP1
import Testing

/// Drives the real `cumulus` executable, because that is what users run: administration commands, `serve` on a
/// loopback port, and a graceful shutdown that loses no acknowledged write.
@Suite("The cumulus executable", .serialized, .timeLimit(.minutes(10)))
struct ServeProcessTests {
    static var binary: URL {
        if let path = ProcessInfo.processInfo.environment["CUMULUS_BINARY"] { return URL(fileURLWithPath: path) }
        // The test bundle sits beside the products it was built with.
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        if directory.lastPathComponent.hasSuffix(".xctest") || directory.lastPathComponent == "MacOS" {
            directory = directory.deletingLastPathComponent()
        }
        return directory.appendingPathComponent("cumulus")
    }

    struct CommandResult {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs blocking work (waiting on a process, reading its pipes) on a thread of its own: on the two cooperative
    /// threads of a 2-core machine it would stall every other test's tasks, servers' handlers included.
    static func onThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try work() }) }.start()
        }
    }

    /// Runs a command to completion on an SQLite data directory.
    static func run(_ arguments: [String], data: URL) async throws -> CommandResult {
        try await run(arguments + ["--data", data.path])
    }

    /// Runs a command to completion, with `input` on its standard input.
    static func run(_ arguments: [String], input: String? = nil) async throws -> CommandResult {
        try await onThread { try runBlocking(arguments, input: input) }
    }

    private static func runBlocking(_ arguments: [String], input: String?) throws -> CommandResult {
        let child = try ChildProcess(binary.path, arguments, input: .pipe, output: .pipe, error: .pipe)
        if let standardInput = child.standardInput {
            try standardInput.write(contentsOf: Data((input ?? "").utf8))
            try standardInput.close()
        }
        let stdout = child.standardOutput?.readDataToEndOfFile() ?? Data()
        let stderr = child.standardError?.readDataToEndOfFile() ?? Data()
        let status = child.wait()
        return CommandResult(status: status, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// A running `cumulus serve`.
    final class Server: Sendable {
        let child: ChildProcess
        let url: String

        /// Starts `cumulus serve --port 0` on an SQLite data directory.
        static func start(data: URL) async throws -> Server {
            try await start(arguments: ["--data", data.path])
        }

        /// Starts `cumulus serve --port 0` with more arguments (where the data is), once it listens.
        static func start(arguments: [String], standardError: URL? = nil) async throws -> Server {
            try await ServeProcessTests.onThread { try Server(arguments: arguments, standardError: standardError) }
        }

        private init(arguments: [String], standardError: URL?) throws {
            if let standardError { _ = FileManager.default.createFile(atPath: standardError.path, contents: nil) }
            let child = try ChildProcess(
                ServeProcessTests.binary.path, ["serve", "--port", "0"] + arguments, output: .pipe,
                error: standardError.map { .file($0.path) } ?? .null)
            // The first line on stdout is the URL, printed once the server accepts connections.
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")), let output = child.standardOutput {
                let chunk = output.availableData
                if chunk.isEmpty { break }
                line.append(chunk)
            }
            self.child = child
            self.url = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }

        func stop(_ signal: Int32 = SIGTERM) -> Int32 {
            child.signal(signal)
            return child.wait()
        }

        /// Waits until the server's `/metrics` shows `series` at `value` (readiness, not a guess at how long it takes);
        /// fails after a generous deadline.
        func waitForMetric(_ series: String, toBe value: Double, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline {
                if let response = try? await HTTPClient.shared.execute(HTTPClientRequest(url: url + "/metrics"), timeout: .seconds(30)),
                    let body = try? await response.body.collect(upTo: 8 << 20),
                    metricSample(series, in: String(buffer: body)) == value
                {
                    return
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            Issue.record("/metrics never showed \(series) at \(value)", sourceLocation: sourceLocation)
        }
    }

    /// A connection the stopping server never accepts waits in the kernel's backlog; a short timeout ends it.
    static func post(_ url: String, _ body: String, timeout: TimeAmount = .seconds(5)) async throws -> (Int, JSONValue) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "text/plain")
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await HTTPClient.shared.execute(request, timeout: timeout)
        let bytes = try await response.body.collect(upTo: 10 * 1024 * 1024)
        return (Int(response.status.code), try JSONValue(parsing: Array(bytes.readableBytesView)))
    }

    func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-serve-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test func commandsPrintOnlyTheirResultAndFailCleanly() async throws {
        let data = try temporaryDirectory()
        let created = try await Self.run(["containers", "create", "iCloud.com.example.cli", "--create"], data: data)
        #expect(created.status == 0)
        #expect(created.stdout == "iCloud.com.example.cli\n")
        let token = try await Self.run(["tokens", "create", "--container", "iCloud.com.example.cli", "--environment", "production"], data: data)
        #expect(token.status == 0)
        #expect(token.stdout.split(separator: "\n").count == 1)
        // Shaped like Apple's API tokens, which third-party clients check before sending anything: 64 lowercase hex digits.
        #expect(token.stdout.wholeMatch(of: /[0-9a-f]{64}\n/) != nil, "\(token.stdout)")
        let user = try await Self.run(["users", "create", "alice", "--container", "iCloud.com.example.cli", "--email", "a@example.com"], data: data)
        #expect(user.stdout.hasPrefix("_"))
        #expect(user.stdout.count == 34)

        let missing = try await Self.run(["tokens", "create", "--container", "iCloud.com.example.none"], data: data)
        #expect(missing.status != 0)
        #expect(missing.stdout.isEmpty)
        #expect(missing.stderr.contains("does not exist"))
        let duplicate = try await Self.run(["containers", "create", "iCloud.com.example.cli"], data: data)
        #expect(duplicate.status != 0)
        #expect(duplicate.stderr.contains("already exists"))
        let badKey = try await Self.run(["keys", "add", "--container", "iCloud.com.example.cli", "--public-key", "/nonexistent.pem"], data: data)
        #expect(badKey.status != 0)
    }

    @Test func everyCommandIsInTheOperationsReference() async throws {
        let reference = try String(contentsOf: DocumentationTests.root.appendingPathComponent("docs/OPERATIONS.md"), encoding: .utf8)
        /// The names under SUBCOMMANDS in a command's help.
        func subcommands(_ command: [String]) async throws -> [String] {
            let help = try await Self.run(command + ["--help"]).stdout
            guard let section = help.components(separatedBy: "SUBCOMMANDS:\n").last, help.contains("SUBCOMMANDS:") else { return [] }
            return section.split(separator: "\n").compactMap { line in
                // `erase, delete`: a command and its aliases.
                line.hasPrefix("  ") && !line.hasPrefix("   ")
                    ? line.split(separator: " ").first.map { String($0.trimmingCharacters(in: [","])) } : nil
            }.filter { $0 != "See" }
        }
        let groups = try await subcommands([])
        #expect(groups.contains("serve") && groups.contains("users"))
        for group in groups {
            let names = try await subcommands([group])
            if names.isEmpty {
                #expect(reference.contains("`cumulus \(group)"), "docs/OPERATIONS.md does not describe cumulus \(group)")
            }
            for name in names {
                #expect(
                    reference.contains("`cumulus \(group) \(name)") || reference.contains("`cumulus \(group) ") && reference.contains("\\|\(name)"),
                    "docs/OPERATIONS.md does not describe cumulus \(group) \(name)")
            }
        }
    }

    @Test func credentialsAreListedRevokedAndChanged() async throws {
        let data = try temporaryDirectory()
        let container = "iCloud.com.example.admin"
        func run(_ arguments: [String], input: String? = nil) async throws -> CommandResult {
            try await Self.run(arguments + ["--container", container, "--data", data.path], input: input)
        }
        _ = try await Self.run(["containers", "create", container, "--create"], data: data)
        _ = try await Self.run(["containers", "create", "iCloud.com.example.second"], data: data)
        let containers = try await Self.run(["containers", "list"], data: data).stdout.split(separator: "\n")
        #expect(containers.map { $0.split(separator: "\t").first } == ["iCloud.com.example.admin", "iCloud.com.example.second"])

        // Tokens: listed by fingerprint (only hashes are kept), revoked by value or by fingerprint.
        let first = try await run(["tokens", "create"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let second = try await run(["tokens", "create", "--environment", "production"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let listed = try await run(["tokens", "list", "--json"])
        let tokens = try #require(try JSONValue(parsing: listed.stdout).arrayValue)
        #expect(tokens.count == 2)
        #expect(tokens.allSatisfy { $0["status"]?.stringValue == "active" && $0["fingerprint"]?.stringValue?.count == 12 })
        #expect(!listed.stdout.contains(first) && !listed.stdout.contains(second))
        #expect(try await run(["tokens", "revoke", first]).status == 0)
        let secondFingerprint = try #require(tokens.first { $0["environment"]?.stringValue == "production" }?["fingerprint"]?.stringValue)
        #expect(try await run(["tokens", "revoke", secondFingerprint]).status == 0)
        let lines = try await run(["tokens", "list"]).stdout.split(separator: "\n")
        #expect(lines.count == 2 && lines.allSatisfy { $0.hasSuffix("\trevoked") })
        let unknown = try await run(["tokens", "revoke", "0123456789ab"])
        #expect(unknown.status != 0 && unknown.stderr.contains("no API token"))

        // Users: listed, an email set and removed, discoverable, a password set from standard input.
        _ = try await run(["users", "create", "alice", "--email", "a@example.com"])
        _ = try await run(["users", "create", "bob"])
        #expect(try await run(["users", "set-email", "bob", "bob@example.com"]).status == 0)
        let clash = try await run(["users", "set-email", "bob", "a@example.com"])
        #expect(clash.status != 0 && clash.stderr.contains("a@example.com"))
        #expect(try await run(["users", "discoverable", "alice"]).status == 0)
        #expect(try await run(["users", "set-email", "alice", "--remove"]).status == 0)
        #expect(try await run(["users", "set-password", "bob"], input: "correct horse battery\n").status == 0)
        #expect(try await run(["users", "set-password", "bob"], input: "short\n").status != 0)
        let users = try #require(try JSONValue(parsing: try await run(["users", "list", "--json"]).stdout).arrayValue)
        #expect(users.map { $0["name"]?.stringValue } == ["alice", "bob"])
        #expect(users[0]["email"] == .null && users[0]["discoverable"] == .bool(true))
        #expect(users[1]["email"]?.stringValue == "bob@example.com" && users[1]["hasPassword"] == .bool(true))

        // Keys: listed and revoked.
        let pem = data.appendingPathComponent("key.pem")
        try P256.Signing.PrivateKey().publicKey.pemRepresentation.write(to: pem, atomically: true, encoding: .utf8)
        let keyID = try await run(["keys", "add", "--public-key", pem.path]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await run(["keys", "list"]).stdout.hasPrefix("\(keyID)\tdevelopment\t"))
        #expect(try await run(["keys", "revoke", keyID]).status == 0)
        #expect(try await run(["keys", "list"]).stdout.hasSuffix("\trevoked\n"))
        #expect(try await Self.run(["keys", "revoke", keyID, "--container", "iCloud.com.example.second", "--data", data.path]).status != 0)

        // Erasing asks for --yes (`delete` is its old name), and then a user is gone, with a receipt; and a container
        // with everything in it.
        let unconfirmed = try await run(["users", "delete", "bob"])
        #expect(unconfirmed.status != 0 && unconfirmed.stderr.contains("--yes"))
        let receipt = try await run(["users", "erase", "bob", "--yes"])
        #expect(receipt.status == 0)
        #expect(
            receipt.stdout.hasPrefix("user\tbob\ncontainer\t\(container)\nzones\t") && receipt.stdout.contains("\nfilesScrubbed\ttrue\n"),
            "\(receipt.stdout)")
        #expect(try await run(["users", "list"]).stdout.split(separator: "\n").map { $0.split(separator: "\t")[1] } == ["alice"])
        #expect(try await Self.run(["containers", "delete", container], data: data).status != 0)
        #expect(try await Self.run(["containers", "delete", container, "--yes"], data: data).status == 0)
        #expect(try await Self.run(["containers", "list"], data: data).stdout.hasPrefix("iCloud.com.example.second\t"))
        let gone = try await run(["users", "list"])
        #expect(gone.status != 0 && gone.stderr.contains("does not exist"))
    }

    /// Makes a container, an API token for it and a user `alice`, through the command line; answers both tokens.
    static func containerWithAlice(_ container: String, data: URL) async throws -> (apiToken: String, webToken: String) {
        _ = try await run(["containers", "create", container, "--create"], data: data)
        let apiToken = try await run(["tokens", "create", "--container", container], data: data).stdout
        _ = try await run(["users", "create", "alice", "--container", container], data: data)
        let webToken = try await run(["users", "token", "alice", "--container", container], data: data).stdout
        return (apiToken.trimmingCharacters(in: .whitespacesAndNewlines), webToken.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// A container with alice, a server over its data, and her zone `Notes` with one record `n` (a `Note` titled "hi"):
    /// the server, her private database's URL and the query that signs her requests.
    static func serverWithANote(_ container: String, data: URL) async throws -> (Server, database: String, query: String) {
        let (apiToken, webToken) = try await containerWithAlice(container, data: data)
        let server = try await Server.start(data: data)
        let database = "\(server.url)/database/1/\(container)/development/private"
        let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)"
        _ = try await post(
            "\(database)/zones/modify?\(query)", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Notes"}}}]}"#)
        _ = try await post(
            "\(database)/records/modify?\(query)",
            #"{"zoneID":{"zoneName":"Notes"},"operations":[{"operationType":"create","record":{"recordName":"n","recordType":"Note","fields":{"title":{"value":"hi"}}}}]}"#
        )
        return (server, database, query)
    }

    /// An operator sees the field indexes queries made, and which schemas keep them, and drops one.
    @Test func fieldIndexesAreListedAndDropped() async throws {
        let data = try temporaryDirectory()
        let container = "iCloud.com.example.indexes"
        let (server, database, query) = try await Self.serverWithANote(container, data: data)
        let (status, _) = try await Self.post(
            "\(database)/records/query?\(query)",
            #"{"zoneID":{"zoneName":"Notes"},"query":{"recordType":"Note","filterBy":[{"fieldName":"title","comparator":"EQUALS","fieldValue":{"value":"hi"}}]}}"#
        )
        #expect(status == 200)
        #expect(server.stop() == 0)

        let listed = try #require(try JSONValue(parsing: try await Self.run(["indexes", "list", "--json"], data: data).stdout).arrayValue)
        let title = try #require(listed.first { $0["field"]?.stringValue == "title" }, "\(listed)")
        #expect(title["development"]?.stringValue == container && title["production"]?.stringValue == "")
        let dropped = try await Self.run(["indexes", "drop", "title"], data: data)
        #expect(dropped.status == 0 && dropped.stdout == "title\n", "\(dropped.stderr)")
        #expect(try await Self.run(["indexes", "list"], data: data).stdout.isEmpty)
        let again = try await Self.run(["indexes", "drop", "title"], data: data)
        #expect(again.status != 0 && again.stderr.contains("has no index"))
    }

    /// `cumulus zones check-digests` finds a zone whose kept digest no longer matches its records (damaged here by
    /// hand), sets it right and exits 1; run again, it finds nothing and exits 0.
    @Test func checkDigestsSetsRightAZoneWhoseDigestDriftedAndSaysSo() async throws {
        let data = try temporaryDirectory()
        let container = "iCloud.com.example.digests"
        let (server, _, _) = try await Self.serverWithANote(container, data: data)
        #expect(server.stop() == 0)
        #expect(try await Self.run(["zones", "check-digests"], data: data).status == 0, "a digest kept by every write matches")

        let file = data.appendingPathComponent("cumulus.sqlite").path
        let queue = try DatabaseQueue(path: file)
        try await queue.write { db in try db.execute(sql: "UPDATE zones SET digest_3 = digest_3 + 1 WHERE zone_name = 'Notes'") }
        try queue.close()
        let found = try await Self.run(["zones", "check-digests", "--json"], data: data)
        #expect(found.status == 1, "\(found.stderr)")
        let rows = try #require(try JSONValue(parsing: found.stdout).arrayValue)
        #expect(rows.count == 1 && rows.first?["zone"]?.stringValue == "Notes" && rows.first?["container"]?.stringValue == container)
        #expect(found.stderr.contains("1 zone digests differed"))
        let again = try await Self.run(["zones", "check-digests"], data: data)
        #expect(again.status == 0 && again.stdout.isEmpty)
    }

    /// `cumulus serve --config FILE`: settings from a JSON file, under the environment and the flags; a misspelled
    /// key or a value of the wrong type stops the server before it starts, naming it.
    @Test func settingsComeFromAFileUnderTheEnvironmentAndTheFlags() async throws {
        let directory = try temporaryDirectory()
        let data = directory.appendingPathComponent("from-the-file")
        let config = directory.appendingPathComponent("cumulus.json")
        try Data(#"{"public-url": "https://file.example.com", "log-format": "json", "data": "\#(data.path)", "requests-per-second": 50}"#.utf8)
            .write(to: config)
        func publicURL(_ server: Server) async throws -> String? {
            let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(server.url)/health"), timeout: .seconds(5))
            return response.headers["X-Cumulus-Public-URL"].first
        }
        let log = directory.appendingPathComponent("server.log")
        let server = try await Server.start(arguments: ["--config", config.path], standardError: log)
        #expect(try await publicURL(server) == "https://file.example.com")
        #expect(server.stop() == 0)
        #expect(FileManager.default.fileExists(atPath: data.appendingPathComponent("cumulus.sqlite").path), "the file's data directory")
        let lines = try String(contentsOf: log, encoding: .utf8).split(separator: "\n")
        #expect(!lines.isEmpty && lines.allSatisfy { $0.hasPrefix("{") }, "the file's log format: \(lines.prefix(2))")

        // A flag wins over the file.
        let flagged = try await Server.start(arguments: ["--config", config.path, "--public-url", "https://flag.example.com"])
        #expect(try await publicURL(flagged) == "https://flag.example.com")
        #expect(flagged.stop() == 0)

        for (text, reason) in [
            (#"{"publik-url": "https://x.example.com"}"#, "publik-url is not a setting"), (#"{"port": "eighty"}"#, "port must be an integer"),
            (#"{"trust-forwarded-for": "yes"}"#, "trust-forwarded-for must be true or false"), ("[1]", "is not a JSON object"),
        ] {
            try Data(text.utf8).write(to: config)
            let refused = try await Self.run(["serve", "--port", "0", "--config", config.path, "--data", data.path])
            #expect(refused.status != 0 && refused.stderr.contains(reason), "\(text): \(refused.stderr)")
        }
    }

    /// `--max-zones` sets how many live zones one database may hold; a value that is not a positive number stops the
    /// server before it starts.
    @Test func theZoneLimitIsASetting() async throws {
        let data = try temporaryDirectory()
        let container = "iCloud.com.example.zones"
        let (apiToken, webToken) = try await Self.containerWithAlice(container, data: data)
        let server = try await Server.start(arguments: ["--data", data.path, "--max-zones", "2"])
        let (status, answer) = try await Self.post(
            "\(server.url)/database/1/\(container)/development/private/zones/modify?ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)",
            #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"A"}}},"#
                + #"{"operationType":"create","zone":{"zoneID":{"zoneName":"B"}}}]}"#)
        #expect(server.stop() == 0)
        let zones = answer["zones"]?.arrayValue ?? []
        #expect(status == 200 && zones.count == 2, "\(answer)")
        #expect(zones.first?["serverErrorCode"] == nil)
        #expect(zones.last?["serverErrorCode"]?.stringValue == "QUOTA_EXCEEDED")
        let refused = try await Self.run(["serve", "--port", "0", "--data", data.path, "--max-zones", "0"])
        #expect(refused.status != 0 && refused.stderr.contains("--max-zones"), "\(refused.stderr)")
    }

    /// Every setting of `cumulus serve` is in docs/OPERATIONS.md's list, and the list names no other.
    @Test func everySettingIsInTheOperationsList() async throws {
        let help = try await Self.run(["serve", "--help"]).stdout
        let flags = Set(
            help.split(separator: "\n").compactMap { line -> String? in
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                guard trimmed.hasPrefix("--") else { return nil }
                return String(trimmed.dropFirst(2).prefix { $0 != " " && $0 != "," && $0 != "=" })
            }
        ).subtracting(["help", "version"])
        let reference = try String(contentsOf: DocumentationTests.root.appendingPathComponent("docs/OPERATIONS.md"), encoding: .utf8)
        let section = try #require(reference.components(separatedBy: "## Settings").dropFirst().first?.components(separatedBy: "\n## ").first)
        let listed = Set(
            section.split(separator: "\n").compactMap { line -> String? in
                guard line.hasPrefix("| `") else { return nil }
                return String(line.dropFirst(3).prefix { $0 != "`" })
            })
        #expect(flags.count > 15)
        #expect(flags.subtracting(listed).isEmpty, "settings missing from docs/OPERATIONS.md: \(flags.subtracting(listed).sorted())")
        #expect(listed.subtracting(flags).isEmpty, "listed but not settings: \(listed.subtracting(flags).sorted())")
    }

    /// `cumulus zones restore` (with a dry run first) and `cumulus records deleted`/`undelete`, on a store a server wrote.
    @Test func aZoneIsRestoredAndARecordUndeletedFromTheCommandLine() async throws {
        let data = try temporaryDirectory()
        let container = "iCloud.com.example.history"
        let (server, database, query) = try await Self.serverWithANote(container, data: data)
        // The moment is after the note was written and before it changed: only the order of the writes matters.
        let moment = Int64(Date().timeIntervalSince1970 * 1000)
        try await Task.sleep(for: .milliseconds(50))
        _ = try await Self.post(
            "\(database)/records/modify?\(query)",
            #"{"zoneID":{"zoneName":"Notes"},"operations":[{"operationType":"forceReplace","record":{"recordName":"n","recordType":"Note","fields":{"title":{"value":"bye"}}}},{"operationType":"create","record":{"recordName":"m","recordType":"Note"}}]}"#
        )
        #expect(server.stop() == 0)
        let zone = ["--container", container, "--user", "alice", "--zone", "Notes"]

        let dry = try await Self.run(["zones", "restore"] + zone + ["--to", "\(moment)", "--dry-run"], data: data)
        #expect(dry.status == 0 && dry.stdout == "created since\tm\nchanged since\tn\n", "\(dry.stdout)\(dry.stderr)")
        #expect(dry.stderr.contains("would restore Notes") && dry.stderr.contains("1 changed, 0 deleted and 1 created since"))
        let restored = try await Self.run(["zones", "restore"] + zone + ["--to", HistoryMoment.text(moment)], data: data)
        #expect(restored.status == 0 && restored.stderr.contains("undo with --to "), "\(restored.stderr)")

        let deleted = try await Self.run(["records", "deleted"] + zone + ["--json"], data: data)
        let rows = try #require(try JSONValue(parsing: deleted.stdout).arrayValue, "\(deleted.stderr)")
        #expect(rows.map { $0["recordName"]?.stringValue } == ["m"])
        let undeleted = try await Self.run(["records", "undelete", "m"] + zone, data: data)
        #expect(undeleted.status == 0 && undeleted.stdout == "m\n", "\(undeleted.stderr)")
        let again = try await Self.run(["records", "undelete", "m"] + zone, data: data)
        #expect(again.status == 1 && again.stderr.contains("not undeleted\tm\tNOT_FOUND"))

        let outside = try await Self.run(["zones", "restore"] + zone + ["--to", "2020-01-01T00:00:00Z"], data: data)
        #expect(outside.status == 1 && outside.stderr.contains("before the history window"), "\(outside.stderr)")
        let unknown = try await Self.run(
            ["zones", "restore", "--container", container, "--user", "nobody", "--zone", "Notes", "--to", "0"], data: data)
        #expect(unknown.status == 1 && unknown.stderr.contains("no user nobody"))
    }

    /// `cumulus users export` writes the user's document to a new file only its owner reads, and never overwrites one.
    @Test func aUsersExportIsWrittenToANewFileOnlyItsOwnerReads() async throws {
        let data = try temporaryDirectory()
        let container = "iCloud.com.example.export"
        let (server, _, _) = try await Self.serverWithANote(container, data: data)
        #expect(server.stop() == 0)
        let file = data.appendingPathComponent("alice.json").path
        let exported = try await Self.run(["users", "export", "alice", "--container", container, "--output", file], data: data)
        #expect(exported.status == 0 && exported.stdout == file + "\n", "\(exported.stderr)")
        let document = try JSONValue(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: file))))
        let zones = document["environments"]?.arrayValue?.first?["zones"]?.arrayValue ?? []
        #expect(zones.contains { zone in zone["records"]?.arrayValue?.contains { $0["recordName"]?.stringValue == "n" } == true }, "\(document)")
        let permissions = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
        #expect(permissions == 0o600)
        let again = try await Self.run(["users", "export", "alice", "--container", container, "--output", file], data: data)
        #expect(again.status != 0 && again.stderr.contains("exists"))
        let nobody = try await Self.run(["users", "export", "nobody", "--container", container, "--output", file + "2"], data: data)
        #expect(nobody.status != 0 && nobody.stderr.contains("no user named nobody"))
    }

    @Test func aBackupMadeWhileServingRestoresThatMomentAndDevicesStartOver() async throws {
        let data = try temporaryDirectory()
        let container = "iCloud.com.example.backup"
        let (apiToken, webToken) = try await Self.containerWithAlice(container, data: data)
        func database(_ server: Server) -> String {
            "\(server.url)/database/1/\(container)/development/private"
        }
        let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)"
        func save(_ name: String, on server: Server) async throws {
            let (status, _) = try await Self.post(
                "\(database(server))/records/modify?\(query)",
                #"{"zoneID":{"zoneName":"Notes"},"operations":[{"operationType":"create","record":{"recordName":"\#(name)","recordType":"Note","fields":{"n":{"value":1}}}}]}"#
            )
            #expect(status == 200)
        }

        let server = try await Server.start(data: data)
        _ = try await Self.post(
            "\(database(server))/zones/modify?\(query)", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Notes"}}}]}"#)
        try await save("before", on: server)
        // A device syncs before the backup: the store's token secret exists by then, and is in the backup.
        let (_, early) = try await Self.post("\(database(server))/changes/zone?\(query)", #"{"zones":[{"zoneID":{"zoneName":"Notes"}}]}"#)
        #expect(early["zones"]?[0]?["syncToken"]?.stringValue != nil)
        let backup = data.appendingPathComponent("backup.sqlite").path
        let made = try await Self.run(["backup", backup], data: data)
        #expect(made.status == 0 && made.stdout == backup + "\n")
        #expect(try await Self.run(["backup", backup], data: data).status != 0, "never overwrites")
        try await save("after", on: server)
        let (_, feed) = try await Self.post("\(database(server))/changes/zone?\(query)", #"{"zones":[{"zoneID":{"zoneName":"Notes"}}]}"#)
        let syncToken = try #require(feed["zones"]?[0]?["syncToken"]?.stringValue)
        #expect(server.stop() == 0)

        let restored = try await Self.run(["restore", backup], data: data)
        #expect(restored.status == 0, "\(restored.stderr)")
        let again = try await Server.start(data: data)
        defer { _ = again.stop() }
        let (status, lookup) = try await Self.post(
            "\(database(again))/records/lookup?\(query)",
            #"{"zoneID":{"zoneName":"Notes"},"records":[{"recordName":"before"},{"recordName":"after"}]}"#)
        #expect(status == 200, "the API token and the user's web token still work")
        #expect(lookup["records"]?[0]?["recordName"]?.stringValue == "before" && lookup["records"]?[0]?["serverErrorCode"] == nil)
        #expect(lookup["records"]?[1]?["serverErrorCode"]?.stringValue == "NOT_FOUND")
        // A device's token from after the backup would skip changes made again since (the zone's sequence passes its
        // position once more is written): it is refused, and the device starts over.
        try await save("again-1", on: again)
        try await save("again-2", on: again)
        let (_, stale) = try await Self.post(
            "\(database(again))/changes/zone?\(query)", #"{"zones":[{"zoneID":{"zoneName":"Notes"},"syncToken":"\#(syncToken)"}]}"#)
        #expect(stale["zones"]?[0]?["serverErrorCode"] != nil, "\(stale)")

        let notCumulus = data.appendingPathComponent("other.sqlite").path
        _ = FileManager.default.createFile(atPath: notCumulus, contents: nil)
        let refused = try await Self.run(["restore", notCumulus], data: data)
        #expect(refused.status != 0 && refused.stderr.contains("not a Cumulus database"))
        let postgres = try await Self.run(["backup", backup + "2", "--database", "postgres://u:p@127.0.0.1:1/db"])
        #expect(postgres.status != 0 && postgres.stderr.contains("pg_dump"))
    }

    @Test func versionIsPrinted() async throws {
        let version = try await Self.run(["--version"])
        #expect(version.status == 0)
        #expect(version.stdout == CumulusVersion.current + "\n")
    }

    @Test func serveWritesOneJSONLinePerRequestAtTheLevelAsked() async throws {
        let data = try temporaryDirectory()
        let container = "iCloud.com.example.logs"
        _ = try await Self.run(["containers", "create", container, "--create"], data: data)
        let apiToken = try await Self.run(["tokens", "create", "--container", container], data: data).stdout.trimmingCharacters(
            in: .whitespacesAndNewlines)
        let log = data.appendingPathComponent("stderr.log")
        let server = try await Server.start(arguments: ["--data", data.path, "--log-format", "json", "--log-level", "info"], standardError: log)
        let (status, _) = try await Self.post(
            "\(server.url)/database/1/\(container)/development/public/records/query?ckAPIToken=\(apiToken)", #"{"query":{"recordType":"Note"}}"#)
        #expect(status == 200)
        #expect(server.stop() == 0)
        let lines = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map { try JSONValue(parsing: String($0)) }
        let access = lines.filter { $0["message"]?.stringValue == "request" }
        #expect(access.count == 1)
        #expect(access.first?["route"]?.stringValue == "/database/1/{container}/{environment}/{database}/records/query")
        #expect(access.first?["database"]?.stringValue == "public")
        #expect(!(try String(contentsOf: log, encoding: .utf8)).contains(apiToken))

        // At warning, the access lines (info) are not written.
        let quiet = data.appendingPathComponent("quiet.log")
        let quietServer = try await Server.start(
            arguments: ["--data", data.path, "--log-format", "json", "--log-level", "warning"], standardError: quiet)
        _ = try await Self.post(
            "\(quietServer.url)/database/1/\(container)/development/public/records/query?ckAPIToken=\(apiToken)", #"{"query":{"recordType":"Note"}}"#)
        #expect(quietServer.stop() == 0)
        #expect(!(try String(contentsOf: quiet, encoding: .utf8)).contains(#""message":"request""#))
    }

    @Test func serveAcceptsRequestsAndShutsDownWithoutLosingAcknowledgedWrites() async throws {
        let data = try temporaryDirectory()
        let container = "iCloud.com.example.serve"
        _ = try await Self.run(["containers", "create", container, "--create"], data: data)
        let server = try await Server.start(data: data)
        #expect(server.url.hasPrefix("http://127.0.0.1:"))

        // Administration commands work while the server runs on the same data directory.
        let apiToken = try await Self.run(["tokens", "create", "--container", container], data: data).stdout.trimmingCharacters(
            in: .whitespacesAndNewlines)
        _ = try await Self.run(["users", "create", "alice", "--container", container], data: data)
        let webToken = try await Self.run(["users", "token", "alice", "--container", container], data: data).stdout.trimmingCharacters(
            in: .whitespacesAndNewlines)
        #expect(!apiToken.isEmpty && !webToken.isEmpty)

        let base = "\(server.url)/database/1/\(container)/development/private"
        let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)"
        let (zoneStatus, _) = try await Self.post(
            "\(base)/zones/modify?\(query)", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Drives"}}}]}"#)
        #expect(zoneStatus == 200)

        // Writers keep saving while the server is told to stop; every write it acknowledged must survive.
        let acknowledgedSoFar = PostgresOutageTests.Shared(0)
        let acknowledged = await withTaskGroup(of: [String].self) { group in
            for writer in 0..<4 {
                group.addTask {
                    var saved: [String] = []
                    for index in 0..<200 {
                        let name = "w\(writer)-\(index)"
                        let body =
                            #"{"zoneID":{"zoneName":"Drives"},"operations":[{"operationType":"create","record":{"recordName":"\#(name)","recordType":"Drive","fields":{"distance":{"value":\#(index)}}}}]}"#
                        guard let (status, json) = try? await Self.post("\(base)/records/modify?\(query)", body) else { break }
                        if status == 200, json["records"]?[0]?["recordChangeTag"] != nil {
                            saved.append(name)
                            acknowledgedSoFar.withLock { $0 += 1 }
                        }
                    }
                    return saved
                }
            }
            group.addTask {
                // Told to stop once the writers are under way, however long a loaded machine takes to get there.
                while acknowledgedSoFar.withLock({ $0 }) < 20 { try? await Task.sleep(for: .milliseconds(5)) }
                _ = server.stop()
                return []
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(server.child.exitStatus == 0, "graceful shutdown exits 0")
        #expect(!acknowledged.isEmpty)

        let restarted = try await Server.start(data: data)
        let restartedBase = "\(restarted.url)/database/1/\(container)/development/private"
        for chunk in stride(from: 0, to: acknowledged.count, by: 200) {
            let names = acknowledged[chunk..<min(chunk + 200, acknowledged.count)]
            let body = #"{"zoneID":{"zoneName":"Drives"},"records":[\#(names.map { #"{"recordName":"\#($0)"}"# }.joined(separator: ","))]}"#
            let (status, json) = try await Self.post("\(restartedBase)/records/lookup?\(query)", body)
            #expect(status == 200)
            let missing = (json["records"]?.arrayValue ?? []).filter { $0["serverErrorCode"] != nil }
            #expect(missing.isEmpty, "acknowledged writes lost: \(missing.count)")
        }
        #expect(restarted.stop(SIGINT) == 0)
    }
}
