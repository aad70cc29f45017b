import HTTPTypes
package import Hummingbird
package import HummingbirdCore
package import Logging
package import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import Synchronization

/// HTTP/1.1 connections whose requests are read by channel handlers and each answered in a task of its own.
///
/// Hummingbird's HTTP/1.1 channel reads every connection in one task, for the connection's whole life, and a task keeps
/// the slabs of the deepest stack its requests needed until it ends: thousands of devices holding keep-alive connections
/// or courier streams would each hold 5 to 16 KiB of stack while waiting. Here a waiting connection is its channel
/// handlers alone, and a request's task ends with its answer. The pipeline is Hummingbird's otherwise: the same codecs
/// and decoder limits, then `additionalChannelHandlers`, then Hummingbird's connection-state handler (graceful shutdown).
struct HTTP1ConnectionChannel<Responder: HTTPResponder>: ServerChildChannel
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    struct Value: ServerChildChannelValue {
        let channel: any Channel
    }

    /// Receive buffers start at 512 bytes: NIO keeps a connection's last receive buffer for its next read, and an idle
    /// connection need not hold 2 KiB for a request head of a few hundred bytes. They still grow at once for large bodies.
    static var receiveBuffers: AdaptiveRecvByteBufferAllocator {
        AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536)
    }

    let requests: RequestAnswering<Responder>
    let additionalChannelHandlers: @Sendable () -> [any RemovableChannelHandler]

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.setOption(ChannelOptions.recvAllocator, value: Self.receiveBuffers).flatMapThrowing {
            // Hummingbird's limits (HTTP1Channel.Configuration.DecoderConfiguration's defaults).
            var limits = NIOHTTPDecoderLimitConfiguration()
            limits.maxHeaderFieldSize = 80 * 1024
            limits.maxHeaderListSize = 80 * 1024
            limits.maxHeaderFieldCount = 1000
            let pipeline = channel.pipeline.syncOperations
            try pipeline.configureHTTPServerPipeline(
                withPipeliningAssistance: false, withErrorHandling: false, withOutboundHeaderValidation: false,
                withEncoderConfiguration: .init(), withDecoderLimitConfiguration: limits)
            try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            try pipeline.addHandlers(additionalChannelHandlers())
            try pipeline.addHandler(HTTPConnectionStateHandler(idleTimeout: nil, logger: logger))
            try pipeline.addHandler(RequestDispatchHandler(requests: requests))
            return Value(channel: channel)
        }
    }

    /// Nothing to do: the channel's handlers answer its requests, and the server's quiescing helper waits for every
    /// connection to close on shutdown.
    func handle(value: Value, logger: Logger) async {}
}

extension HTTPServerBuilder {
    /// HTTP/1.1 served by ``HTTP1ConnectionChannel``, answering with `responder` (the builder's own responder, which
    /// writes through Hummingbird's per-connection writer, is not used).
    package static func http1Connections<Responder: HTTPResponder>(
        responder: Responder, serverName: String, logger: Logger,
        additionalChannelHandlers: @escaping @Sendable () -> [any RemovableChannelHandler]
    ) -> HTTPServerBuilder where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
        let requests = RequestAnswering(responder: responder, serverName: serverName, logger: logger)
        return HTTPServerBuilder { _ in
            HTTP1ConnectionChannel(requests: requests, additionalChannelHandlers: additionalChannelHandlers)
        }
    }
}

/// Answers one request, in its own task, as Hummingbird's `Application` does: the responder's response (a `500` for an
/// error it let through), with `Date` and `Server` headers.
struct RequestAnswering<Responder: HTTPResponder>: Sendable
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    let responder: Responder
    let serverName: String
    let logger: Logger

    func answer(_ request: Request, channel: any Channel, response answer: ResponseChannel<Responder>) async {
        // The request's ID lives in its logger, where Hummingbird's RequestContext.id reads it (and the access log).
        var logger = self.logger
        logger[metadataKey: "hb.request.id"] = .stringConvertible(RequestID())
        let context = Responder.Context(source: .init(channel: channel, logger: logger))
        var response: Response
        do {
            response = try await responder.respond(to: request, context: context)
        } catch {
            logger.debug("unhandled error", metadata: ["error": "\(error)"])
            response = Response(status: .internalServerError)
        }
        response.headers[.date] = HTTPDate.now()
        response.headers[.server] = serverName
        do {
            try await response.body.write(ChannelResponseBodyWriter(channel: answer, head: response.head))
        } catch {
            logger.trace("response not written", metadata: ["error": "\(error)"])
        }
        // A body that threw, or never finished, leaves the response cut short: only closing tells the client so.
        answer.abortUnlessFinished()
    }
}

