import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusStore
import CumulusStoreSQLite
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOHTTPTypes
import Synchronization
import Testing

@testable import CumulusServer
@testable import CumulusServerHTTP

/// The courier answered below the router (``CourierChannelHandler``): which requests it takes, that the router never
/// sees them, that later requests on the connection still reach the router in order, and that an open stream is not
/// taken for an idle connection.
@Suite("Push: the courier below the router", .timeLimit(.minutes(10)))
struct CourierHandlerTests {
    static let token = String(repeating: "ab", count: 32)

    /// A token the store's server issued for the test container (no user registered it): the courier refuses one it
    /// did not issue.
    static func issuedToken(_ store: any RecordStore) async throws -> String {
        SyncTokenCodec(secret: try await store.serverSecret(logger: Logger(label: "test")))
            .newPushToken(container: TestWorld.container, environment: .development)
    }

    static func head(_ target: String, headers: HTTPFields = [:]) -> HTTPRequest {
        HTTPRequest(method: .get, scheme: "http", authority: "127.0.0.1", path: target, headerFields: headers)
    }

    @Test func onlyWellFormedCourierGetsAreTakenBelowTheRouter() throws {
        let base = "/courier/1/iCloud.com.example.tests/development/\(Self.token)"
        #expect(CourierRequest(Self.head(base))?.kind == .poll(wait: .seconds(PushRoutes.defaultWait)))
        #expect(CourierRequest(Self.head(base + "?timeout=5"))?.kind == .poll(wait: .seconds(5)))
        #expect(CourierRequest(Self.head(base + "?stream=1"))?.kind == .stream(lastEventID: nil))
        #expect(CourierRequest(Self.head(base, headers: [.accept: "text/event-stream"]))?.kind == .stream(lastEventID: nil))
        let resumed = CourierRequest(Self.head(base, headers: [.accept: "text/event-stream", PushRoutes.lastEventID: " 7 "]))
        #expect(resumed?.kind == .stream(lastEventID: 7))
        #expect(resumed?.container == "iCloud.com.example.tests" && resumed?.environment == .development && resumed?.token == Self.token)
        // Everything the router refuses with a reason (or answers otherwise) goes on to it.
        #expect(CourierRequest(Self.head(base + "?timeout=61")) == nil)
        #expect(CourierRequest(Self.head(base + "?timeout=soon")) == nil)
        #expect(CourierRequest(Self.head(base + "?stream=1&lastEventID=yesterday")) == nil)
        #expect(CourierRequest(Self.head("/courier/1/iCloud.com.example.tests/staging/\(Self.token)")) == nil)
        #expect(CourierRequest(Self.head("/courier/1/iCloud.com.example.tests/development/nosuchtoken")) == nil)
        #expect(CourierRequest(Self.head("/courier/1/iCloud%2Ecom/development/\(Self.token)")) == nil)
        #expect(CourierRequest(Self.head(base + "/more")) == nil)
        var post = Self.head(base)
        post.method = .post
        #expect(CourierRequest(post) == nil)
    }

    @Test func looksAtTheFeedsQueueBeyondTheGatesMaximumAndStartInOrder() {
        let gate = LookGate(maximum: 2)
        let started = Mutex<[Int]>([])
        for look in 0..<5 { gate.enter { started.withLock { $0.append(look) } } }
        #expect(started.withLock { $0 } == [0, 1])
        gate.leave()
        #expect(started.withLock { $0 } == [0, 1, 2])
        gate.leave()
        gate.leave()
        #expect(started.withLock { $0 } == [0, 1, 2, 3, 4])
        // Two running, none waiting: two leave, and the gate has room for two again.
        gate.leave()
        gate.leave()
        for look in 5..<8 { gate.enter { started.withLock { $0.append(look) } } }
        #expect(started.withLock { $0 } == [0, 1, 2, 3, 4, 5, 6])
    }

