import CumulusCore
import CumulusModel
import Foundation
import HTTPTypes
import Logging
import Testing

/// Helpers for sharing stories.
extension CloudKitTestClient {
    /// A request in the shared database, naming the owner's zone.
    func shared(_ operation: String, as user: TestUser, body: String) async throws -> CloudKitResponse {
        try await send(operation, as: .user(user), database: "shared", body: body)
    }

    func ownerZone(_ zone: String, owner: TestUser) -> String {
        #""zoneID":{"zoneName":"\#(zone)","ownerRecordName":"\#(owner.userRecordName)"}"#
    }

    func sharedLookup(_ names: [String], zone: String, owner: TestUser, as user: TestUser) async throws -> CloudKitResponse {
        let records = names.map { #"{"recordName":"\#($0)"}"# }.joined(separator: ",")
        return try await shared("records/lookup", as: user, body: #"{\#(ownerZone(zone, owner: owner)),"records":[\#(records)]}"#)
    }

    func sharedModify(_ operations: [String], zone: String, owner: TestUser, as user: TestUser) async throws -> CloudKitResponse {
        try await shared(
            "records/modify", as: user, body: #"{\#(ownerZone(zone, owner: owner)),"operations":[\#(operations.joined(separator: ","))]}"#)
    }

    func sharedChanges(zone: String, owner: TestUser, as user: TestUser, token: String? = nil) async throws -> CloudKitResponse {
        let tokenPart = token.map { #","syncToken":"\#($0)""# } ?? ""
        return try await shared("changes/zone", as: user, body: #"{"zones":[{\#(ownerZone(zone, owner: owner))\#(tokenPart)}]}"#)
    }

    func databaseChanges(_ database: String, as user: TestUser, token: String? = nil) async throws -> CloudKitResponse {
        try await send("changes/database", as: .user(user), database: database, body: token.map { #"{"syncToken":"\#($0)"}"# } ?? "{}")
    }

    func resolve(_ guid: String, as identity: Identity, accept: Bool = false, fetchRoot: Bool = false) async throws -> CloudKitResponse {
        try await send(
            accept ? "records/accept" : "records/resolve", as: identity, database: "public",
            body: #"{"shortGUIDs":[{"value":"\#(guid)","shouldFetchRootRecord":\#(fetchRoot)}]}"#
        )
    }
}

/// A share record operation.
func shareOperation(
    _ type: String = "create", name: String = "share-1", root: String? = "list", tag: String? = nil, publicPermission: String = "NONE",
    participants: [(String, String)] = []
) -> String {
    let forRecord = root.map { #","forRecord":{"recordName":"\#($0)"}"# } ?? ""
    let tagPart = tag.map { #","recordChangeTag":"\#($0)""# } ?? ""
    let list = participants.map { email, permission in
        #"{"type":"USER","permission":"\#(permission)","acceptanceStatus":"INVITED","userIdentity":{"lookupInfo":{"emailAddress":"\#(email)"}}}"#
    }.joined(separator: ",")
    return #"""
        {"operationType":"\#(type)","record":{"recordName":"\#(name)","recordType":"cloudKit.share","fields":{"cloudkit.title":{"value":"Groceries"}}\#(tagPart)\#(forRecord),"publicPermission":"\#(publicPermission)","participants":[\#(list)]}}
        """#
}

@Suite("Live sharing: stories", .timeLimit(.minutes(10)))
struct SharingTests {
    static func names(_ response: CloudKitResponse) -> Set<String> {
        Set(response.records.compactMap { $0["serverErrorCode"] == nil ? $0["recordName"]?.stringValue : nil })
    }

    static func zoneRecords(_ response: CloudKitResponse) -> [JSONValue] {
        response.zones.first?["records"]?.arrayValue ?? []
    }

    @Test(arguments: TestStore.allAndSharded) func shoppingListStory(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            // The owner makes a list with an item, and keeps one record of the zone private.
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify(
                [
                    operation("create", "list", type: "List", fields: #"{"name":{"value":"Weekend"}}"#),
                    operation("create", "milk", type: "Item", extra: #","parent":{"recordName":"list"}"#),
                    operation("create", "diary", type: "Note", fields: #"{"text":{"value":"not shared"}}"#),
                ],
                zone: "Lists", as: .user(alice)
            )
            let ownerToken = try #require(
                (try await client.send("changes/zone", as: .user(alice), body: #"{"zones":[{"zoneID":{"zoneName":"Lists"}}]}"#)).zones.first?[
                    "syncToken"]?.stringValue
            )

            // She shares it with Bob, by email.
            let shared = try await client.modify([shareOperation(participants: [("bob@example.com", "READ_WRITE")])], zone: "Lists", as: .user(alice))
            let share = try #require(shared.records.first)
            #expect(share["serverErrorCode"] == nil, "\(shared.json)")
            #expect(share["recordType"]?.stringValue == "cloudkit.share")
            let guid = try #require(share["shortGUID"]?.stringValue)
            #expect(share["url"]?.stringValue?.hasSuffix("/share/\(guid)") == true)
            let statuses = share["participants"]?.arrayValue?.map { $0["acceptanceStatus"]?.stringValue }
            #expect(statuses == ["ACCEPTED", "INVITED"])
            #expect(share["owner"]?["userIdentity"]?["userRecordName"]?.stringValue == alice.userRecordName)
            let root = try await client.lookup(["list"], zone: "Lists", as: .user(alice))
            #expect(root.records[0]["share"]?["recordName"]?.stringValue == "share-1", "the root points at its share")

            // Invited but not accepted: Bob sees the invitation, none of the data.
            let resolved = try await client.resolve(guid, as: .user(bob), fetchRoot: true)
            let result = try #require(resolved.json["results"]?[0])
            #expect(result["databaseScope"]?.stringValue == "SHARED")
            #expect(result["participantStatus"]?.stringValue == "INVITED")
            #expect(result["participantPermission"]?.stringValue == "READ_WRITE")
            #expect(result["rootRecord"]?["fields"]?["name"]?["value"] == .string("Weekend"))
            #expect(result["ownerIdentity"]?["userRecordName"]?.stringValue == alice.userRecordName)
            let early = try await client.sharedLookup(["list"], zone: "Lists", owner: alice, as: bob)
            #expect(early.serverErrorCode == "ZONE_NOT_FOUND")
            #expect((try await client.send("zones/list", as: .user(bob), database: "shared", method: .get)).zones.isEmpty)

            // Bob accepts: the owner's zone appears in his shared database.
            let accepted = try await client.resolve(guid, as: .user(bob), accept: true)
            #expect(accepted.json["results"]?[0]?["participantStatus"]?.stringValue == "ACCEPTED")
            let bobZones = try await client.send("zones/list", as: .user(bob), database: "shared", method: .get)
            let bobZoneNames = bobZones.zones.map { $0["zoneID"]?["zoneName"]?.stringValue }
            #expect(bobZoneNames == ["Lists"])
            #expect(bobZones.zones.first?["zoneID"]?["ownerRecordName"]?.stringValue == alice.userRecordName)
            let bobDatabase = try await client.databaseChanges("shared", as: bob)
            let bobChangedZones = bobDatabase.zones.map { $0["zoneID"]?["zoneName"]?.stringValue }
            #expect(bobChangedZones == ["Lists"])
            let bobDatabaseToken = try #require(bobDatabase.json["syncToken"]?.stringValue)

            // He sees the hierarchy and the share, never the private record.
            let first = try await client.sharedChanges(zone: "Lists", owner: alice, as: bob)
            #expect(Set(Self.zoneRecords(first).compactMap { $0["recordName"]?.stringValue }) == ["list", "milk", "share-1"])
            let bobToken = try #require(first.zones.first?["syncToken"]?.stringValue)
            #expect(Self.names(try await client.sharedLookup(["list", "milk", "diary"], zone: "Lists", owner: alice, as: bob)) == ["list", "milk"])
            let hidden = try await client.sharedLookup(["diary"], zone: "Lists", owner: alice, as: bob)
            #expect(hidden.records[0]["serverErrorCode"]?.stringValue == "NOT_FOUND")
            let query = try await client.shared(
                "records/query", as: bob, body: #"{\#(client.ownerZone("Lists", owner: alice)),"query":{"recordType":"Note"}}"#)
            #expect(query.status == 200)
            #expect(query.records.isEmpty)

            // Both add items; each sees the other's through their own feed.
            let eggs = try await client.sharedModify(
                [operation("create", "eggs", type: "Item", extra: #","parent":{"recordName":"list"}"#)], zone: "Lists", owner: alice, as: bob
            )
            #expect(eggs.records[0]["serverErrorCode"] == nil, "\(eggs.json)")
            #expect(eggs.records[0]["modified"]?["userRecordName"]?.stringValue == bob.userRecordName)
            _ = try await client.modify(
                [operation("create", "bread", type: "Item", extra: #","parent":{"recordName":"list"}"#)], zone: "Lists", as: .user(alice))

            let ownerFeed = try await client.send(
                "changes/zone", as: .user(alice), body: #"{"zones":[{"zoneID":{"zoneName":"Lists"},"syncToken":"\#(ownerToken)"}]}"#
            )
            let ownerSaw = Self.zoneRecords(ownerFeed)
            #expect(
                ownerSaw.contains { $0["recordName"]?.stringValue == "eggs" && $0["created"]?["userRecordName"]?.stringValue == bob.userRecordName })
            let bobFeed = try await client.sharedChanges(zone: "Lists", owner: alice, as: bob, token: bobToken)
            let bobSaw = Self.zoneRecords(bobFeed).compactMap { $0["recordName"]?.stringValue }
            #expect(bobSaw.contains("bread"))
            #expect(!Self.zoneRecords(bobFeed).contains { $0["recordName"]?.stringValue == "diary" })

            // The owner removes Bob: his next database sync reports the zone deleted, and access ends at once.
            let current = try await client.lookup(["share-1"], zone: "Lists", as: .user(alice))
            let shareTag = try #require(current.records[0]["recordChangeTag"]?.stringValue)
            let removed = try await client.modify([shareOperation("update", tag: shareTag, participants: [])], zone: "Lists", as: .user(alice))
            #expect(removed.records[0]["serverErrorCode"] == nil, "\(removed.json)")
            let after = try await client.databaseChanges("shared", as: bob, token: bobDatabaseToken)
            #expect(after.zones.first?["zoneID"]?["zoneName"]?.stringValue == "Lists")
            #expect(after.zones.first?["deleted"] == .bool(true))
            #expect((try await client.sharedLookup(["list"], zone: "Lists", owner: alice, as: bob)).serverErrorCode == "ZONE_NOT_FOUND")
            #expect(
                (try await client.sharedChanges(zone: "Lists", owner: alice, as: bob, token: bobToken)).zones.first?["serverErrorCode"]?.stringValue
                    == "ZONE_NOT_FOUND")
            let write = try await client.sharedModify([operation("forceUpdate", "milk", type: "Item")], zone: "Lists", owner: alice, as: bob)
            #expect(write.serverErrorCode == "ZONE_NOT_FOUND")
        }
    }

    @Test(arguments: TestStore.allAndSharded) func zoneWideShareStory(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("SharedZone", as: alice)
            _ = try await client.modify(
                [operation("create", "fast-1", type: "Fasting"), operation("create", "fast-2", type: "Fasting")], zone: "SharedZone", as: .user(alice)
            )
            let share = try await client.modify(
                [shareOperation(name: "cloudkit.zoneshare", root: nil, participants: [("bob@example.com", "READ_ONLY")])], zone: "SharedZone",
                as: .user(alice)
            )
            let guid = try #require(share.records.first?["shortGUID"]?.stringValue, "\(share.json)")
            _ = try await client.resolve(guid, as: .user(bob), accept: true)

            let feed = try await client.sharedChanges(zone: "SharedZone", owner: alice, as: bob)
            #expect(Set(Self.zoneRecords(feed).compactMap { $0["recordName"]?.stringValue }) == ["fast-1", "fast-2", "cloudkit.zoneshare"])
            // Records added later are shared too.
            _ = try await client.modify([operation("create", "fast-3", type: "Fasting")], zone: "SharedZone", as: .user(alice))
            #expect(Self.names(try await client.sharedLookup(["fast-3"], zone: "SharedZone", owner: alice, as: bob)) == ["fast-3"])
            // Read-only: writes are refused and change nothing.
            let write = try await client.sharedModify(
                [operation("forceUpdate", "fast-1", type: "Fasting", fields: #"{"x":{"value":1}}"#)], zone: "SharedZone", owner: alice, as: bob)
            #expect(write.records[0]["serverErrorCode"]?.stringValue == "ACCESS_DENIED")
            let unchanged = try await client.lookup(["fast-1"], zone: "SharedZone", as: .user(alice))
            #expect(unchanged.records[0]["fields"]?["x"] == nil)
            // A zone has one zone-wide share, and no hierarchy share beside it.
            let second = try await client.modify([shareOperation(name: "other-share", root: "fast-1")], zone: "SharedZone", as: .user(alice))
            #expect(second.records[0]["serverErrorCode"]?.stringValue == "BAD_REQUEST")
        }
    }

    @Test(arguments: TestStore.allAndSharded) func joiningByPublicLinkLeavingStoppingAndResharing(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify([operation("create", "list", type: "List")], zone: "Lists", as: .user(alice))
            let created = try await client.modify([shareOperation(publicPermission: "READ_ONLY")], zone: "Lists", as: .user(alice))
            let guid = try #require(created.records.first?["shortGUID"]?.stringValue, "\(created.json)")

            // Anyone signed in with the link can join a public share, with its permission.
            let joined = try await client.resolve(guid, as: .user(bob), accept: true)
            #expect(joined.json["results"]?[0]?["participantType"]?.stringValue == "PUBLIC_USER")
            #expect(joined.json["results"]?[0]?["participantPermission"]?.stringValue == "READ_ONLY")
            #expect(Self.names(try await client.sharedLookup(["list"], zone: "Lists", owner: alice, as: bob)) == ["list"])
            let bobToken = try #require((try await client.databaseChanges("shared", as: bob)).json["syncToken"]?.stringValue)

            // Bob leaves by deleting the share from his shared database; the share stays.
            let leave = try await client.sharedModify([shareOperation("forceDelete", root: nil)], zone: "Lists", owner: alice, as: bob)
            #expect(leave.records[0]["deleted"] == .bool(true), "\(leave.json)")
            let left = try await client.databaseChanges("shared", as: bob, token: bobToken)
            #expect(left.zones.first?["deleted"] == .bool(true))
            #expect((try await client.lookup(["share-1"], zone: "Lists", as: .user(alice))).records[0]["recordName"]?.stringValue == "share-1")

            // Bob joins again; then the owner stops sharing: he loses access and the root no longer points at a share.
            _ = try await client.resolve(guid, as: .user(bob), accept: true)
            #expect(Self.names(try await client.sharedLookup(["list"], zone: "Lists", owner: alice, as: bob)) == ["list"])
            let stop = try await client.modify([shareOperation("forceDelete", root: nil)], zone: "Lists", as: .user(alice))
            #expect(stop.records[0]["deleted"] == .bool(true))
            #expect((try await client.sharedLookup(["list"], zone: "Lists", owner: alice, as: bob)).serverErrorCode == "ZONE_NOT_FOUND")
            #expect((try await client.lookup(["list"], zone: "Lists", as: .user(alice))).records[0]["share"] == nil)
            #expect((try await client.resolve(guid, as: .user(bob))).json["results"]?[0]?["serverErrorCode"]?.stringValue == "NOT_FOUND")

            // Sharing the same root again gives the same link.
            let again = try await client.modify(
                [shareOperation(name: "share-2", participants: [("bob@example.com", "READ_WRITE")])], zone: "Lists", as: .user(alice))
            #expect(again.records.first?["shortGUID"]?.stringValue == guid, "\(again.json)")
            _ = try await client.resolve(guid, as: .user(bob), accept: true)
            #expect(Self.names(try await client.sharedLookup(["list"], zone: "Lists", owner: alice, as: bob)) == ["list"])
        }
    }

    @Test(arguments: TestStore.allAndSharded) func recordsMovedOutOfASharedHierarchyLeaveParticipantsDevices(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify(
                [
                    operation("create", "list", type: "List"), operation("create", "elsewhere", type: "List"),
                    operation("create", "aisle", type: "Aisle", extra: #","parent":{"recordName":"list"}"#),
                    operation("create", "milk", type: "Item", extra: #","parent":{"recordName":"aisle"}"#),
                ],
                zone: "Lists", as: .user(alice)
            )
            let share = try await client.modify([shareOperation(participants: [("bob@example.com", "READ_WRITE")])], zone: "Lists", as: .user(alice))
            _ = try await client.resolve(try #require(share.records.first?["shortGUID"]?.stringValue), as: .user(bob), accept: true)
            let first = try await client.sharedChanges(zone: "Lists", owner: alice, as: bob)
            #expect(Set(Self.zoneRecords(first).compactMap { $0["recordName"]?.stringValue }) == ["list", "aisle", "milk", "share-1"])
            let token = try #require(first.zones.first?["syncToken"]?.stringValue)

            // The owner moves the aisle, with the milk below it, out of the shared list.
            let aisleTag = try #require(
                (try await client.lookup(["aisle"], zone: "Lists", as: .user(alice))).records[0]["recordChangeTag"]?.stringValue)
            _ = try await client.modify(
                [operation("update", "aisle", type: "Aisle", tag: aisleTag, extra: #","parent":{"recordName":"elsewhere"}"#)], zone: "Lists",
                as: .user(alice)
            )
            let moved = try await client.sharedChanges(zone: "Lists", owner: alice, as: bob, token: token)
            let deletions = Self.zoneRecords(moved).filter { $0["deleted"] == .bool(true) }.compactMap { $0["recordName"]?.stringValue }
            #expect(Set(deletions) == ["aisle", "milk"], "\(moved.json)")
            #expect(!"\(moved.json)".contains("elsewhere"))
            #expect(Self.names(try await client.sharedLookup(["aisle", "milk"], zone: "Lists", owner: alice, as: bob)).isEmpty)
            let movedToken = try #require(moved.zones.first?["syncToken"]?.stringValue)

            // Moved back under the shared root, they come back.
            let newTag = try #require(
                (try await client.lookup(["aisle"], zone: "Lists", as: .user(alice))).records[0]["recordChangeTag"]?.stringValue)
            _ = try await client.modify(
                [operation("update", "aisle", type: "Aisle", tag: newTag, extra: #","parent":{"recordName":"list"}"#)], zone: "Lists",
                as: .user(alice)
            )
            let back = try await client.sharedChanges(zone: "Lists", owner: alice, as: bob, token: movedToken)
            let returned = Self.zoneRecords(back).filter { $0["deleted"] != .bool(true) }.compactMap { $0["recordName"]?.stringValue }
            #expect(Set(returned) == ["aisle", "milk"], "\(back.json)")
        }
    }

    /// Seed `001`'s groups: two groups of one zone shared with the same participant. What they may see changes while
    /// the zone stays in their shared database, and their feed reports exactly the records that came or went.
    @Test(arguments: TestStore.allAndSharded) func accessChangesInAZoneStillSharedReachTheParticipantsFeed(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("Groups", as: alice)
            _ = try await client.modify(
                [
                    operation("create", "trip", type: "Group"), operation("create", "flat", type: "Group"),
                    operation("create", "fuel", type: "Cost", extra: #","parent":{"recordName":"trip"}"#),
                    operation("create", "rent", type: "Cost", extra: #","parent":{"recordName":"flat"}"#),
                    operation("create", "diary", type: "Note"),
                ],
                zone: "Groups", as: .user(alice)
            )
            let invite = [("bob@example.com", "READ_WRITE")]
            let tripShare = try await client.modify(
                [shareOperation(name: "share-trip", root: "trip", participants: invite)], zone: "Groups", as: .user(alice))
            let flatShare = try await client.modify(
                [shareOperation(name: "share-flat", root: "flat", participants: invite)], zone: "Groups", as: .user(alice))
            _ = try await client.resolve(try #require(tripShare.records.first?["shortGUID"]?.stringValue), as: .user(bob), accept: true)
            let first = try await client.sharedChanges(zone: "Groups", owner: alice, as: bob)
            #expect(Set(Self.zoneRecords(first).compactMap { $0["recordName"]?.stringValue }) == ["trip", "fuel", "share-trip"])
            var token = try #require(first.zones.first?["syncToken"]?.stringValue)
            func changes() async throws -> (changed: Set<String>, deleted: Set<String>) {
                let page = try await client.sharedChanges(zone: "Groups", owner: alice, as: bob, token: token)
                #expect(page.zones.first?["serverErrorCode"] == nil, "\(page.json)")
                token = try #require(page.zones.first?["syncToken"]?.stringValue)
                let records = Self.zoneRecords(page)
                return (
                    Set(records.filter { $0["deleted"] != .bool(true) }.compactMap { $0["recordName"]?.stringValue }),
                    Set(records.filter { $0["deleted"] == .bool(true) }.compactMap { $0["recordName"]?.stringValue })
                )
            }

            // Accepting the second group's share, in a zone already on the device: its records arrive, though none changed.
            _ = try await client.resolve(try #require(flatShare.records.first?["shortGUID"]?.stringValue), as: .user(bob), accept: true)
            var seen = try await changes()
            #expect(seen.changed == ["flat", "rent", "share-flat"] && seen.deleted.isEmpty, "\(seen)")

            // Removed from the flat's share only: exactly its records go; the zone stays, with the trip.
            let flatTag = try #require(
                (try await client.lookup(["share-flat"], zone: "Groups", as: .user(alice))).records[0]["recordChangeTag"]?.stringValue)
            _ = try await client.modify(
                [shareOperation("update", name: "share-flat", root: "flat", tag: flatTag)], zone: "Groups", as: .user(alice))
            seen = try await changes()
            #expect(seen.deleted == ["flat", "rent", "share-flat"] && seen.changed.isEmpty, "\(seen)")
            #expect(Self.names(try await client.sharedLookup(["flat", "rent", "trip"], zone: "Groups", owner: alice, as: bob)) == ["trip"])
            let zones = try await client.databaseChanges("shared", as: bob)
            #expect(zones.zones.count == 1 && zones.zones.first?["deleted"] != .bool(true), "\(zones.json)")

            // Invited again and accepting, the flat comes back; its share stopped, it goes again.
            let flatTag2 = try #require(
                (try await client.lookup(["share-flat"], zone: "Groups", as: .user(alice))).records[0]["recordChangeTag"]?.stringValue)
            _ = try await client.modify(
                [shareOperation("update", name: "share-flat", root: "flat", tag: flatTag2, participants: invite)], zone: "Groups", as: .user(alice))
            _ = try await client.resolve(try #require(flatShare.records.first?["shortGUID"]?.stringValue), as: .user(bob), accept: true)
            seen = try await changes()
            #expect(seen.changed == ["flat", "rent", "share-flat"] && seen.deleted.isEmpty, "\(seen)")
            _ = try await client.modify(
                [#"{"operationType":"forceDelete","record":{"recordName":"share-flat"}}"#], zone: "Groups", as: .user(alice))
            seen = try await changes()
            #expect(seen.deleted == ["flat", "rent", "share-flat"] && seen.changed.isEmpty, "\(seen)")

            // An edit the participant still sees arrives as before.
            let fuelTag = try #require(
                (try await client.lookup(["fuel"], zone: "Groups", as: .user(alice))).records[0]["recordChangeTag"]?.stringValue)
            _ = try await client.modify([operation("update", "fuel", type: "Cost", tag: fuelTag)], zone: "Groups", as: .user(alice))
            seen = try await changes()
            #expect(seen.changed == ["fuel"] && seen.deleted.isEmpty, "\(seen)")
        }
    }

    @Test(arguments: TestStore.allAndSharded) func joiningAPublicShareStopsAtTheParticipantLimit(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store, limits: Limits(maximumShareParticipants: 2))
        let logger = Logger(label: "t")
        try await world.test { client in
            try await client.createZone("Lists", as: world.alice)
            _ = try await client.modify([operation("create", "list", type: "List")], zone: "Lists", as: .user(world.alice))
            let created = try await client.modify([shareOperation(publicPermission: "READ_ONLY")], zone: "Lists", as: .user(world.alice))
            let guid = try #require(created.records.first?["shortGUID"]?.stringValue)
            let account = try await world.accounts.createUser(
                container: TestWorld.container, name: "carol", password: nil, email: nil, logger: logger)
            let carol = TestUser(account: account, webAuthToken: try await world.accounts.issueWebAuthToken(for: account, logger: logger))
            for joiner in [world.bob, carol] {
                #expect(
                    try await client.resolve(guid, as: .user(joiner), accept: true).json["results"]?[0]?["participantStatus"]?.stringValue
                        == "ACCEPTED")
            }
            let account2 = try await world.accounts.createUser(
                container: TestWorld.container, name: "dave", password: nil, email: nil, logger: logger)
            let dave = TestUser(account: account2, webAuthToken: try await world.accounts.issueWebAuthToken(for: account2, logger: logger))
            let refused = try await client.resolve(guid, as: .user(dave), accept: true)
            #expect(refused.json["results"]?[0]?["serverErrorCode"]?.stringValue == "QUOTA_EXCEEDED")
            // Someone already in may accept again.
            #expect(try await client.resolve(guid, as: .user(world.bob), accept: true).json["results"]?[0]?["serverErrorCode"] == nil)
        }
    }

    @Test(arguments: TestStore.allAndSharded) func sharingRulesAreEnforced(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let alice = world.alice
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify(
                [operation("create", "list", type: "List"), operation("create", "item", type: "Item", extra: #","parent":{"recordName":"list"}"#)],
                zone: "Lists", as: .user(alice)
            )
            _ = try await client.modify([shareOperation()], zone: "Lists", as: .user(alice))
            // A record belongs to at most one share: not again, not below, not above.
            for root in ["list", "item"] {
                let overlap = try await client.modify([shareOperation(name: "share-\(root)", root: root)], zone: "Lists", as: .user(alice))
                #expect(overlap.records[0]["serverErrorCode"]?.stringValue == "BAD_REQUEST", "\(root)")
                #expect(overlap.records[0]["reason"]?.stringValue?.contains("already shared") == true)
            }
            // The default zone cannot be shared; an unknown participant is named in the error.
            _ = try await client.modify([operation("create", "loose", type: "List")], zone: nil, as: .user(alice))
            let defaultZone = try await client.modify([shareOperation(name: "s", root: "loose")], zone: nil, as: .user(alice))
            #expect(defaultZone.records[0]["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            let unknown = try await client.modify(
                [shareOperation(name: "s2", root: "list", participants: [("nobody@example.com", "READ_ONLY")])], zone: "Lists", as: .user(alice))
            #expect(unknown.status == 400)
            #expect(unknown.reason?.contains("participants[0]") == true)
            // Participants can be invited only while the share is private.
            let publicShare = try await client.modify(
                [shareOperation("forceUpdate", publicPermission: "READ_WRITE", participants: [("bob@example.com", "READ_ONLY")])], zone: "Lists",
                as: .user(alice)
            )
            #expect(publicShare.records[0]["serverErrorCode"]?.stringValue == "BAD_REQUEST")
        }
    }
}
