import CumulusCore
import CumulusModel
import Foundation
import HTTPTypes
import Testing

/// `subscriptions/modify`, `subscriptions/list` and `subscriptions/lookup`, as CloudKit Web Services clients send them.
@Suite("Subscriptions", .timeLimit(.minutes(10)))
struct SubscriptionTests {
    static func subscriptions(_ response: CloudKitResponse) -> [JSONValue] { response.json["subscriptions"]?.arrayValue ?? [] }

    static func modify(_ client: CloudKitTestClient, as user: TestUser, database: String = "private", _ operations: [String]) async throws
        -> CloudKitResponse
    {
        try await client.send(
            "subscriptions/modify", as: .user(user), database: database, body: #"{"operations":[\#(operations.joined(separator: ","))]}"#)
    }

    static func operation(_ type: String, _ subscription: String) -> String {
        #"{"operationType":"\#(type)","subscription":\#(subscription)}"#
    }

    static let zoneSubscription = #"{"subscriptionID":"drives-zone","subscriptionType":"zone","zoneID":{"zoneName":"Drives"}}"#
    static let querySubscription = #"""
        {"subscriptionID":"long-drives","subscriptionType":"query","query":{"recordType":"Drive","filterBy":[{"comparator":"GREATER_THAN","fieldName":"distance","fieldValue":{"value":10000}}]},"firesOn":["create","update"],"zoneID":{"zoneName":"Drives"},"zoneWide":false,"notificationInfo":{"alertBody":"A long drive","shouldSendContentAvailable":true}}
        """#
    static let databaseSubscription = #"{"subscriptionID":"everything","subscriptionType":"database"}"#

    @Test(arguments: TestStore.allAndSharded) func subscriptionsAreCreatedListedLookedUpUpdatedAndDeleted(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            let created = try await Self.modify(
                client, as: alice,
                [
                    Self.operation("create", Self.zoneSubscription), Self.operation("create", Self.querySubscription),
                    Self.operation("create", Self.databaseSubscription), Self.operation("create", #"{"subscriptionType":"database"}"#),
                ])
            #expect(created.status == 200, "\(created.json)")
            let saved = Self.subscriptions(created)
            #expect(saved.map { $0["subscriptionType"]?.stringValue } == ["zone", "query", "database", "database"])
            #expect(saved[1]["firesOn"] == .array([.string("create"), .string("update")]))
            #expect(saved[1]["zoneWide"] == .bool(false))
            #expect(saved[1]["notificationInfo"]?["alertBody"]?.stringValue == "A long drive")
            #expect(saved[1]["query"]?["filterBy"]?[0]?["fieldName"]?.stringValue == "distance")
            let generated = try #require(saved[3]["subscriptionID"]?.stringValue)
            #expect(generated.count == 36, "the server names a subscription sent without an ID")

            let listed = try await client.send("subscriptions/list", as: .user(alice), method: .get)
            #expect(
                Set(Self.subscriptions(listed).compactMap { $0["subscriptionID"]?.stringValue }) == [
                    "drives-zone", "long-drives", "everything", generated,
                ])
            #expect(Self.subscriptions(listed).first { $0["subscriptionID"]?.stringValue == "long-drives" } == saved[1], "stored as saved")

            // Each user, and each database, has its own.
            #expect(Self.subscriptions(try await client.send("subscriptions/list", as: .user(bob), method: .get)).isEmpty)
            #expect(Self.subscriptions(try await client.send("subscriptions/list", as: .user(alice), database: "shared", method: .get)).isEmpty)

            let lookedUp = try await client.send(
                "subscriptions/lookup", as: .user(alice), body: #"{"subscriptions":[{"subscriptionID":"everything"},{"subscriptionID":"nope"}]}"#)
            let found = Self.subscriptions(lookedUp)
            #expect(found.first?["subscriptionType"]?.stringValue == "database")
            #expect(found.last?["serverErrorCode"]?.stringValue == "NOT_FOUND" && found.last?["subscriptionID"]?.stringValue == "nope")

            let changed = try await Self.modify(
                client, as: alice,
                [
                    Self.operation("update", Self.querySubscription.replacingOccurrences(of: #"["create","update"]"#, with: #"["delete"]"#)),
                    Self.operation("update", #"{"subscriptionID":"missing","subscriptionType":"database"}"#),
                    Self.operation("delete", #"{"subscriptionID":"drives-zone"}"#),
                    Self.operation("delete", #"{"subscriptionID":"drives-zone"}"#),
                    // A create of an existing ID replaces it, so a client that lost the answer can send it again.
                    Self.operation("create", Self.databaseSubscription.replacingOccurrences(of: "}", with: #","firesOnce":true}"#)),
                ])
            let outcomes = Self.subscriptions(changed)
            #expect(outcomes[0]["firesOn"] == .array([.string("delete")]))
            #expect(outcomes[1]["serverErrorCode"]?.stringValue == "NOT_FOUND")
            #expect(outcomes[2]["deleted"] == .bool(true) && outcomes[2]["subscriptionID"]?.stringValue == "drives-zone")
            #expect(outcomes[3]["serverErrorCode"]?.stringValue == "NOT_FOUND")
            #expect(outcomes[4]["firesOnce"] == .bool(true))
            let after = Self.subscriptions(try await client.send("subscriptions/list", as: .user(alice), method: .get))
            #expect(Set(after.compactMap { $0["subscriptionID"]?.stringValue }) == ["long-drives", "everything", generated])
            #expect(after.first { $0["subscriptionID"]?.stringValue == "everything" }?["firesOnce"] == .bool(true))
        }
    }

    @Test(arguments: [
        (#"{"subscriptionType":"weekly"}"#, "operations[0].subscription.subscriptionType"),
        (#"{"subscriptionType":"zone"}"#, "operations[0].subscription.zoneID"),
        (#"{"subscriptionType":"query","query":{}}"#, "operations[0].subscription.query.recordType"),
        (#"{"subscriptionType":"query","query":{"recordType":"Drive"},"firesOn":["sometimes"]}"#, "operations[0].subscription.firesOn[0]"),
        (#"{"subscriptionType":"query","query":{"recordType":"Drive"},"zoneWide":false}"#, "operations[0].subscription.zoneID"),
        (#"{"subscriptionType":"query","query":{"recordType":"9lives"}}"#, "operations[0].subscription.query.recordType"),
        (#"{"subscriptionID":"has space","subscriptionType":"database"}"#, "operations[0].subscription.subscriptionID"),
        (#"{"subscriptionType":"database","notificationInfo":"loud"}"#, "operations[0].subscription.notificationInfo"),
    ])
    func badSubscriptionsNameTheField(_ subscription: String, _ path: String) async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let response = try await Self.modify(client, as: world.alice, [Self.operation("create", subscription)])
            #expect(response.status == 400)
            #expect(response.serverErrorCode == "BAD_REQUEST")
            #expect(response.reason?.hasPrefix(path) == true, "\(response.reason ?? "")")
            #expect(Self.subscriptions(try await client.send("subscriptions/list", as: .user(world.alice), method: .get)).isEmpty)
        }
    }

    @Test func subscriptionsNeedAUserAFittingDatabaseAndStayWithinTheLimit() async throws {
        let world = try await TestWorld.make(limits: Limits(maximumSubscriptions: 2))
        try await world.test { client in
            let anonymous = try await client.send(
                "subscriptions/modify", as: .anonymous, database: "public",
                body: #"{"operations":[\#(Self.operation("create", Self.querySubscription))]}"#)
            #expect(anonymous.serverErrorCode == "AUTHENTICATION_REQUIRED")

            let publicZone = try await Self.modify(client, as: world.alice, database: "public", [Self.operation("create", Self.zoneSubscription)])
            #expect(publicZone.status == 400 && publicZone.reason?.contains("public database") == true)
            let publicQuery = try await Self.modify(
                client, as: world.alice, database: "public",
                [Self.operation("create", #"{"subscriptionType":"query","query":{"recordType":"Drive"}}"#)])
            #expect(publicQuery.status == 200 && Self.subscriptions(publicQuery).first?["zoneWide"] == .bool(true))
            let sharedZone = try await Self.modify(client, as: world.alice, database: "shared", [Self.operation("create", Self.zoneSubscription)])
            #expect(sharedZone.status == 400 && sharedZone.reason?.contains("ownerRecordName") == true)

            let limited = try await Self.modify(
                client, as: world.alice,
                [
                    Self.operation("create", #"{"subscriptionID":"a","subscriptionType":"database"}"#),
                    Self.operation("create", #"{"subscriptionID":"b","subscriptionType":"database"}"#),
                    Self.operation("create", #"{"subscriptionID":"c","subscriptionType":"database"}"#),
                    Self.operation("create", #"{"subscriptionID":"a","subscriptionType":"database","firesOnce":true}"#),
                ])
            let outcomes = Self.subscriptions(limited)
            #expect(outcomes[2]["serverErrorCode"]?.stringValue == "QUOTA_EXCEEDED")
            #expect(outcomes[3]["firesOnce"] == .bool(true), "replacing one is not a new one")
        }
    }
}