    @Test func anIdleConnectionIsOneWithNoRequestReadAndNoAnswerUnderWay() {
        let start = ContinuousClock.now
        let timeout = Duration.seconds(60)
        var state = IdleConnectionState()
        #expect(state.check(now: start + .seconds(61), timeout: timeout) == .idle)
        state.read(.head(Self.head("/health")), at: start)
        // Reading a request: idle only when no part of it came for the timeout.
        #expect(state.check(now: start + .seconds(30), timeout: timeout) == .activeUntil(start + timeout))
        #expect(state.check(now: start + .seconds(61), timeout: timeout) == .idle)
        state.read(.end(nil), at: start + .seconds(1))
        // Read, and answered slowly (a long poll, a stream): never idle.
        #expect(state.check(now: start + .seconds(3600), timeout: timeout) == .answering)
        #expect(state.wrote(.head(HTTPResponse(status: .ok)), at: start + .seconds(2)) == false)
        #expect(state.wrote(.end(nil), at: start + .seconds(3)) == true)
        #expect(state.check(now: start + .seconds(62), timeout: timeout) == .activeUntil(start + .seconds(63)))
        #expect(state.check(now: start + .seconds(63), timeout: timeout) == .idle)
        // An answer to no request (a malformed head's 400) does not count below zero.
        #expect(state.wrote(.end(nil), at: start + .seconds(4)) == true)
        state.read(.head(Self.head("/health")), at: start + .seconds(5))
        state.read(.end(nil), at: start + .seconds(5))
        #expect(state.check(now: start + .seconds(600), timeout: timeout) == .answering)
    }

    /// The handler in a pipeline of its own: a poll is answered by the handler and never reaches what stands behind it
    /// (the router); the next request on the connection does, after the poll's answer.
    @Test func aPollIsAnsweredBelowTheRouterAndTheNextRequestReachesIt() async throws {
        let store = try await TestStore.sqlite.make()
        let courier = Courier(
            push: PushService(store: store), heartbeat: .seconds(15), metrics: ServerMetrics(), logger: Logger(label: "test"),
            serverName: "Cumulus")
        let channel = NIOAsyncTestingChannel()
        try await channel.testingEventLoop.executeInContext {
            try channel.pipeline.syncOperations.addHandler(CourierChannelHandler(courier: courier))
        }
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).get()

        // An issued token that is not stored: its poll answers empty once its (zero) wait is over.
        let poll = Self.head("/courier/1/iCloud.com.example.tests/development/\(try await Self.issuedToken(store))?timeout=0")
        try await channel.writeInbound(HTTPRequestPart.head(poll))
        try await channel.writeInbound(HTTPRequestPart.end(nil))
        // Pipelined behind it, before its answer: held until the poll is answered.
        try await channel.writeInbound(HTTPRequestPart.head(Self.head("/health")))
        try await channel.writeInbound(HTTPRequestPart.end(nil))

        guard case .head(let answer) = try await channel.waitForOutboundWrite(as: HTTPResponsePart.self) else {
            Issue.record("the poll's answer did not start with a head")
            return
        }
        #expect(answer.status == .ok)
        #expect(answer.headerFields[.contentLength] == "0")
        #expect(answer.headerFields[.contentType] == "application/json; charset=utf-8")
        #expect(answer.headerFields[.server] == "Cumulus" && answer.headerFields[.date]?.hasSuffix(" GMT") == true)
        #expect(answer.headerFields[RequestIdentity.header]?.count == 36)
        guard case .end = try await channel.waitForOutboundWrite(as: HTTPResponsePart.self) else {
            Issue.record("the poll's answer did not end")
            return
        }

        // Behind the handler only the pipelined request arrives, whole; the poll never did.
        await channel.testingEventLoop.run()
        guard case .head(let routed) = try await channel.readInbound(as: HTTPRequestPart.self) else {
            Issue.record("the request after the poll did not reach the router")
            return
        }
        #expect(routed.path == "/health")
        guard case .end = try await channel.readInbound(as: HTTPRequestPart.self) else {
            Issue.record("the request after the poll arrived without its end")
            return
        }
        #expect(try await channel.readInbound(as: HTTPRequestPart.self) == nil)

