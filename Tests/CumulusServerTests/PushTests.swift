import AsyncHTTPClient
import CumulusCore
import CumulusModel
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOHTTP1
import Testing

/// CloudKit's push wire through real HTTP, as a third-party client long-polls it: `tokens/create`, then GETs of the
/// `webcourierURL`, each answering one notification or, after the timeout, nothing.
@Suite("Push: tokens and the courier")
struct PushTests {
    /// The courier path of a `webcourierURL`, with a timeout in seconds.
    static func courierPath(_ url: String, timeout: Int) throws -> String {
        let range = try #require(url.range(of: "/courier/"))
        return String(url[range.lowerBound...]) + "?timeout=\(timeout)"
    }

    /// One courier poll on a connection of its own (the test client's one connection stays free for writes), as a
    /// third-party client's loop does: the notification, or `.null` for an empty answer.
    static func poll(_ client: CloudKitTestClient, _ url: String, timeout: Int) async throws -> JSONValue {
        let port = try #require(client.client.port)
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)" + (try courierPath(url, timeout: timeout)))
        request.method = .GET
        // A generous deadline: the whole suite loads both cores heavily, and only a poll that never answers should fail.
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(Int64(timeout) + 45))
        #expect(response.status.code == 200)
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return bytes.readableBytes == 0 ? .null : try JSONValue(parsing: Array(bytes.readableBytesView))
    }

    static func drive(_ name: String, distance: Int) -> String {
        #"{"operationType":"create","record":{"recordName":"\#(name)","recordType":"Drive","fields":{"distance":{"value":\#(distance)}}}}"#
    }

    @Test(arguments: TestStore.all) func zoneAndQuerySubscriptionsReachALongPollingClient(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let alice = world.alice
        try await world.test { client in
            try await client.createZone("Drives", as: alice)
            let subscribed = try await client.send(
                "subscriptions/modify", as: .user(alice),
                body: #"""
                    {"operations":[
                    {"operationType":"create","subscription":{"subscriptionID":"drives","subscriptionType":"zone","zoneID":{"zoneName":"Drives"}}},
                    {"operationType":"create","subscription":{"subscriptionID":"long","subscriptionType":"query","query":{"recordType":"Drive","filterBy":[{"comparator":"GREATER_THAN","fieldName":"distance","fieldValue":{"value":10000}}]},"firesOn":["create"],"notificationInfo":{"alertBody":"A long drive"}}}]}
                    """#)
            #expect(subscribed.status == 200, "\(subscribed.json)")

            // CloudKit JS asks for its token under /device/1/…
            let created = try await client.raw(
                "/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=\(client.apiToken)&ckWebAuthToken=\(alice.webAuthToken)",
                body: #"{"apnsEnvironment":"development"}"#)
            #expect(created.status == 200, "\(created.json)")
            let courier = try #require(created.json["webcourierURL"]?.stringValue)
            #expect(created.json["apnsToken"]?.stringValue?.count == 64)
            #expect(created.json["apnsEnvironment"]?.stringValue == "development")

            // Nothing happened since the token was made: an empty answer after the timeout.
            #expect(try await Self.poll(client, courier, timeout: 1) == .null)

            // A poll waiting while another device writes is answered with the zone subscription's notification (how
            // soon is measured by the benchmarks, not here).
            async let waiting = Self.poll(client, courier, timeout: 20)
            try await Task.sleep(for: .milliseconds(300))
            _ = try await client.modify([Self.drive("short", distance: 500)], zone: "Drives", as: .user(alice))
            let first = try await waiting
            #expect(first["ck"]?["met"]?["sid"]?.stringValue == "drives", "\(first)")
            #expect(first["ck"]?["met"]?["zid"]?.stringValue == "Drives")
            #expect(first["ck"]?["met"]?["dbs"] == .number("2"))
            #expect(first["ck"]?["ckuserid"]?.stringValue == alice.userRecordName)
            #expect(first["ck"]?["cid"]?.stringValue == TestWorld.container)
            #expect(first["aps"]?["content-available"] == .number("1"))
            // The short drive matches no query subscription.
            #expect(try await Self.poll(client, courier, timeout: 1) == .null)

            // Changes made between polls wait for the next ones: nothing is lost, and each subscription speaks once.
            _ = try await client.modify(
                [Self.drive("long-1", distance: 20_000), Self.drive("long-2", distance: 30_000)], zone: "Drives", as: .user(alice))
            let second = try await Self.poll(client, courier, timeout: 5)
            let third = try await Self.poll(client, courier, timeout: 5)
            #expect(second["ck"]?["met"]?["sid"]?.stringValue == "drives", "\(second)")
            #expect(third["ck"]?["qry"]?["sid"]?.stringValue == "long", "\(third)")
            #expect(third["ck"]?["qry"]?["rid"]?.stringValue == "long-1")
            #expect(third["ck"]?["qry"]?["fo"] == .number("1"))
            #expect(third["aps"]?["alert"]?["body"]?.stringValue == "A long drive")
            #expect(try await Self.poll(client, courier, timeout: 1) == .null)
        }
    }

    @Test func aTokenMadeBeforeSigningInIsRegisteredToTheUser() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let created = try await client.raw("/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=\(client.apiToken)", body: "{}")
            let token = try #require(created.json["apnsToken"]?.stringValue)
            let courier = try #require(created.json["webcourierURL"]?.stringValue)
            let registered = try await client.send("tokens/register", as: .user(world.bob), body: #"{"apnsToken":"\#(token)"}"#)
            #expect(registered.status == 200 && registered.json["apnsToken"]?.stringValue == token, "\(registered.json)")
            _ = try await client.send(
                "subscriptions/modify", as: .user(world.bob),
                body: #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"all","subscriptionType":"database"}}]}"#)
            // The subscription is new to the token: it starts from now; the next change is told.
            #expect(try await Self.poll(client, courier, timeout: 1) == .null)
            _ = try await client.modify([Self.drive("d", distance: 1)], zone: "_defaultZone", as: .user(world.bob))
            let told = try await Self.poll(client, courier, timeout: 5)
            #expect(told["ck"]?["met"]?["sid"]?.stringValue == "all", "\(told)")

            let unknown = try await client.send("tokens/register", as: .user(world.bob), body: #"{"apnsToken":"nope"}"#)
            #expect(unknown.serverErrorCode == "NOT_FOUND")
            let badTimeout = try await client.raw(try Self.courierPath(courier, timeout: 999), method: .get)
            #expect(badTimeout.status == 400)
        }
    }

    @Test(arguments: TestStore.all) func participantsAreToldOfSharedChangesOnlyWhileShared(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify(
                [operation("create", "list", type: "List"), operation("create", "diary", type: "Note")], zone: "Lists", as: .user(alice))
            let shared = try await client.modify([shareOperation(participants: [("bob@example.com", "READ_ONLY")])], zone: "Lists", as: .user(alice))
            let guid = try #require(shared.records.first?["shortGUID"]?.stringValue)
            _ = try await client.resolve(guid, as: .user(bob), accept: true)
            _ = try await client.send(
                "subscriptions/modify", as: .user(bob), database: "shared",
                body: #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"shared","subscriptionType":"database"}}]}"#)
            let created = try await client.raw(
                "/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=\(client.apiToken)&ckWebAuthToken=\(bob.webAuthToken)",
                body: "{}")
            let courier = try #require(created.json["webcourierURL"]?.stringValue)

            // A change outside the share tells him nothing; one inside does.
            _ = try await client.modify(
                [operation("forceUpdate", "diary", type: "Note", fields: #"{"text":{"value":"private"}}"#)], zone: "Lists", as: .user(alice))
            #expect(try await Self.poll(client, courier, timeout: 1) == .null)
            _ = try await client.modify(
                [operation("create", "milk", type: "Item", extra: #","parent":{"recordName":"list"}"#)], zone: "Lists", as: .user(alice))
            let told = try await Self.poll(client, courier, timeout: 5)
            #expect(told["ck"]?["met"]?["dbs"] == .number("3"), "\(told)")
            #expect(told["ck"]?["met"]?["zid"]?.stringValue == "Lists" && told["ck"]?["met"]?["zoid"]?.stringValue == alice.userRecordName)

            // She stops sharing: his subscription falls silent.
            _ = try await client.modify([#"{"operationType":"forceDelete","record":{"recordName":"share-1"}}"#], zone: "Lists", as: .user(alice))
            _ = try await client.modify(
                [operation("create", "eggs", type: "Item", extra: #","parent":{"recordName":"list"}"#)], zone: "Lists", as: .user(alice))
            #expect(try await Self.poll(client, courier, timeout: 1) == .null)
        }
    }
}
