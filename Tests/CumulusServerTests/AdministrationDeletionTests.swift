import CumulusCore
import CumulusModel
import CumulusStore
import Logging
import Testing

/// `cumulus users delete` and `cumulus containers delete`: what goes, what stays, and what other users' devices see.
@Suite("Deleting users and containers", .timeLimit(.minutes(10)))
struct AdministrationDeletionTests {
    let logger = Logger(label: "test")

    @Test(arguments: TestStore.all)
    func aDeletedOwnersSharedZonesLeaveParticipantsDevicesAndAnInviteeLeavesTheShare(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob, carol) = (world.alice, world.bob, try await world.user("carol"))
        try await world.test { client in
            // Alice shares a list with Bob, who accepts; Carol shares hers with Bob, who has not accepted yet.
            for owner in [alice, carol] {
                try await client.createZone("Lists", as: owner)
                _ = try await client.modify([operation("create", "list", type: "List")], zone: "Lists", as: .user(owner))
            }
            let shared = try await client.modify(
                [shareOperation(participants: [("bob@example.com", "READ_WRITE")])], zone: "Lists", as: .user(alice))
            let guid = try #require(shared.records.first?["shortGUID"]?.stringValue, "\(shared.json)")
            _ = try await client.resolve(guid, as: .user(bob), accept: true)
            _ = try await client.modify([shareOperation(participants: [("bob@example.com", "READ_ONLY")])], zone: "Lists", as: .user(carol))
            let bobsFeed = try await client.send("changes/database", as: .user(bob), database: "shared", body: "{}")
            #expect(bobsFeed.zones.map { $0["zoneID"]?["ownerRecordName"]?.stringValue } == [alice.userRecordName])
            let syncToken = try #require(bobsFeed.json["syncToken"]?.stringValue)
            let carolsShareTag = try #require(
                try await client.lookup(["share-1"], zone: "Lists", as: .user(carol)).records.first?["recordChangeTag"]?.stringValue)

            _ = try await world.accounts.eraseUser(container: TestWorld.container, name: "alice", assets: nil, logger: logger)
            #expect(try await world.store.user(userRecordName: alice.userRecordName, logger: logger) == nil)
            // Bob's device learns that Alice's zone is gone, as when she deletes it herself.
            let after = try await client.send("changes/database", as: .user(bob), database: "shared", body: #"{"syncToken":"\#(syncToken)"}"#)
            #expect(after.zones.count == 1 && after.zones.first?["deleted"] == .bool(true), "\(after.json)")
            let zone = try await client.send(
                "changes/zone", as: .user(bob), database: "shared", body: #"{"zones":[{\#(client.ownerZone("Lists", owner: alice))}]}"#)
            #expect(zone.zones.first?["serverErrorCode"] == .string("ZONE_NOT_FOUND"), "\(zone.json)")

            // Deleting Bob takes him off Carol's share, which takes a new change tag so her devices see it.
            _ = try await world.accounts.eraseUser(container: TestWorld.container, name: "bob", assets: nil, logger: logger)
            let carolsShare = try #require(try await client.lookup(["share-1"], zone: "Lists", as: .user(carol)).records.first)
            #expect(carolsShare["recordChangeTag"]?.stringValue != carolsShareTag)
            let participants = carolsShare["participants"]?.arrayValue ?? []
            #expect(participants.map { $0["type"]?.stringValue } == ["OWNER"], "\(carolsShare)")
            #expect(try await world.store.listUsers(container: TestWorld.container, logger: logger).map(\.name) == ["carol"])
            // Carol's own data is untouched.
            #expect(try await client.lookup(["list"], zone: "Lists", as: .user(carol)).records.first?["recordType"] == .string("List"))
        }
        let missing = await #expect(throws: CumulusError.self) {
            _ = try await world.accounts.eraseUser(container: TestWorld.container, name: "alice", assets: nil, logger: logger)
        }
        #expect(missing?.code == .notFound)
    }

    @Test(arguments: TestStore.all)
    func aDeletedContainerTakesEverythingInItAndNothingElse(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify([operation("create", "list", type: "List")], zone: "Lists", as: .user(alice))
            let shared = try await client.modify(
                [shareOperation(participants: [("bob@example.com", "READ_WRITE")])], zone: "Lists", as: .user(alice))
            let guid = try #require(shared.records.first?["shortGUID"]?.stringValue)
            _ = try await client.resolve(guid, as: .user(bob), accept: true)
            _ = try await client.send(
                "subscriptions/modify", as: .user(bob), database: "shared",
                body: #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"all","subscriptionType":"database"}}]}"#)
            _ = try await client.modify([operation("create", "public-note")], zone: nil, as: .user(alice), database: "public")
        }
        #expect(try await publicNote(world) != nil)
        let other = try await world.accounts.createUser(container: TestWorld.otherContainer, name: "alice", password: nil, email: nil, logger: logger)

        try await world.accounts.deleteContainer(TestWorld.container, logger: logger)
        #expect(try await world.store.listContainers(logger: logger).map(\.id) == [TestWorld.otherContainer])
        #expect(try await world.store.apiToken(hash: TokenCodec.hash(world.apiToken), logger: logger) == nil)
        #expect(try await world.store.user(userRecordName: alice.userRecordName, logger: logger) == nil)
        #expect(try await world.store.user(userRecordName: other.userRecordName, logger: logger) != nil, "another container's user stays")

        // The identifier can be used again, and starts empty.
        try await world.accounts.createContainer(TestWorld.container, logger: logger)
        #expect(try await world.store.listUsers(container: TestWorld.container, logger: logger).isEmpty)
        #expect(try await publicNote(world) == nil)
        let missing = await #expect(throws: CumulusError.self) {
            try await world.accounts.deleteContainer("iCloud.com.example.nothing", logger: logger)
        }
        #expect(missing?.code == .notFound)
    }

    /// The public record the test wrote, read from the store.
    private func publicNote(_ world: TestWorld) async throws -> StoredRecord? {
        let publicDatabase = DatabaseRef.publicDatabase(container: TestWorld.container, environment: .development)
        do {
            return try await world.store.records(
                named: ["public-note"], zoneName: ZoneID.defaultZoneName, in: publicDatabase, access: nil, logger: logger)["public-note"]
        } catch let error as StoreError where error.code == .zoneNotFound {
            return nil
        }
    }
}
