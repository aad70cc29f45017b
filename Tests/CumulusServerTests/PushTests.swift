import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1
import Testing

@testable import CumulusServerHTTP

/// CloudKit's push wire through real HTTP, as a third-party client long-polls it: `tokens/create`, then GETs of the
/// `webcourierURL`, each answering one notification or, after the timeout, nothing.
@Suite("Push: tokens and the courier", .timeLimit(.minutes(10)))
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
            try await client.waitForIdlePushConnections(1)
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

    /// A delivered notification costs one look at the feeds: the poll renewed after it takes over its token's last look
    /// and reads nothing, unless a commit came in between, which it then delivers at once. A stream looks again after an
    /// event only when more was due: two subscriptions moved by one write give two events from two looks.
    @Test(arguments: TestStore.all) func aRenewedPollTakesOverItsTokensLastLook(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let alice = world.alice
        try await world.test { client in
            let courier = try await PushStreamTests.subscribeAndMakeToken(client, as: alice)
            func looks() async throws -> Double {
                let response = try await client.client.execute(uri: "/metrics", method: .get, headers: [:], body: nil)
                return metricSample("cumulus_push_looks_total", in: String(buffer: response.body)) ?? 0
            }
            // The token's first poll looks once and finds nothing.
            #expect(try await Self.poll(client, courier, timeout: 1) == .null)
            let afterFirst = try await looks()
            #expect(afterFirst >= 1)

            // The next poll starts from that look: a write wakes it, and one look finds the notification.
            async let waiting = Self.poll(client, courier, timeout: 20)
            try await client.waitForIdlePushConnections(1)
            #expect(try await looks() == afterFirst)
            _ = try await client.modify([Self.drive("one", distance: 1)], zone: "Drives", as: .user(alice))
            #expect(try await waiting["ck"]?["met"]?["sid"]?.stringValue == "drives")
            let afterDelivery = try await looks()
            #expect(afterDelivery == afterFirst + 1)

            // Renewed with nothing new: no look at all.
            #expect(try await Self.poll(client, courier, timeout: 1) == .null)
            #expect(try await looks() == afterDelivery)

            // A write while no poll waits wakes the parked registration: the next poll looks at once and delivers it.
            _ = try await client.modify([Self.drive("two", distance: 2)], zone: "Drives", as: .user(alice))
            #expect(try await Self.poll(client, courier, timeout: 20)["ck"]?["met"]?["sid"]?.stringValue == "drives")
            #expect(try await looks() == afterDelivery + 1)

            // A second subscription (saving it makes the user's connections look, so it starts from now): one write
            // moves both, and a stream carries both events from two looks, the first seeing that more was due.
            let subscribed = try await client.send(
                "subscriptions/modify", as: .user(alice),
                body: #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"all","subscriptionType":"database"}}]}"#)
            #expect(subscribed.status == 200, "\(subscribed.json)")
            var (stream, _) = try await EventStreamReader.open(client, courier)
            try await client.waitForIdlePushConnections(1)
            let beforeBoth = try await looks()
            _ = try await client.modify([Self.drive("three", distance: 3)], zone: "Drives", as: .user(alice))
            let first = try JSONValue(parsing: try #require(try await stream.nextEvent()?.data))
            let second = try JSONValue(parsing: try #require(try await stream.nextEvent()?.data))
            #expect(Set([first["ck"]?["met"]?["sid"]?.stringValue, second["ck"]?["met"]?["sid"]?.stringValue]) == ["drives", "all"])
            try await client.waitForIdlePushConnections(1)
            #expect(try await looks() == beforeBoth + 2)
        }
    }

    /// `tokens/create` and `tokens/register` answer at CloudKit JS's path (`/device/1/…`), at the reference's (no database
    /// segment) and at Apple's page's (with one).
    @Test(arguments: [
        "device/1/\(TestWorld.container)/development", "database/1/\(TestWorld.container)/development",
        "database/1/\(TestWorld.container)/development/private",
    ])
    func aTokenMadeBeforeSigningInIsRegisteredToTheUser(_ prefix: String) async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let created = try await client.raw("/\(prefix)/tokens/create?ckAPIToken=\(client.apiToken)", body: "{}")
            let token = try #require(created.json["apnsToken"]?.stringValue, "\(created.json)")
            let courier = try #require(created.json["webcourierURL"]?.stringValue)
            let registered = try await client.raw(
                "/\(prefix)/tokens/register?ckAPIToken=\(client.apiToken)&ckWebAuthToken=\(world.bob.webAuthToken)",
                body: #"{"apnsToken":"\#(token)"}"#)
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

/// A Server-Sent Events stream of the courier read as a browser's `EventSource` would: events (with their `id` and
/// `event` fields) and comment lines, in order.
struct EventStreamReader {
    struct Event: Equatable {
        var id: String?
        var event: String?
        var data: String?
        /// A comment line (`: heartbeat`), when the block was one.
        var comment: String?
    }

    var iterator: HTTPClientResponse.Body.AsyncIterator
    var pending = ""

    /// Opens the stream of a `webcourierURL`, resuming after `lastEventID` when given.
    static func open(_ client: CloudKitTestClient, _ url: String, lastEventID: String? = nil) async throws -> (EventStreamReader, HTTPClientResponse)
    {
        let port = try #require(client.client.port)
        let range = try #require(url.range(of: "/courier/"))
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)" + String(url[range.lowerBound...]))
        request.headers.add(name: "Accept", value: "text/event-stream")
        if let lastEventID { request.headers.add(name: "Last-Event-ID", value: lastEventID) }
        // A generous deadline: the whole suite loads both cores heavily, and only a stream that never answers should fail.
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(120))
        return (EventStreamReader(iterator: response.body.makeAsyncIterator()), response)
    }

    /// The next block (an event, or a comment); `nil` when the stream ended.
    mutating func next() async throws -> Event? {
        while true {
            if let end = pending.range(of: "\n\n") {
                let block = pending[..<end.lowerBound]
                pending = String(pending[end.upperBound...])
                var event = Event()
                for line in block.split(separator: "\n", omittingEmptySubsequences: false) {
                    if line.hasPrefix(":") {
                        event.comment = line.dropFirst().trimmingCharacters(in: .whitespaces)
                    } else if let colon = line.firstIndex(of: ":") {
                        let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                        switch line[..<colon] {
                        case "id": event.id = value
                        case "event": event.event = value
                        case "data": event.data = value
                        default: break
                        }
                    }
                }
                return event
            }
            guard let buffer = try await iterator.next() else { return nil }
            pending += String(buffer: buffer)
        }
    }

    /// The next event that is not a comment.
    mutating func nextEvent() async throws -> Event? {
        while let event = try await next() {
            if event.comment == nil || event.data != nil || event.event != nil { return event }
        }
        return nil
    }
}

@Suite("Push: the event stream and its limits", .timeLimit(.minutes(10)))
struct PushStreamTests {
    static func subscribeAndMakeToken(_ client: CloudKitTestClient, as user: TestUser) async throws -> String {
        try await client.createZone("Drives", as: user)
        _ = try await client.send(
            "subscriptions/modify", as: .user(user),
            body:
                #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"drives","subscriptionType":"zone","zoneID":{"zoneName":"Drives"}}}]}"#
        )
        let created = try await client.raw(
            "/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=\(client.apiToken)&ckWebAuthToken=\(user.webAuthToken)", body: "{}"
        )
        return try #require(created.json["webcourierURL"]?.stringValue)
    }

    @Test(arguments: TestStore.all) func aStreamCarriesNotificationsAndResumesAfterTheLastEventItsDeviceGot(_ store: TestStore) async throws {
        var world = try await TestWorld.make(store: store)
        world.configuration.pushHeartbeatInterval = .milliseconds(100)
        let alice = world.alice
        try await world.test { client in
            let courier = try await Self.subscribeAndMakeToken(client, as: alice)
            var (first, response) = try await EventStreamReader.open(client, courier)
            #expect(response.status == .ok)
            #expect(response.headers["content-type"].first?.hasPrefix("text/event-stream") == true)
            #expect(response.headers["cache-control"].first == "no-cache")

            _ = try await client.modify([PushTests.drive("d1", distance: 1)], zone: "Drives", as: .user(alice))
            let one = try #require(try await first.nextEvent())
            #expect(one.id == "1" && one.event == nil, "\(one)")
            let payload = try JSONValue(parsing: try #require(one.data))
            #expect(payload["ck"]?["met"]?["sid"]?.stringValue == "drives" && payload["ck"]?["met"]?["zid"]?.stringValue == "Drives")
            // Idle, the stream says it is alive.
            var heartbeat = try #require(try await first.next())
            while heartbeat.comment != "heartbeat" { heartbeat = try #require(try await first.next()) }

            // The device reconnects naming the last event it got; the newer connection ends the older one.
            var (second, _) = try await EventStreamReader.open(client, courier, lastEventID: "1")
            while let ended = try await first.next() { #expect(ended.data == nil, "the superseded stream carried \(ended)") }
            _ = try await client.modify([PushTests.drive("d2", distance: 2)], zone: "Drives", as: .user(alice))
            let two = try #require(try await second.nextEvent())
            #expect(two.id == "2", "\(two)")

            // Event 2 was sent, but the device says it got only 1 (the answer was lost on the way): it is sent again.
            var (third, _) = try await EventStreamReader.open(client, courier, lastEventID: "1")
            let again = try #require(try await third.nextEvent())
            let (sent, resent) = (try JSONValue(parsing: try #require(two.data)), try JSONValue(parsing: try #require(again.data)))
            #expect(again.id == "2" && resent["ck"]?["met"] == sent["ck"]?["met"], "\(again)")

            // An id the server cannot resume from: a reset, carrying the id to resume after from now on.
            var (fourth, _) = try await EventStreamReader.open(client, courier, lastEventID: "99")
            let reset = try #require(try await fourth.nextEvent())
            #expect(reset.event == "reset" && reset.id == "2", "\(reset)")

            let malformed = try await client.raw(
                String(courier[try #require(courier.range(of: "/courier/")).lowerBound...]), method: .get,
                headers: [.accept: "text/event-stream", HTTPField.Name("Last-Event-ID")!: "yesterday"])
            #expect(malformed.status == 400 && malformed.reason?.contains("Last-Event-ID") == true, "\(malformed.json)")
        }
    }

    /// Courier polls on tokens the server never issued hold nothing: 10,000 of them from 20 addresses are refused at
    /// once, and tokens no user registered have places of their own, so a signed-in user's poll and stream are served
    /// while strangers hold the rest.
    @Test(arguments: TestStore.all)
    func forgedAndAnonymousPollsNeverTakeASignedInDevicesPlace(_ store: TestStore) async throws {
        var world = try await TestWorld.make(store: store)
        world.configuration.pushLimits = PushLimits(maximumConnections: 8, maximumAnonymousConnections: 3)
        // The test client's own connection waits through the flood, which a loaded machine may take minutes to send.
        world.configuration.connectionLimits.idleTimeout = .seconds(600)
        // Forged polls are refused at once here (a second's wait each is what bounds a real flood: tested below).
        world.configuration.requestLimits.refusalDelay = .zero
        let alice = world.alice
        try await world.test { client in
            let port = try #require(client.client.port)
            // 20 addresses, a client each, sending 10 connections of 50 forged polls pipelined, one after another: 10,000
            // polls of 30 s (a few threads at once, so the suites beside this one are not starved).
            let forged =
                (0..<50).map { _ in
                    let token = (0..<64).map { _ in String("0123456789abcdef".randomElement()!) }.joined()
                    return "GET /courier/1/\(TestWorld.container)/development/\(token)?timeout=30 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                }.joined() + "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            let refusals = try await withThrowingTaskGroup(of: Int.self) { group in
                for address in 2...21 {
                    for _ in 0..<1 {
                        group.addTask {
                            var refused = 0
                            for _ in 0..<10 {
                                let exchange = try await RawHTTPClient.exchange(
                                    port: port, head: forged, body: [], readTimeout: 120, source: "127.0.0.\(address)")
                                let count = exchange.response.components(separatedBy: "HTTP/1.1 404 Not Found").count - 1
                                if count != 50 { Issue.record("\(count) of 50 refused: \(exchange.response.suffix(600))") }
                                refused += count
                            }
                            return refused
                        }
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(refusals == 10_000)

            // Anonymous tokens (made with the API token alone) fill their own places, and no more.
            var anonymous: [EventStreamReader] = []
            for _ in 0..<3 {
                let made = try await client.raw(
                    "/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=\(client.apiToken)", body: "{}")
                var (stream, _) = try await EventStreamReader.open(client, try #require(made.json["webcourierURL"]?.stringValue))
                #expect(try await stream.next()?.comment == "connected")
                anonymous.append(stream)
            }
            let oneMore = try await client.raw("/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=\(client.apiToken)", body: "{}")
            let refused = try await client.raw(
                try PushTests.courierPath(try #require(oneMore.json["webcourierURL"]?.stringValue), timeout: 0), method: .get)
            #expect(refused.status == 503 && refused.serverErrorCode == "TRY_AGAIN_LATER", "\(refused.json)")

            // The signed-in user's device is served: a stream and a poll.
            let courier = try await PushStreamTests.subscribeAndMakeToken(client, as: alice)
            var (stream, _) = try await EventStreamReader.open(client, courier)
            #expect(try await stream.next()?.comment == "connected")
            #expect(try await PushTests.poll(client, courier, timeout: 0) == .null)
            withExtendedLifetime(anonymous) {}
        }
    }

    /// A poll on a made-up token is refused after the refusal delay, so each of a flooder's connections makes one a
    /// second; a client gone meanwhile is refused nothing.
    @Test func aForgedPollIsRefusedAfterTheRefusalDelay() async throws {
        var world = try await TestWorld.make()
        world.configuration.requestLimits.refusalDelay = .seconds(2)
        try await world.test { client in
            let port = try #require(client.client.port)
            let token = String(repeating: "ab", count: 32)
            let head = "GET /courier/1/\(TestWorld.container)/development/\(token)?timeout=0 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            let started = ContinuousClock.now
            let exchange = try await RawHTTPClient.exchange(port: port, head: head, body: [], readTimeout: 60)
            #expect(exchange.statusCode == 404, "\(exchange.response)")
            #expect(ContinuousClock.now - started >= .seconds(2), "refused before the delay")
        }
    }

    /// A token value another user's device holds (it is in that device's courier URL) cannot be registered by someone
    /// else: the answer is the one for a token of another container, and the device goes on being notified.
    @Test(arguments: TestStore.all)
    func anotherUsersTokenIsNeitherRegisteredNorMoved(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            let courier = try await PushStreamTests.subscribeAndMakeToken(client, as: alice)
            let token = String(try #require(courier.split(separator: "/").last))
            let taken = try await client.send("tokens/register", as: .user(bob), body: #"{"apnsToken":"\#(token)"}"#)
            let foreign = try await client.send("tokens/register", as: .user(bob), body: #"{"apnsToken":"\#(String(repeating: "ab", count: 32))"}"#)
            #expect(taken.status == 404 && taken.serverErrorCode == "NOT_FOUND", "\(taken.json)")
            #expect(taken.status == foreign.status && taken.reason == foreign.reason)
            let stored = try await world.store.pushToken(token, logger: Logger(label: "test"))
            #expect(stored?.userRecordName == alice.userRecordName)
            // Alice's device is still the one told of her changes.
            async let told = PushTests.poll(client, courier, timeout: 20)
            _ = try await client.modify([PushTests.drive("d", distance: 1)], zone: "Drives", as: .user(alice))
            #expect(try await told["ck"]?["ckuserid"]?.stringValue == alice.userRecordName)
        }
    }

    @Test func oneInstanceHoldsAtMostItsShareOfConnections() async throws {
        var world = try await TestWorld.make()
        world.configuration.pushLimits = PushLimits(maximumConnections: 1)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            let aliceCourier = try await PushStreamTests.subscribeAndMakeToken(client, as: alice)
            let bobCourier = try await PushStreamTests.subscribeAndMakeToken(client, as: bob)
            var (stream, _) = try await EventStreamReader.open(client, aliceCourier)
            #expect(try await stream.next()?.comment == "connected")
            let refused = try await client.raw(try PushTests.courierPath(bobCourier, timeout: 0), method: .get)
            #expect(refused.status == 503 && refused.serverErrorCode == "TRY_AGAIN_LATER", "\(refused.json)")
            #expect(refused.headers[.retryAfter] == "5")
        }
    }

    /// A full instance gives a user who holds no place the place of the biggest holder's newest stream, which ends; the
    /// holder cannot take it back while it holds two more than the newcomer.
    @Test func aFullInstanceGivesAPlaceToAUserWhoHoldsNone() async throws {
        var world = try await TestWorld.make()
        world.configuration.pushLimits = PushLimits(maximumConnections: 3, maximumAnonymousConnections: 1)
        // Heartbeats bound the wait for the stream that should end: 150 of them are 30 s.
        world.configuration.pushHeartbeatInterval = .milliseconds(200)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            var streams: [EventStreamReader] = []
            var couriers: [String] = []
            for _ in 0..<3 {
                let courier = try await PushStreamTests.subscribeAndMakeToken(client, as: alice)
                var (stream, _) = try await EventStreamReader.open(client, courier)
                #expect(try await stream.next()?.comment == "connected")
                streams.append(stream)
                couriers.append(courier)
            }
            let bobCourier = try await PushStreamTests.subscribeAndMakeToken(client, as: bob)
            var (bobStream, _) = try await EventStreamReader.open(client, bobCourier)
            #expect(try await bobStream.next()?.comment == "connected", "Bob, who held none, is served")
            // Alice's newest stream ends (heartbeats may come first).
            var ended = false
            for _ in 0..<150 {
                guard let event = try await streams[2].next() else {
                    ended = true
                    break
                }
                #expect(event.comment == "heartbeat", "\(event)")
            }
            #expect(ended, "Alice's newest stream went on")
            let again = try await client.raw(try PushTests.courierPath(couriers[2], timeout: 0), method: .get)
            #expect(again.status == 503 && again.serverErrorCode == "TRY_AGAIN_LATER", "\(again.json)")
            withExtendedLifetime(streams) {}
        }
    }

    @Test func aUserKeepsOnlyTheirNewestTokens() async throws {
        var world = try await TestWorld.make()
        world.configuration.pushLimits = PushLimits(maximumTokensPerUser: 2)
        let alice = world.alice
        let store = world.store
        try await world.test { client in
            var tokens: [String] = []
            for _ in 0..<3 {
                let created = try await client.raw(
                    "/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=\(client.apiToken)&ckWebAuthToken=\(alice.webAuthToken)",
                    body: "{}")
                tokens.append(try #require(created.json["apnsToken"]?.stringValue))
                // Bound in order: the store orders tokens by the millisecond they were bound.
                try await Task.sleep(for: .milliseconds(5))
            }
            let logger = Logger(label: "test")
            #expect(try await store.pushToken(tokens[0], logger: logger) == nil)
            #expect(try await store.pushToken(tokens[1], logger: logger)?.userRecordName == alice.userRecordName)
            #expect(try await store.pushToken(tokens[2], logger: logger)?.userRecordName == alice.userRecordName)

            // A token made before signing in is not stored until it is registered.
            let anonymous = try await client.raw(
                "/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=\(client.apiToken)", body: "{}")
            let value = try #require(anonymous.json["apnsToken"]?.stringValue)
            #expect(try await store.pushToken(value, logger: logger) == nil)
            // Its courier answers (empty) like any other's.
            let courier = try #require(anonymous.json["webcourierURL"]?.stringValue)
            #expect(try await PushTests.poll(client, courier, timeout: 0) == .null)
        }
    }
}