        // While the router answers that request, a courier request waits its turn: it goes to the router too.
        try await channel.writeInbound(HTTPRequestPart.head(poll))
        guard case .head(let second) = try await channel.readInbound(as: HTTPRequestPart.self) else {
            Issue.record("a courier request behind an unanswered one was not handed to the router")
            return
        }
        #expect(second.path == poll.path)
        _ = try await channel.finish()
    }

    /// A look that waits long (for the gate, or a slow store) leaves the event loop idle: while it is under way only the
    /// heartbeat is timed. A deadline or re-check already past would fire the timer again at once, over and over (this
    /// busy loop once starved every connection of an event loop while PostgreSQL was slow); here it would never let
    /// the testing event loop's `run` return, which the time limit turns into a failure.
    @Test(.timeLimit(.minutes(1))) func aLookWaitingItsTurnLeavesTheEventLoopIdle() async throws {
        let store = try await TestStore.sqlite.make()
        let courier = Courier(
            push: PushService(store: store), heartbeat: .seconds(15), metrics: ServerMetrics(), logger: Logger(label: "test"),
            serverName: "Cumulus")
        // Every place at the gate taken: the stream's first look waits.
        for _ in 0..<courier.looks.maximum { courier.looks.enter {} }
        let channel = NIOAsyncTestingChannel()
        try await channel.testingEventLoop.executeInContext {
            try channel.pipeline.syncOperations.addHandler(CourierChannelHandler(courier: courier))
        }
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).get()
        let stream = Self.head(
            "/courier/1/iCloud.com.example.tests/development/\(try await Self.issuedToken(store))", headers: [.accept: "text/event-stream"])
        try await channel.writeInbound(HTTPRequestPart.head(stream))
        try await channel.writeInbound(HTTPRequestPart.end(nil))
        guard case .head(let opened) = try await channel.waitForOutboundWrite(as: HTTPResponsePart.self) else {
            Issue.record("the stream did not open")
            return
        }
        #expect(opened.headerFields[.contentType]?.hasPrefix("text/event-stream") == true)
        for _ in 0..<20 {
            await channel.testingEventLoop.advanceTime(by: .seconds(1))
            await channel.testingEventLoop.run()
        }
        courier.looks.leave()
        _ = try await channel.finish()
    }

    /// Through a real server and a plain socket: a poll and a request pipelined behind it are answered in order.
    @Test func aPipelinedRequestAfterAPollIsAnsweredAfterIt() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let port = try #require(client.client.port)
            let head =
                "GET /courier/1/\(TestWorld.container)/development/\(try await Self.issuedToken(world.store))?timeout=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                + "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            let exchange = try await RawHTTPClient.exchange(port: port, head: head, body: [], readTimeout: 30)
            #expect(exchange.closedByServer)
            let answers = exchange.response.components(separatedBy: "HTTP/1.1 200 OK")
            #expect(answers.count == 3, "\(exchange.response)")
            #expect(answers.count == 3 && answers[1].lowercased().contains("content-length: 0"), "\(exchange.response)")
            #expect(exchange.response.hasSuffix("ok"), "\(exchange.response)")
        }
    }

    /// What a client pipelines behind a waiting poll is not read while the poll waits (the handler holds at most what
    /// one read brought, and stops reading), then reaches the router after the poll's answer: a large body behind a
    /// poll costs the server no buffer.
    @Test func aLargeRequestBehindAPollWaitsInTheSocketAndIsAnsweredAfterIt() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let port = try #require(client.client.port)
            let head =
                "GET /courier/1/\(TestWorld.container)/development/\(try await Self.issuedToken(world.store))?timeout=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                + "POST /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 40000\r\n\r\n"
            let exchange = try await RawHTTPClient.exchange(
                port: port, head: head, body: Array(repeating: UInt8(ascii: "x"), count: 40_000), readTimeout: 30)
            #expect(exchange.closedByServer, "\(exchange)")
            let poll = try #require(exchange.response.range(of: "HTTP/1.1 200 OK"), "\(exchange.response)")
            let second = try #require(
                exchange.response.range(of: "HTTP/1.1 ", range: poll.upperBound..<exchange.response.endIndex), "\(exchange.response)")
            #expect(exchange.response[poll.upperBound..<second.lowerBound].lowercased().contains("content-length: 0"))
        }
    }

    /// A stream that sends nothing for longer than the idle timeout (no notification, no heartbeat yet) is an answer
    /// under way, not an idle connection: it stays open and still carries the next notification.
    @Test func anOpenStreamOutlivesTheIdleTimeout() async throws {
        var world = try await TestWorld.make()
        // Long enough that a loaded machine reads a new connection's request within it; the stream then waits past it.
        world.configuration.connectionLimits.idleTimeout = .seconds(3)
        world.configuration.pushHeartbeatInterval = .seconds(120)
        let alice = world.alice
        try await world.test { client in
            // Every request on a connection of its own, closed after it: a pooled one may be closed as idle (after 3 s)
            // just as the next request goes out on it, on a loaded machine (seen in CI: a reset).
            let base = "http://127.0.0.1:\(try #require(client.client.port))"
            let credentials = "ckAPIToken=\(client.apiToken)&ckWebAuthToken=\(alice.webAuthToken)"
            // A request whose connection a loaded machine let sit past the idle timeout before reading it is sent again:
            // each of these may be (a create answers per item, a subscription or token is made anew), and what this test
            // is about is the stream.
            @Sendable func post(_ path: String, _ body: String) async throws -> JSONValue {
                var attempt = 1
                while true {
                    var request = HTTPClientRequest(url: "\(base)\(path)?\(credentials)")
                    request.method = .POST
                    request.headers.add(name: "Connection", value: "close")
                    request.body = .bytes(ByteBuffer(string: body))
                    do {
                        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
                        #expect(response.status == .ok)
                        return try JSONValue(parsing: Array(try await response.body.collect(upTo: 1 << 20).readableBytesView))
                    } catch let error as HTTPClientError where attempt < 3 && error != .deadlineExceeded {
                        attempt += 1
                    } catch let error as NIOCore.IOError where attempt < 3 && error.errnoCode == ECONNRESET {
                        attempt += 1
                    }
                }
            }
            let database = "/database/1/\(TestWorld.container)/development/private"
            _ = try await post("\(database)/zones/modify", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Drives"}}}]}"#)
            _ = try await post(
                "\(database)/subscriptions/modify",
                #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"drives","subscriptionType":"zone","zoneID":{"zoneName":"Drives"}}}]}"#
            )
            let courier = try #require(
                try await post("/device/1/\(TestWorld.container)/development/tokens/create", "{}")["webcourierURL"]?.stringValue)
            // Opening the stream is retried as the requests are; once it says "connected", a reset is a failure.
            var attempt = 1
            var stream: EventStreamReader
            while true {
                do {
                    var (opened, response) = try await EventStreamReader.open(client, courier)
                    #expect(response.status == .ok)
                    #expect(try await opened.next()?.comment == "connected")
                    stream = opened
                    break
                } catch let error as NIOCore.IOError where attempt < 3 && error.errnoCode == ECONNRESET {
                    attempt += 1
                }
            }
            try await Task.sleep(for: .seconds(7))
            _ = try await post(
                "\(database)/records/modify", #"{"zoneID":{"zoneName":"Drives"},"operations":[\#(PushTests.drive("late", distance: 1))]}"#)
            let event = try #require(try await stream.nextEvent())
            #expect(event.id == "1", "\(event)")
        }
    }
}