/// Reads requests off one connection and starts a task for each, one at a time; holds pipelined requests until the one
/// before is answered. Confined to the connection's event loop.
///
/// A request whose body has all arrived with its head (nearly every API call) is answered with the body as one buffer;
/// a larger one is answered as soon as its first read is in, its body streamed with backpressure.
final class RequestDispatchHandler<Responder: HTTPResponder>: ChannelDuplexHandler, RemovableChannelHandler
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    typealias InboundIn = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    typealias BodyProducer = NIOThrowingAsyncSequenceProducer<
        ByteBuffer, any Error, NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark, BodyDemand
    >

    /// Where the request being read stands.
    private enum Reading {
        /// Between requests.
        case idle
        /// Head read, body still coming and gathered here; not answered yet.
        case gathering(HTTPRequest, ByteBuffer?)
        /// Answered while its body streams to the task.
        case streaming(BodyProducer.Source)
        /// All of it read.
        case read
        /// Answered before its body was read: the rest is read and dropped.
        case discarding
    }

    /// Bodies gathered before answering stop here; a larger body streams.
    static var gatheredBodyLimit: Int { 64 * 1024 }

    private let requests: RequestAnswering<Responder>
    private var context: ChannelHandlerContext?
    /// Where requests' tasks run: this connection's event loop.
    private var executor: EventLoopTaskExecutor?
    private var reading = Reading.idle
    /// A request's task has not finished its response yet.
    private var answering = false
    /// The request being answered asked for the connection to close after its answer.
    private var closesAfterAnswer = false
    /// The client has sent all it will (it half-closed): the connection closes after the last answer.
    private var inputClosed = false
    /// Parts of requests pipelined behind the one being answered.
    private var held = CircularBuffer<HTTPRequestPart>()
    /// A read from the socket deferred while requests are held or a streamed body waits for its reader.
    private var readDeferred = false
    private var bodyPaused = false

    init(requests: RequestAnswering<Responder>) {
        self.requests = requests
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        executor = EventLoopTaskExecutor(context.eventLoop)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if awaitingAnswer {
            held.append(part)
            return
        }
        read(part, context: context)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // The body did not come with its head: answer now, streaming the rest.
        if case .gathering(let head, let body) = reading { stream(head, gathered: body, context: context) }
        context.fireChannelReadComplete()
    }

    private func read(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch (part, reading) {
        case (.head(let head), .idle):
            if head.headerFields[.connection]?.lowercased() == "close" { closesAfterAnswer = true }
            reading = .gathering(head, nil)
        case (.body(var bytes), .gathering(let head, let gathered)):
            var body = gathered ?? ByteBuffer()
            body.writeBuffer(&bytes)
            if body.readableBytes > Self.gatheredBodyLimit {
                stream(head, gathered: body, context: context)
            } else {
                reading = .gathering(head, body)
            }
        case (.body(let bytes), .streaming(let source)):
            if source.yield(bytes) == .stopProducing { bodyPaused = true }
        case (.end, .gathering(let head, let body)):
            reading = .read
            answer(Request(head: head, body: HummingbirdCore.RequestBody(buffer: body ?? ByteBuffer())), context: context)
        case (.end, .streaming(let source)):
            source.finish()
            reading = .read
            // Its reader's pace no longer matters: reading waits for the answer now.
            bodyPaused = false
        case (.end, .discarding):
            reading = .idle
        case (.body, .discarding):
            break
        default:
            // The codec hands on parts in order; anything else is a broken connection.
            context.close(promise: nil)
        }
    }

    private func stream(_ head: HTTPRequest, gathered: ByteBuffer?, context: ChannelHandlerContext) {
        let demand = BodyDemand(handler: NIOLoopBound(self, eventLoop: context.eventLoop))
        let producer = BodyProducer.makeSequence(
            backPressureStrategy: .init(lowWatermark: 2, highWatermark: 4), finishOnDeinit: false, delegate: demand)
        if let gathered, producer.source.yield(gathered) == .stopProducing { bodyPaused = true }
        reading = .streaming(producer.source)
        answer(Request(head: head, body: HummingbirdCore.RequestBody(asyncSequence: producer.sequence)), context: context)
    }

    private func answer(_ request: Request, context: ChannelHandlerContext) {
        answering = true
        let channel = context.channel
        let response = ResponseChannel(handler: NIOLoopBound(self, eventLoop: context.eventLoop))
        let requests = self.requests
        Task(executorPreference: executor) { await requests.answer(request, channel: channel, response: response) }
    }

    // MARK: The response, from the request's task (on the event loop)

    fileprivate func writeResponse(_ parts: [HTTPResponsePart], promise: EventLoopPromise<Void>?) {
        guard let context, answering else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        writeParts(parts, context: context, promise: promise)
    }

    fileprivate func finishResponse(_ parts: [HTTPResponsePart]) {
        guard let context, answering else { return }
        answering = false
        var parts = parts
        if closesAfterAnswer {
            // A client that asked to close (Python's urllib always does) and is still sending a body the route did not
            // read, a refused upload, would see its connection reset mid-write and never read the answer. Its answer
            // says `Connection: close`, the rest of the body is read and dropped, and LingeringCloseHandler closes
            // once the body ends or its linger is over.
            guard case .streaming = reading, case .head(var head)? = parts.first else {
                closeAfterWriting(parts, context: context)
                return
            }
            head.headerFields[.connection] = "close"
            parts[0] = .head(head)
        }
        switch reading {
        case .streaming(let source):
            // The route answered without reading the whole body.
            source.finish()
            reading = .discarding
            bodyPaused = false
        case .read:
            reading = .idle
        case .idle, .gathering, .discarding:
            break
        }
        guard !inputClosed || !held.isEmpty else {
            closeAfterWriting(parts, context: context)
            return
        }
        writeParts(parts, context: context, promise: nil)
        handOnHeld(context: context)
    }

    private func closeAfterWriting(_ parts: [HTTPResponsePart], context: ChannelHandlerContext) {
        let written = context.eventLoop.makePromise(of: Void.self)
        writeParts(parts, context: context, promise: written)
        let context = NIOLoopBound(context, eventLoop: context.eventLoop)
        written.futureResult.whenComplete { _ in context.value.close(promise: nil) }
    }

    private func writeParts(_ parts: [HTTPResponsePart], context: ChannelHandlerContext, promise: EventLoopPromise<Void>?) {
        for (index, part) in parts.enumerated() {
            context.write(wrapOutboundOut(part), promise: index == parts.count - 1 ? promise : nil)
        }
        context.flush()
    }

    fileprivate func abortResponse() {
        guard let context, answering else { return }
        answering = false
        context.close(promise: nil)
    }

    /// After an answer: the requests pipelined meanwhile, in order, until one is being answered again.
    private func handOnHeld(context: ChannelHandlerContext) {
        while !held.isEmpty, !awaitingAnswer {
            read(held.removeFirst(), context: context)
        }
        if case .gathering(let head, let body) = reading { stream(head, gathered: body, context: context) }
        resumeReading(context: context)
    }

    /// The request is all read and its answer under way: what comes now belongs to later requests.
    private var awaitingAnswer: Bool {
        guard answering, case .read = reading else { return false }
        return true
    }

    // MARK: Reading from the socket

    func read(context: ChannelHandlerContext) {
        // Read no more from a client that keeps sending while its requests wait (backpressure), nor while a streamed
        // body's reader is behind.
        if bodyPaused || !held.isEmpty || awaitingAnswer {
            readDeferred = true
            return
        }
        context.read()
    }

    private func resumeReading(context: ChannelHandlerContext) {
        guard readDeferred, !bodyPaused, held.isEmpty, !awaitingAnswer else { return }
        readDeferred = false
        context.read()
    }

    fileprivate func bodyDemanded() {
        guard let context, bodyPaused else { return }
        bodyPaused = false
        resumeReading(context: context)
    }

    // MARK: Connection events

    func channelInactive(context: ChannelHandlerContext) {
        if case .streaming(let source) = reading { source.finish(ChannelError.eof) }
        reading = .idle
        held.removeAll()
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            // The client sent its last request: answer what it sent whole, then close.
            inputClosed = true
            switch reading {
            case .streaming(let source):
                source.finish(ChannelError.eof)
                bodyPaused = false
            case .gathering:
                // Cut off before its body's end: there is nothing to answer.
                reading = .discarding
                if !answering { context.close(promise: nil) }
            case .idle, .read, .discarding:
                if !answering, held.isEmpty { context.close(promise: nil) }
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard error is HTTPParserError else {
            context.close(promise: nil)
            return
        }
        // A malformed message: a request whose body broke is answered by its route, which sees the error reading the
        // body (a CloudKit envelope); a broken head gets 400 as Hummingbird answers it. Then the connection closes.
        held.removeAll()
        switch reading {
        case .streaming(let source):
            source.finish(error)
        case .gathering(let head, let body):
            stream(head, gathered: body, context: context)
            if case .streaming(let source) = reading { source.finish(error) }
        case .idle, .read, .discarding:
            break
        }
        reading = .discarding
        if answering {
            closesAfterAnswer = true
        } else {
            answering = true
            closesAfterAnswer = true
            finishResponse([.head(HTTPResponse(status: .badRequest, headerFields: [.connection: "close", .contentLength: "0"])), .end(nil)])
        }
    }
}

