import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Synchronization
import Testing

@testable import CumulusServer
@testable import CumulusServerHTTP

/// ``RequestDispatchHandler``: requests read by the connection's handlers, each answered in a task of its own.
@Suite("Requests answered a task each", .timeLimit(.minutes(10)))
struct RequestDispatchTests {
    /// Counts the reads from the socket asked for by what stands behind it.
    final class ReadCounter: ChannelOutboundHandler, RemovableChannelHandler, Sendable {
        typealias OutboundIn = HTTPResponsePart
        let reads = Mutex(0)

        func read(context: ChannelHandlerContext) {
            reads.withLock { $0 += 1 }
            context.read()
        }
    }

    /// Lets a route start reading its body only when the test says so.
    final class Gate: Sendable {
        private let opened = AsyncStream<Void>.makeStream()

        func open() { opened.continuation.finish() }
        func wait() async { for await _ in opened.stream {} }
    }

    /// What the `/reported` route found reading its body.
    final class BodyReports: Sendable {
        let reports = AsyncStream<String>.makeStream()
    }

    static func channel(gate: Gate = Gate(), reports: BodyReports = BodyReports()) async throws -> (NIOAsyncTestingChannel, ReadCounter) {
        let router = Router(context: CumulusRequestContext.self)
        let channel = NIOAsyncTestingChannel()
        let loop = channel.testingEventLoop
        router.get("/thread") { _, _ in
            try await Task.sleep(for: .milliseconds(1))
            return loop.inEventLoop ? "its connection's event loop" : "elsewhere"
        }
        router.post("/reported") { request, _ in
            do {
                let body = try await request.body.collect(upTo: 1 << 20)
                reports.reports.continuation.yield("read \(body.readableBytes)")
            } catch {
                reports.reports.continuation.yield("failed")
            }
            return "done"
        }
        router.get("/named/{name}") { _, context in context.parameters.get("name") ?? "" }
        router.post("/length") { request, _ in
            String(try await request.body.collect(upTo: 1 << 20).readableBytes)
        }
        router.post("/gated") { request, _ in
            await gate.wait()
            return String(try await request.body.collect(upTo: 1 << 20).readableBytes)
        }
        router.get("/chunks") { _, _ in
            Response(
                status: .ok,
                body: ResponseBody { writer in
                    for chunk in ["one", "two", "three"] { try await writer.write(ByteBuffer(string: chunk)) }
                    try await writer.finish(nil)
                })
        }
        let requests = RequestAnswering(responder: router.buildResponder(), serverName: "Cumulus", logger: Logger(label: "test"))
        let counter = ReadCounter()
        try await channel.testingEventLoop.executeInContext {
            try channel.pipeline.syncOperations.addHandlers(counter, RequestDispatchHandler(requests: requests))
        }
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).get()
        return (channel, counter)
    }

    static func request(_ method: HTTPRequest.Method, _ path: String, headers: HTTPFields = [:]) -> HTTPRequestPart {
        .head(HTTPRequest(method: method, scheme: "http", authority: "localhost", path: path, headerFields: headers))
    }

    /// Reads one whole response off the channel: its head and its body as text.
    static func response(from channel: NIOAsyncTestingChannel) async throws -> (HTTPResponse, String) {
        guard case .head(let head) = try await channel.waitForOutboundWrite(as: HTTPResponsePart.self) else {
            throw ChannelError.inappropriateOperationForState
        }
        var body = ""
        while true {
            switch try await channel.waitForOutboundWrite(as: HTTPResponsePart.self) {
            case .body(let bytes): body += String(buffer: bytes)
            case .end: return (head, body)
            case .head: throw ChannelError.inappropriateOperationForState
            }
        }
    }

    @Test func pipelinedRequestsAreAnsweredInOrderAndReadingWaitsForEachAnswer() async throws {
        let gate = Gate()
        let (channel, counter) = try await Self.channel(gate: gate)
        // Three requests in one read: the first waits on the gate, the second has a body that came along.
        try await channel.writeInbound(Self.request(.post, "/gated"))
        try await channel.writeInbound(HTTPRequestPart.end(nil))
        try await channel.writeInbound(Self.request(.post, "/length"))
        try await channel.writeInbound(HTTPRequestPart.body(ByteBuffer(string: "12345")))
        try await channel.writeInbound(HTTPRequestPart.end(nil))
        try await channel.writeInbound(Self.request(.get, "/named/third"))
        try await channel.writeInbound(HTTPRequestPart.end(nil))
        // While the first is answered, the socket is not read.
        channel.read()
        await channel.testingEventLoop.run()
        #expect(counter.reads.withLock { $0 } == 0)

        gate.open()
        let first = try await Self.response(from: channel)
        #expect(first.0.status == .ok && first.1 == "0")
        #expect(first.0.headerFields[.server] == "Cumulus" && first.0.headerFields[.date]?.hasSuffix(" GMT") == true)
        #expect(try await Self.response(from: channel).1 == "5")
        #expect(try await Self.response(from: channel).1 == "third")
        // All answered: the deferred read goes out.
        await channel.testingEventLoop.run()
        #expect(counter.reads.withLock { $0 } == 1)
        _ = try await channel.finish()
    }

    /// No thread wake-up between reading a request and writing its answer: the request's task, and where it resumes
    /// after awaiting something else, is its connection's event loop.
    @Test func aRequestIsAnsweredOnItsConnectionsEventLoop() async throws {
        let (channel, _) = try await Self.channel()
        try await channel.writeInbound(Self.request(.get, "/thread"))
        try await channel.writeInbound(HTTPRequestPart.end(nil))
        #expect(try await Self.response(from: channel).1 == "its connection's event loop")
        _ = try await channel.finish()
    }

    @Test func aBodySpreadOverReadsStreamsAndStopsReadingWhileItsReaderIsBehind() async throws {
        let gate = Gate()
        let (channel, counter) = try await Self.channel(gate: gate)
        let chunk = ByteBuffer(repeating: UInt8(ascii: "x"), count: 1000)
        try await channel.writeInbound(Self.request(.post, "/gated", headers: [.contentLength: "8000"]))
        try await channel.writeInbound(HTTPRequestPart.body(chunk))
        // The read ends before the body: the request is answered now, its body streamed.
        channel.pipeline.fireChannelReadComplete()
        for _ in 0..<5 { try await channel.writeInbound(HTTPRequestPart.body(chunk)) }
        // The route has read nothing yet and six chunks wait: no more reads from the socket.
        channel.read()
        await channel.testingEventLoop.run()
        #expect(counter.reads.withLock { $0 } == 0)

        gate.open()
        // The route reads; once it has caught up, reading resumes (from the route's task, so wait for it).
        for _ in 0..<200 where counter.reads.withLock({ $0 }) == 0 {
            try await Task.sleep(for: .milliseconds(10))
            await channel.testingEventLoop.run()
        }
        #expect(counter.reads.withLock { $0 } == 1)
        try await channel.writeInbound(HTTPRequestPart.body(chunk))
        try await channel.writeInbound(HTTPRequestPart.body(chunk))
        try await channel.writeInbound(HTTPRequestPart.end(nil))
        #expect(try await Self.response(from: channel).1 == "8000")
        _ = try await channel.finish()
    }

    @Test func aBodyWrittenInPiecesGoesOutInPiecesAndAWholeBodyWithItsHead() async throws {
        let (channel, _) = try await Self.channel()
        try await channel.writeInbound(Self.request(.get, "/chunks"))
        try await channel.writeInbound(HTTPRequestPart.end(nil))
        #expect(try await Self.response(from: channel).1 == "onetwothree")

        try await channel.writeInbound(Self.request(.get, "/named/whole"))
        try await channel.writeInbound(HTTPRequestPart.end(nil))
        let (head, body) = try await Self.response(from: channel)
        #expect(head.headerFields[.contentLength] == "5" && body == "whole")
        _ = try await channel.finish()
    }

    @Test func aClientGoneMidBodyFailsTheRoutesRead() async throws {
        let reports = BodyReports()
        let (channel, _) = try await Self.channel(reports: reports)
        try await channel.writeInbound(Self.request(.post, "/reported", headers: [.contentLength: "5000"]))
        try await channel.writeInbound(HTTPRequestPart.body(ByteBuffer(repeating: 0x78, count: 1000)))
        channel.pipeline.fireChannelReadComplete()
        // The connection drops before the rest of the body.
        try await channel.close()
        var iterator = reports.reports.stream.makeAsyncIterator()
        #expect(await iterator.next() == "failed")
    }

    @Test func aClientThatHalfClosesAfterItsRequestsGetsEveryAnswerThenTheConnectionCloses() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let port = try #require(client.client.port)
            let head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            let exchange = try await RawHTTPClient.exchange(port: port, head: head, body: [], readTimeout: 10, halfClose: true)
            #expect(exchange.closedByServer, "\(exchange)")
            #expect(exchange.response.components(separatedBy: "HTTP/1.1 200 OK").count == 3, "\(exchange.response)")
        }
    }

    @Test func aRequestAskingToCloseIsAnsweredThenTheConnectionCloses() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let port = try #require(client.client.port)
            // The request after the one asking to close is never answered.
            let head =
                "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            let exchange = try await RawHTTPClient.exchange(port: port, head: head, body: [], readTimeout: 10)
            #expect(exchange.closedByServer, "\(exchange)")
            #expect(exchange.response.components(separatedBy: "HTTP/1.1 200 OK").count == 2, "\(exchange.response)")
        }
    }
}
