import AsyncHTTPClient
import CumulusModel
import Foundation
import NIOCore
import Testing

/// A restore or an undelete from the command line (another process) wakes the devices waiting on push at once, as the
/// console's does: over SQLite through a file the server reads, over PostgreSQL through `NOTIFY`. The poll waits up to
/// 50 s and the server looks at the feeds on its own only every 60 s, so an answer before the client gives up (45 s)
/// was a wake-up.
@Suite("Commands wake devices", .timeLimit(.minutes(10)))
struct CommandAnnouncementTests {
    static let container = "iCloud.com.example.announce"

    @Test(arguments: ["SQLite", "PostgreSQL"])
    func anUndeleteFromTheCommandLineAnswersAWaitingPoll(_ storeName: String) async throws {
        let location: [String]
        var data: URL?
        if storeName == "SQLite" {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-announce-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            data = directory
            location = ["--data", directory.path]
        } else {
            guard TestStore.postgresURL != nil else { return }
            location = ["--database", try await ServeClusterTests.makeCluster().database]
        }
        defer { if let data { try? FileManager.default.removeItem(at: data) } }
        func run(_ arguments: [String]) async throws -> String {
            let result = try await ServeProcessTests.run(arguments + location + ["--create"])
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        _ = try await run(["containers", "create", Self.container])
        let apiToken = try await run(["tokens", "create", "--container", Self.container])
        _ = try await run(["users", "create", "alice", "--container", Self.container])
        let alice = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(try await run(["users", "token", "alice", "--container", Self.container]))"
        let server = try await ServeProcessTests.Server.start(arguments: location + ["--push-recheck-interval", "60"])
        defer { _ = server.stop() }
        let database = "\(server.url)/database/1/\(Self.container)/development/private"
        func post(_ operation: String, _ body: String) async throws -> Int {
            try await ServeProcessTests.post("\(database)/\(operation)?\(alice)", body, timeout: .seconds(30)).0
        }
        #expect(
            try await post(
                "records/modify",
                #"{"operations":[{"operationType":"create","record":{"recordName":"note","recordType":"Note","fields":{"text":{"value":"kept"}}}}]}"#)
                == 200)
        #expect(try await post("records/modify", #"{"operations":[{"operationType":"forceDelete","record":{"recordName":"note"}}]}"#) == 200)
        #expect(
            try await post(
                "subscriptions/modify",
                #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"all","subscriptionType":"database"}}]}"#)
                == 200)
        let (created, token) = try await ServeProcessTests.post(
            "\(server.url)/device/1/\(Self.container)/development/tokens/create?\(alice)", "{}", timeout: .seconds(30))
        #expect(created == 200)
        let courier = try #require(token["webcourierURL"]?.stringValue)

        async let waiting = HTTPClient.shared.execute(HTTPClientRequest(url: courier + "?timeout=50"), timeout: .seconds(45))
        // Once the poll has looked at the feeds, only a wake-up answers it before its time.
        try await server.waitForMetric("cumulus_push_idle_connections", toBe: 1)
        let undeleted = try await ServeProcessTests.run(
            ["records", "undelete", "note", "--container", Self.container, "--user", "alice", "--zone", ZoneID.defaultZoneName] + location)
        #expect(undeleted.status == 0 && undeleted.stdout == "note\n", "\(undeleted.stderr)")
        let response = try await waiting
        let notification = try JSONValue(parsing: Array(try await response.body.collect(upTo: 1 << 20).readableBytesView))
        #expect(notification["ck"]?["met"]?["sid"]?.stringValue == "all", "\(notification)")
    }
}
