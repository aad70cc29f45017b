import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStoreSQLite
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import Synchronization
import Testing

@Suite("Change feeds: changes/database, changes/zone and their older aliases", .timeLimit(.minutes(10)))
struct ChangeFeedTests {
    /// One zone feed page.
    struct Page {
        var records: [JSONValue]
        var syncToken: String
        var moreComing: Bool
    }

    static func zoneChanges(_ client: CloudKitTestClient, zone: String, token: String?, limit: Int? = nil, as user: TestUser, extra: String = "")
        async throws -> Page
    {
        var entry = #"{"zoneID":{"zoneName":"\#(zone)"}"#
        if let token { entry += #","syncToken":"\#(token)""# }
        if let limit { entry += #","resultsLimit":\#(limit)"# }
        entry += extra + "}"
        let response = try await client.send("changes/zone", as: .user(user), body: #"{"zones":[\#(entry)]}"#)
        let zone = try #require(response.zones.first)
        let syncToken = try #require(zone["syncToken"]?.stringValue, "\(response.json)")
        return Page(records: zone["records"]?.arrayValue ?? [], syncToken: syncToken, moreComing: zone["moreComing"] == .bool(true))
    }

    /// Applies pages to a local copy, as a client does: records replace, tombstones remove.
    static func apply(_ records: [JSONValue], to state: inout [String: JSONValue]) {
        for record in records {
            let name = record["recordName"]!.stringValue!
            if record["deleted"] == .bool(true) { state[name] = nil } else { state[name] = record }
        }
    }

    @Test(arguments: TestStore.allAndSharded) func databaseFeedReportsChangedAndDeletedZonesOnce(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("A", as: world.alice)
            try await client.createZone("B", as: world.alice)
            _ = try await client.modify([operation("create", "a1")], zone: "A", as: .user(world.alice))
            _ = try await client.modify([operation("create", "a2")], zone: "A", as: .user(world.alice))

            let first = try await client.send("changes/database", as: .user(world.alice), body: "{}")
            #expect(first.status == 200)
            #expect(first.zones.map { $0["zoneID"]?["zoneName"]?.stringValue } == ["B", "A"], "each zone once, in order of its latest change")
            #expect(first.json["moreComing"] == .bool(false))
            #expect(first.zones.allSatisfy { $0["syncToken"]?.stringValue != nil })
            let token = try #require(first.json["syncToken"]?.stringValue)

            let nothing = try await client.send("changes/database", as: .user(world.alice), body: #"{"syncToken":"\#(token)"}"#)
            #expect(nothing.zones.isEmpty)

            _ = try await client.send(
                "zones/modify", as: .user(world.alice), body: #"{"operations":[{"operationType":"delete","zone":{"zoneID":{"zoneName":"B"}}}]}"#)
            _ = try await client.modify([operation("create", "a3")], zone: "A", as: .user(world.alice))
            let next = try await client.send("zones/changes", as: .user(world.alice), body: #"{"syncToken":"\#(token)"}"#)
            #expect(next.zones.map { $0["zoneID"]?["zoneName"]?.stringValue } == ["B", "A"])
            #expect(next.zones[0]["deleted"] == .bool(true))
            #expect(next.zones[1]["deleted"] == nil)

            // Paging one zone at a time.
            var tokenAt: String?
            var seen: [String] = []
            var more = true
            while more {
                let body = tokenAt.map { #"{"resultsLimit":1,"syncToken":"\#($0)"}"# } ?? #"{"resultsLimit":1}"#
                let page = try await client.send("changes/database", as: .user(world.alice), body: body)
                seen += page.zones.compactMap { $0["zoneID"]?["zoneName"]?.stringValue }
                tokenAt = page.json["syncToken"]?.stringValue
                more = page.json["moreComing"] == .bool(true)
            }
            #expect(seen == ["B", "A"])
        }
    }

    /// Reads a zone feed from a token to the end in pages of `limit`, applying it to `state`.
    static func readToEnd(
        _ client: CloudKitTestClient, zone: String, from token: String?, limit: Int, as user: TestUser, into state: inout [String: JSONValue]
    ) async throws -> String {
        var cursor = token
        var more = true
        while more {
            let page = try await zoneChanges(client, zone: zone, token: cursor, limit: limit, as: user)
            let names = page.records.compactMap { $0["recordName"]?.stringValue }
            #expect(Set(names).count == names.count, "no record twice in a page")
            apply(page.records, to: &state)
            cursor = page.syncToken
            more = page.moreComing
        }
        return cursor!
    }

    @Test(arguments: TestStore.allAndSharded) func resumingFromEveryTokenGivesTheSameStateAsOneRead(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            // After each round, remember a token and the state a client holding it has.
            var checkpoints: [(token: String, state: [String: JSONValue])] = []
            for round in 0..<6 {
                let creates = (0..<5).map { operation("create", "r\(round)-\($0)", fields: #"{"n":{"value":\#($0)}}"#) }
                _ = try await client.modify(creates, as: .user(world.alice))
                if round > 0 {
                    _ = try await client.modify(
                        [operation("forceUpdate", "r\(round - 1)-0", fields: #"{"n":{"value":100}}"#), operation("forceDelete", "r\(round - 1)-1")],
                        as: .user(world.alice)
                    )
                }
                var state: [String: JSONValue] = [:]
                let token = try await Self.readToEnd(client, zone: "Z", from: nil, limit: 200, as: world.alice, into: &state)
                checkpoints.append((token, state))
            }

            let full = try await Self.zoneChanges(client, zone: "Z", token: nil, as: world.alice)
            #expect(!full.moreComing)
            let names = full.records.compactMap { $0["recordName"]?.stringValue }
            #expect(Set(names).count == names.count, "each record once")
            #expect(full.records.filter { $0["deleted"] == .bool(true) }.count == 5, "tombstones for deleted records")
            var expected: [String: JSONValue] = [:]
            Self.apply(full.records, to: &expected)
            #expect(expected.count == 25)
            #expect(expected["r0-0"]?["fields"]?["n"]?["value"] == .number("100"), "latest state")

            // From zero in small pages, and from every intermediate token, the client ends with the same state.
            var fromZero: [String: JSONValue] = [:]
            _ = try await Self.readToEnd(client, zone: "Z", from: nil, limit: 3, as: world.alice, into: &fromZero)
            #expect(fromZero == expected)
            for checkpoint in checkpoints {
                var state = checkpoint.state
                _ = try await Self.readToEnd(client, zone: "Z", from: checkpoint.token, limit: 4, as: world.alice, into: &state)
                #expect(state == expected)
            }
        }
    }

    @Test(arguments: TestStore.allAndSharded) func incrementalFeedFromATokenHasOnlyLaterChanges(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            _ = try await client.modify([operation("create", "old")], as: .user(world.alice))
            let token = try await Self.zoneChanges(client, zone: "Z", token: nil, as: world.alice).syncToken
            _ = try await client.modify([operation("create", "new"), operation("forceDelete", "old")], as: .user(world.alice))
            let page = try await Self.zoneChanges(client, zone: "Z", token: token, as: world.alice)
            #expect(page.records.map { $0["recordName"]?.stringValue } == ["new", "old"], "commit order")
            #expect(page.records[1]["deleted"] == .bool(true))
            #expect(page.records[1]["recordType"]?.stringValue == "Note")
            let after = try await Self.zoneChanges(client, zone: "Z", token: page.syncToken, as: world.alice)
            #expect(after.records.isEmpty)
            #expect(after.syncToken == page.syncToken)

            // records/changes answers the same at the top level.
            let legacy = try await client.send(
                "records/changes", as: .user(world.alice), body: #"{"zoneID":{"zoneName":"Z"},"syncToken":"\#(token)"}"#)
            #expect(legacy.records.map { $0["recordName"]?.stringValue } == ["new", "old"])
            #expect(legacy.json["moreComing"] == .bool(false))
            #expect(legacy.json["reverse"] == .bool(false))
        }
    }

    @Test(arguments: TestStore.allAndSharded) func desiredRecordTypesAndKeysNarrowTheFeed(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            _ = try await client.modify(
                [operation("create", "n1", type: "Note", fields: #"{"a":{"value":1},"b":{"value":2}}"#), operation("create", "t1", type: "Task")],
                as: .user(world.alice)
            )
            let page = try await Self.zoneChanges(
                client, zone: "Z", token: nil, as: world.alice, extra: #","desiredRecordTypes":["Note"],"desiredKeys":["a"]"#)
            #expect(page.records.map { $0["recordName"]?.stringValue } == ["n1"])
            #expect(page.records[0]["fields"]?.objectValue?.keys.sorted() == ["a"])
        }
    }

    @Test(arguments: TestStore.allAndSharded) func forgedAndForeignTokensAreRejected(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            try await client.createZone("Other", as: world.alice)
            try await client.createZone("Z", as: world.bob)
            let token = try await Self.zoneChanges(client, zone: "Z", token: nil, as: world.alice).syncToken

            // A flipped character breaks the signature.
            var forged = Array(token)
            forged[5] = forged[5] == "A" ? "B" : "A"
            for bad in [String(forged), "garbage", token + "x"] {
                let response = try await client.send(
                    "changes/zone", as: .user(world.alice), body: #"{"zones":[{"zoneID":{"zoneName":"Z"},"syncToken":"\#(bad)"}]}"#)
                #expect(response.zones.first?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
                // The remedy is the same whatever the cause, so the finer code says it: fetch without a token.
                #expect(response.zones.first?["ckErrorCode"]?.stringValue == "CHANGE_TOKEN_EXPIRED")
            }
            // Alice's token is no position in Bob's zone of the same name, nor in her other zone.
            let bob = try await client.send(
                "changes/zone", as: .user(world.bob), body: #"{"zones":[{"zoneID":{"zoneName":"Z"},"syncToken":"\#(token)"}]}"#)
            #expect(bob.zones.first?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            #expect(bob.zones.first?["reason"]?.stringValue?.contains("another") == true)
            let other = try await client.send(
                "changes/zone", as: .user(world.alice), body: #"{"zones":[{"zoneID":{"zoneName":"Other"},"syncToken":"\#(token)"}]}"#)
            #expect(other.zones.first?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            // A zone token is not a database token.
            let database = try await client.send("changes/database", as: .user(world.alice), body: #"{"syncToken":"\#(token)"}"#)
            #expect(database.status == 400)
            #expect(database.reason?.hasPrefix("syncToken") == true)
            #expect(database.json["ckErrorCode"]?.stringValue == "CHANGE_TOKEN_EXPIRED")
            // A continuation marker is no change token: refused without the finer code.
            let query = try await client.send(
                "records/query", as: .user(world.alice),
                body: #"{"zoneID":{"zoneName":"Z"},"query":{"recordType":"Note"},"continuationMarker":"\#(token)"}"#)
            #expect(query.status == 400)
            #expect(query.json["ckErrorCode"] == nil)
        }
    }

    @Test(arguments: TestStore.allAndSharded) func aRecreatedZoneIsANewZone(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            _ = try await client.modify([operation("create", "r")], as: .user(world.alice))
            let token = try await Self.zoneChanges(client, zone: "Z", token: nil, as: world.alice).syncToken
            _ = try await client.send(
                "zones/modify", as: .user(world.alice), body: #"{"operations":[{"operationType":"delete","zone":{"zoneID":{"zoneName":"Z"}}}]}"#)

            let deleted = try await client.send(
                "changes/zone", as: .user(world.alice), body: #"{"zones":[{"zoneID":{"zoneName":"Z"},"syncToken":"\#(token)"}]}"#)
            #expect(deleted.zones.first?["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND")

            try await client.createZone("Z", as: world.alice)
            let expired = try await client.send(
                "changes/zone", as: .user(world.alice), body: #"{"zones":[{"zoneID":{"zoneName":"Z"},"syncToken":"\#(token)"}]}"#)
            #expect(expired.status == 200)
            #expect(expired.zones.first?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            #expect(expired.zones.first?["reason"]?.stringValue?.contains("fetch again without a syncToken") == true)
            #expect(expired.zones.first?["ckErrorCode"]?.stringValue == "CHANGE_TOKEN_EXPIRED")
            let legacy = try await client.send(
                "records/changes", as: .user(world.alice), body: #"{"zoneID":{"zoneName":"Z"},"syncToken":"\#(token)"}"#)
            #expect(legacy.status == 400)
            #expect(legacy.json["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            #expect(legacy.json["ckErrorCode"]?.stringValue == "CHANGE_TOKEN_EXPIRED")

            let fresh = try await Self.zoneChanges(client, zone: "Z", token: nil, as: world.alice)
            #expect(fresh.records.isEmpty, "the new zone has none of the old zone's records")
        }
    }

    @Test(arguments: TestStore.allAndSharded) func feedsDoNotApplyToThePublicDatabase(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let zone = try await client.send(
                "changes/zone", as: .user(world.alice), database: "public", body: #"{"zones":[{"zoneID":{"zoneName":"_defaultZone"}}]}"#)
            #expect(zone.status == 400)
            let database = try await client.send("changes/database", as: .user(world.alice), database: "public", body: "{}")
            #expect(database.status == 400)
        }
    }

    @Test func tombstonesAndTokensSurviveARestart() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-restart-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("cumulus.sqlite").path
        let logger = Logger(label: "test")
        let accounts = AccountService(store: try SQLiteRecordStore(path: path), passwordHasher: PasswordHasher(rounds: 1 << 10))
        try await accounts.createContainer(TestWorld.container, logger: logger)
        let apiToken = try await accounts.createAPIToken(container: TestWorld.container, environment: .development, logger: logger)
        let account = try await accounts.createUser(container: TestWorld.container, name: "alice", password: nil, email: nil, logger: logger)
        let user = TestUser(account: account, webAuthToken: try await accounts.issueWebAuthToken(for: account, logger: logger))

        /// A server process over the data file: a new store each time, as after a restart.
        func server(_ body: @Sendable (CloudKitTestClient) async throws -> Void) async throws {
            let app = buildApplication(configuration: ServerConfiguration(port: 0), store: try SQLiteRecordStore(path: path), logger: .testServer)
            try await app.test(.live) { client in try await CloudKitTestClient.patient(client, apiToken: apiToken, body) }
        }
        let token = Mutex("")
        try await server { client in
            try await client.createZone("Z", as: user)
            _ = try await client.modify([operation("create", "kept"), operation("create", "gone")], as: .user(user))
            let first = try await Self.zoneChanges(client, zone: "Z", token: nil, as: user).syncToken
            token.withLock { $0 = first }
            _ = try await client.modify([operation("forceDelete", "gone")], as: .user(user))
        }
        // A new process on the same data: the tombstone is still there and the old token still reads.
        let savedToken = token.withLock { $0 }
        try await server { client in
            let full = try await Self.zoneChanges(client, zone: "Z", token: nil, as: user)
            #expect(full.records.contains { $0["recordName"]?.stringValue == "gone" && $0["deleted"] == .bool(true) })
            let resumed = try await Self.zoneChanges(client, zone: "Z", token: savedToken, as: user)
            #expect(resumed.records.map { $0["recordName"]?.stringValue } == ["gone"])
            #expect(resumed.records[0]["deleted"] == .bool(true))
        }
    }

    @Test(arguments: TestStore.allAndSharded) func concurrentWritesAreNeverSkippedByAPagingReader(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let writerFinished = Mutex(false)
            let writer = Task {
                for batch in 0..<40 {
                    var operations = (0..<5).map { operation("create", "b\(batch)-\($0)", fields: #"{"v":{"value":\#(batch)}}"#) }
                    if batch > 0 { operations.append(operation("forceUpdate", "b\(batch - 1)-0", fields: #"{"v":{"value":\#(1000 + batch)}}"#)) }
                    if batch > 1 { operations.append(operation("forceDelete", "b\(batch - 2)-1")) }
                    _ = try await client.modify(operations, as: .user(world.alice))
                }
                writerFinished.withLock { $0 = true }
            }
            var state: [String: JSONValue] = [:]
            var token: String?
            var pages = 0
            while true {
                // Only a page fetched after the writer finished, with nothing more coming, ends the read.
                let finishedBefore = writerFinished.withLock { $0 }
                let page = try await Self.zoneChanges(client, zone: "Z", token: token, limit: 7, as: world.alice)
                Self.apply(page.records, to: &state)
                token = page.syncToken
                pages += 1
                if !page.moreComing && finishedBefore { break }
            }
            try await writer.value
            var expected: [String: JSONValue] = [:]
            Self.apply(try await Self.zoneChanges(client, zone: "Z", token: nil, as: world.alice).records, to: &expected)
            #expect(pages > 2)
            #expect(state.count == 40 * 5 - 38)
            #expect(state == expected)
        }
    }
}