/// The request body's reader asking for more: resumes reading from the socket.
struct BodyDemand: NIOAsyncSequenceProducerDelegate {
    private let demand: @Sendable () -> Void

    init<Responder>(handler: NIOLoopBound<RequestDispatchHandler<Responder>>) {
        demand = { handler.eventLoop.execute { handler.value.bodyDemanded() } }
    }

    func produceMore() { demand() }
    func didTerminate() { demand() }
}

/// A request's way back to its connection: the response parts, written on the connection's event loop.
final class ResponseChannel<Responder: HTTPResponder>: Sendable
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    private let handler: NIOLoopBound<RequestDispatchHandler<Responder>>
    private let finished = Atomic<Bool>(false)

    init(handler: NIOLoopBound<RequestDispatchHandler<Responder>>) {
        self.handler = handler
    }

    /// Writes parts of the response and returns once they are handed to the socket (backpressure for long bodies).
    func write(_ parts: [HTTPResponsePart]) async throws {
        let written = handler.eventLoop.makePromise(of: Void.self)
        onLoop { $0.writeResponse(parts, promise: written) }
        try await written.futureResult.get()
    }

    /// Writes the response's last parts; the next request on the connection is read after them.
    func finish(_ parts: [HTTPResponsePart]) {
        finished.store(true, ordering: .relaxed)
        onLoop { $0.finishResponse(parts) }
    }

    /// Closes the connection if the response was cut short.
    func abortUnlessFinished() {
        guard !finished.load(ordering: .relaxed) else { return }
        onLoop { $0.abortResponse() }
    }

    /// Runs `body` with the handler on its event loop: at once when already there (where a request's task runs),
    /// otherwise as a task of the loop.
    private func onLoop(_ body: @escaping @Sendable (RequestDispatchHandler<Responder>) -> Void) {
        let handler = self.handler
        if handler.eventLoop.inEventLoop {
            body(handler.value)
        } else {
            handler.eventLoop.execute { body(handler.value) }
        }
    }
}

/// A response body written to its connection. A body that is one buffer as long as the `Content-Length` (nearly every
/// response) goes out with its head and end in one write.
struct ChannelResponseBodyWriter<Responder: HTTPResponder>: ResponseBodyWriter
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    let channel: ResponseChannel<Responder>
    /// The head, until it is written.
    var head: HTTPResponse?
    /// The whole body, held to go out with the end.
    var whole: ByteBuffer?

    init(channel: ResponseChannel<Responder>, head: HTTPResponse) {
        self.channel = channel
        self.head = head
    }

    mutating func write(_ buffer: ByteBuffer) async throws {
        if let head, whole == nil, head.headerFields[.contentLength] == String(buffer.readableBytes) {
            whole = buffer
            return
        }
        try await channel.write(takeParts() + [.body(buffer)])
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        channel.finish(takeParts() + [.end(trailingHeaders)])
    }

    private mutating func takeParts() -> [HTTPResponsePart] {
        var parts: [HTTPResponsePart] = []
        if let head { parts.append(.head(head)) }
        if let whole { parts.append(.body(whole)) }
        head = nil
        whole = nil
        return parts
    }
}
