import CumulusCore
import CumulusModel
import CumulusServerHTTP
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// What every connection's ``CourierChannelHandler`` shares (one object, so that each waiting exchange holds a
/// reference rather than a copy).
final class Courier: Sendable {
    let push: PushService
    /// How often an idle stream sends a comment line.
    let heartbeat: Duration
    let metrics: ServerMetrics
    let logger: Logger
    let serverName: String
    /// Bounds the looks at the feeds under way at once, so that thousands of connections woken together (a listener
    /// that reconnected wakes them all) queue for the store instead of all waiting on its connection pool at once.
    let looks = LookGate(maximum: 32)

    /// How long a poll on a token this server did not issue waits before its `404`: the courier needs no credential,
    /// so what bounds a flood of made-up tokens is each connection making one a second, as the request limits'
    /// refusal delay does for the database API. The wait holds no place and no task, only a timer.
    let refusalDelay: Duration

    static let route = "/courier/1/{container}/{environment}/{token}"

    init(push: PushService, heartbeat: Duration, metrics: ServerMetrics, logger: Logger, serverName: String, refusalDelay: Duration = .seconds(1)) {
        self.push = push
        self.heartbeat = heartbeat
        self.metrics = metrics
        self.logger = logger
        self.serverName = serverName
        self.refusalDelay = refusalDelay
    }
}

/// A courier request ``CourierChannelHandler`` answers itself: a well-formed `GET` of a `webcourierURL`. Anything else,
/// a malformed courier request included, goes on to the router, which answers it (or refuses it) as every request.
struct CourierRequest: Sendable {
    enum Kind: Sendable, Equatable {
        /// A long poll: one notification, or an empty answer after `wait`.
        case poll(wait: Duration)
        /// A Server-Sent Events stream, resumed after `lastEventID` when the client names one.
        case stream(lastEventID: Int64?)
    }

    var container: String
    var environment: ContainerEnvironment
    var token: String
    var kind: Kind

    init?(_ head: HTTPRequest) {
        guard head.method == .get, let target = head.path, target.hasPrefix("/courier/1/") else { return nil }
        let uri = URI(target)
        let parts = uri.path.split(separator: "/", omittingEmptySubsequences: false)
        // "", "courier", "1", container, environment, token; a percent-encoded part is left to the router to decode.
        guard parts.count == 6, !parts[3].isEmpty, !parts.contains(where: { $0.utf8.contains(UInt8(ascii: "%")) }),
            let environment = ContainerEnvironment(rawValue: String(parts[4])), PushService.isWellFormed(String(parts[5]))
        else { return nil }
        container = String(parts[3])
        self.environment = environment
        token = String(parts[5])
        let query = uri.queryParameters
        if head.headerFields[.accept]?.contains("text/event-stream") == true || query["stream"] != nil {
            var lastEventID: Int64?
            if let named = head.headerFields[values: PushRoutes.lastEventID].first ?? query["lastEventID"].map(String.init) {
                guard let id = Int64(named.trimmingCharacters(in: CharacterSet.whitespaces)), id >= 0 else { return nil }
                lastEventID = id
            }
            kind = .stream(lastEventID: lastEventID)
        } else {
            var seconds = PushRoutes.defaultWait
            if let text = query["timeout"] {
                guard let value = Int(text), (0...PushRoutes.longestWait).contains(value) else { return nil }
                seconds = value
            }
            kind = .poll(wait: .seconds(seconds))
        }
    }
}

/// Answers courier polls and streams below the router, so that a connection waiting for a notification holds no task.
///
/// A Swift task keeps the memory of the deepest stack it ever had until it ends, and a stream served by a route lives
/// for hours in a task that went through the middleware, authentication and the first feed check: about 40 KiB a
/// stream. Here a waiting poll or stream is a few objects on the connection's event loop; each look at the feeds runs
/// in a short task of its own that ends when the look does, and a commit wakes the connection through a callback
/// (``ChangeSignal/register(_:onWake:)``). The connection itself holds no task either (``RequestDispatchHandler``).
///
/// A courier request is taken only when no earlier request on the connection is still being answered (HTTP
/// pipelining), and parts of later requests that come while it is answered are held (bounded) and handed on after it.
final class CourierChannelHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// The most bytes of later requests held while a courier request is answered; a client sending more is closed.
    /// Reading from the socket stops while anything is held, so only what one read brought can pile up here: kept
    /// small, since every waiting poll of every connection could hold it.
    static let maximumHeldBytes = 16 * 1024

    private let courier: Courier
    /// Requests handed on to the router whose answers are not complete yet.
    private var answering = 0
    /// The rest (body, end) of a courier request this handler answers, which the router never sees.
    private var readingOwnRequest = false
    private var exchange: CourierExchange?
    /// Parts of the requests after a courier request, while it is answered.
    private var held: [HTTPRequestPart] = []
    private var heldBytes = 0
    /// A read from the socket asked for while parts were held, made once they are handed on.
    private var readDeferred = false

    init(courier: Courier) {
        self.courier = courier
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if readingOwnRequest {
            if case .end = part { readingOwnRequest = false }
            return
        }
        guard exchange == nil, held.isEmpty else {
            hold(part, context: context)
            return
        }
        process(part, context: context)
    }

    private func process(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        if case .head(let head) = part {
            if answering == 0, let request = CourierRequest(head) {
                readingOwnRequest = true
                let exchange = CourierExchange(request: request, courier: courier, context: context) { [unowned self] in
                    self.exchange = nil
                    self.handOnHeld(context: context)
                }
                self.exchange = exchange
                exchange.start()
                return
            }
            answering += 1
        }
        context.fireChannelRead(wrapInboundOut(part))
    }

    private func hold(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch part {
        case .head(let head): heldBytes += 256 + head.headerFields.reduce(0) { $0 + $1.name.rawName.utf8.count + $1.value.utf8.count }
        case .body(let bytes): heldBytes += bytes.readableBytes
        case .end: heldBytes += 16
        }
        guard heldBytes <= Self.maximumHeldBytes else {
            context.close(promise: nil)
            return
        }
        held.append(part)
    }

    /// After a courier answer: the requests that came meanwhile, in order (one of them may be a courier request again).
    private func handOnHeld(context: ChannelHandlerContext) {
        guard !held.isEmpty else { return }
        while exchange == nil, !held.isEmpty {
            let part = held.removeFirst()
            if readingOwnRequest {
                if case .end = part { readingOwnRequest = false }
                continue
            }
            process(part, context: context)
        }
        if held.isEmpty { heldBytes = 0 }
        // Outside a read from the socket: what stands behind (``RequestDispatchHandler``) acts on a read's completion.
        context.fireChannelReadComplete()
        if held.isEmpty, readDeferred {
            readDeferred = false
            context.read()
        }
    }

    func read(context: ChannelHandlerContext) {
        // Holding a pipelined request: read no more from a client that may keep sending (backpressure, as
        // the dispatcher behind applies it).
        guard held.isEmpty else {
            readDeferred = true
            return
        }
        context.read()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { answering = max(0, answering - 1) }
        context.write(data, promise: promise)
    }

    func channelInactive(context: ChannelHandlerContext) {
        exchange?.abandon()
        exchange = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        exchange?.abandon()
        exchange = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The server is shutting down: a poll answers at once and a stream ends, then the connection closes. The router's
        // handler never saw the request, so it would close the connection at once, before the last answer went out.
        if event is ChannelShouldQuiesceEvent, let exchange {
            exchange.shutDown()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// One courier request answered by ``CourierChannelHandler``: a long poll or a stream. Confined to its connection's
/// event loop; it has no task of its own while it waits.
final class CourierExchange {
    private let request: CourierRequest
    private let courier: Courier
    private let context: ChannelHandlerContext
    private let onEnd: () -> Void
    private let requestID = UUID.random().uuidString.lowercased()
    private let executor: EventLoopTaskExecutor
    private let started = ContinuousClock.now
    /// The push connection, once opened; a look works on a copy and hands back the connection moved on.
    private var connection: PushConnection?
    private var looking = false
    private var ended = false
    /// The server is shutting down: the answer says `Connection: close`, and the connection closes after it.
    private var closesConnection = false
    private var headWritten = false
    private var timer: Scheduled<Void>?
    private var timerDeadline: ContinuousClock.Instant?
    private var deadline: ContinuousClock.Instant?
    private var nextHeartbeat: ContinuousClock.Instant?
    /// When a stream looks again after the store was unavailable.
    private var retryAt: ContinuousClock.Instant?

    init(request: CourierRequest, courier: Courier, context: ChannelHandlerContext, onEnd: @escaping () -> Void) {
        self.executor = EventLoopTaskExecutor(context.eventLoop)
        self.request = request
        self.courier = courier
        self.context = context
        self.onEnd = onEnd
    }

    private var isStream: Bool {
        if case .stream = request.kind { return true }
        return false
    }

    func start() {
        let (push, request, logger) = (courier.push, request, courier.logger)
        // A poll renewed after its answer takes over its token's parked registration here, on the event loop.
        do {
            let waker = ExchangeWaker(loop: context.eventLoop, exchange: NIOLoopBound(self, eventLoop: context.eventLoop))
            if let connection = try push.reconnect(
                token: request.token, container: request.container, environment: request.environment, onWake: waker.wake)
            {
                opened(connection)
                return
            }
        } catch {
            refuse(error)
            return
        }
        // The token's signature, then whether a user registered it (which pool its place comes from).
        run { waker in
            try await push.connect(
                token: request.token, container: request.container, environment: request.environment, onWake: waker.wake, logger: logger)
        } then: { exchange, result in
            switch result {
            case .success(let connection) where exchange.ended:
                connection.close()
            case .success(let connection):
                exchange.opened(connection)
            case .failure where exchange.ended:
                break
            case .failure(let error):
                exchange.refuse(error, forged: (error as? CumulusError)?.code == .notFound)
            }
        }
    }

    private func opened(_ connection: PushConnection) {
        self.connection = connection
        courier.metrics.pushConnection(opened: true)
        // The server began shutting down while the token was checked: the first look ends the exchange.
        if closesConnection { courier.push.end(connection) }
        switch request.kind {
        case .poll(let wait):
            deadline = started + wait
            lookIfDue()
        case .stream(let lastEventID?):
            let logger = courier.logger
            run { _ in
                try await connection.resume(after: lastEventID, logger: logger)
            } then: { exchange, result in
                // Ended meanwhile (the connection closed, the server is shutting down): nothing more is written.
                guard !exchange.ended else { return }
                switch result {
                case .success(let resumption):
                    exchange.openStream(resumption)
                    exchange.look()
                case .failure(let error):
                    exchange.refuse(error)
                }
            }
        case .stream(nil):
            openStream(.resumed)
            lookIfDue()
        }
    }

    /// Looks at the feeds when something may have changed since the token's last look; otherwise waits (a connection
    /// that took over its token's previous registration, with no commit since, has nothing to read).
    private func lookIfDue() {
        if connection?.isDue() == true { look() } else { schedule() }
    }

    /// Runs async work in a short task of its own, then `then` back on the event loop. With a gate, the task starts
    /// when the gate lets it in.
    private func run<Value: Sendable>(
        through gate: LookGate? = nil,
        _ work: @escaping @Sendable (ExchangeWaker) async throws -> Value,
        then: @escaping (CourierExchange, Result<Value, any Error>) -> Void
    ) {
        let loop = context.eventLoop
        let this = NIOLoopBound(self, eventLoop: loop)
        let then = NIOLoopBound(then, eventLoop: loop)
        let waker = ExchangeWaker(loop: loop, exchange: this)
        let executor = self.executor
        let start: @Sendable () -> Void = {
            // On the connection's event loop, as a request's task: the store's answers resume the look here, and its end
            // hands back to the exchange without a wake-up of the concurrency pool.
            Task(executorPreference: executor) {
                let result: Result<Value, any Error>
                do { result = .success(try await work(waker)) } catch { result = .failure(error) }
                gate?.leave()
                loop.execute { then.value(this.value, result) }
            }
        }
        if let gate { gate.enter(start) } else { start() }
    }

    // MARK: - Looking at the feeds

    private func look() {
        guard !ended, !looking, let connection else { return }
        if connection.isSuperseded {
            finish()
            return
        }
        looking = true
        retryAt = nil
        courier.metrics.pushLooked()
        // Only the heartbeat is timed while the look is under way (it may wait for the gate, or for a slow store).
        schedule()
        let logger = courier.logger
        run(through: courier.looks) { waker -> (PushConnection, Result<PushNotification?, any Error>) in
            var connection = connection
            do {
                if !connection.isRegistered { try await connection.register(logger: logger, onWake: waker.wake) }
                // The look moves the connection on (when it looked, what it watches): return it as it is after.
                let notification = try await connection.look(logger: logger)
                return (connection, .success(notification))
            } catch {
                return (connection, .failure(error))
            }
        } then: { exchange, result in
            // `run`'s work never throws: the look's own outcome comes with the connection it moved on.
            guard case .success(let (connection, outcome)) = result else { return }
            exchange.looked(connection, outcome)
        }
    }

    private func looked(_ connection: PushConnection, _ outcome: Result<PushNotification?, any Error>) {
        looking = false
        self.connection = connection
        guard !ended else {
            connection.close()
            return
        }
        switch outcome {
        case .failure(let error):
            if headWritten, (error as? CumulusError)?.code == .unavailable {
                // The store is busy or down for a moment: the stream stays open and looks again shortly.
                courier.logger.warning("a push stream's look at the feeds will be retried", metadata: ["error": "\(error)"])
                retryAt = ContinuousClock.now + .seconds(1)
                schedule()
            } else if headWritten {
                courier.logger.error("a push stream's look at the feeds failed", metadata: ["error": "\(error)"])
                end(close: true)
            } else {
                refuse(error)
            }
        case .success(let notification?):
            deliver(notification)
        case .success(nil):
            if connection.isSuperseded || deadline.map({ ContinuousClock.now >= $0 }) == true {
                finish()
            } else if connection.isDue() {
                look()
            } else {
                schedule()
            }
        }
    }

    /// A commit to a watched database (or a newer connection of the token) woke the connection.
    fileprivate func woken() {
        // A look under way sees the wake-up when it ends (the connection is due again).
        guard !ended, !looking else { return }
        look()
    }

    private func deliver(_ notification: PushNotification) {
        courier.metrics.pushNotificationSent()
        if isStream {
            var event = context.channel.allocator.buffer(capacity: notification.payload.count + 32)
            event.writeString("id: \(notification.id)\ndata: ")
            event.writeBytes(notification.payload)
            event.writeString("\n\n")
            context.writeAndFlush(NIOAny(HTTPResponsePart.body(event)), promise: nil)
            // Another look now only when more was due, or a commit came during this one.
            lookIfDue()
        } else {
            answer(ByteBuffer(bytes: notification.payload))
        }
    }

    // MARK: - Time

    /// Schedules the next of: the poll's deadline, the stream's heartbeat, the re-check over a shared store. While a
    /// look is under way only the heartbeat counts: the look's end sees the deadline and what falls due, and a time
    /// already past would fire the timer again at once, over and over, until the look ends (a busy event loop).
    private func schedule() {
        let next = ended ? nil : (looking ? [nextHeartbeat] : [deadline, nextHeartbeat, retryAt, connection?.nextRecheck]).compactMap { $0 }.min()
        // Most looks leave the next time as it was (a stream's heartbeat): the timer stays.
        if timer != nil, next == timerDeadline { return }
        timer?.cancel()
        timer = nil
        timerDeadline = next
        guard let next else { return }
        let this = NIOLoopBound(self, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: TimeAmount(max(.zero, ContinuousClock.now.duration(to: next)))) {
            this.value.tick()
        }
    }

    private func tick() {
        timer = nil
        timerDeadline = nil
        guard !ended else { return }
        let now = ContinuousClock.now
        if let heartbeat = nextHeartbeat, now >= heartbeat {
            context.writeAndFlush(NIOAny(HTTPResponsePart.body(ByteBuffer(string: ": heartbeat\n\n"))), promise: nil)
            nextHeartbeat = now + courier.heartbeat
        }
        // A look under way ends the poll when it finds nothing; otherwise the deadline ends it now.
        if let deadline, now >= deadline, !looking {
            finish()
            return
        }
        if !looking, let connection, connection.isDue(at: now) || retryAt.map({ now >= $0 }) == true {
            look()
        }
        schedule()
    }

    // MARK: - Answers

    private func headers(_ contentType: String) -> HTTPFields {
        var headers: HTTPFields = [
            .contentType: contentType, RequestIdentity.header: requestID, .date: HTTPDate.now(), .server: courier.serverName,
        ]
        if closesConnection { headers[.connection] = "close" }
        return headers
    }

    private func openStream(_ resumption: PushConnection.Resumption) {
        var headers = headers("text/event-stream; charset=utf-8")
        headers[.cacheControl] = "no-cache"
        // nginx buffers answers unless told not to; a buffered stream delivers nothing until the buffer fills.
        headers[HTTPField.Name("X-Accel-Buffering")!] = "no"
        headWritten = true
        context.write(NIOAny(HTTPResponsePart.head(HTTPResponse(status: .ok, headerFields: headers))), promise: nil)
        var opening = "retry: 2000\n: connected\n\n"
        if case .reset(let id) = resumption { opening += "id: \(id)\nevent: reset\ndata: {}\n\n" }
        context.writeAndFlush(NIOAny(HTTPResponsePart.body(ByteBuffer(string: opening))), promise: nil)
        nextHeartbeat = ContinuousClock.now + courier.heartbeat
        log(status: 200, bytesOut: nil)
    }

    /// A poll's answer: one notification, or empty.
    private func answer(_ body: ByteBuffer) {
        var headers = headers("application/json; charset=utf-8")
        headers[.contentLength] = String(body.readableBytes)
        headWritten = true
        context.write(NIOAny(HTTPResponsePart.head(HTTPResponse(status: .ok, headerFields: headers))), promise: nil)
        if body.readableBytes > 0 { context.write(NIOAny(HTTPResponsePart.body(body)), promise: nil) }
        log(status: 200, bytesOut: body.readableBytes)
        end(close: closesConnection)
    }

    /// Refuses the request with CloudKit's error envelope (before any answer was written).
    /// Refuses a poll on a token this server did not issue after the courier's refusal delay (the connection then
    /// makes no other request meanwhile); anything else at once.
    private func refuse(_ error: any Error, forged: Bool) {
        guard forged, courier.refusalDelay > .zero else {
            refuse(error)
            return
        }
        let this = NIOLoopBound(self, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: TimeAmount(courier.refusalDelay)) {
            guard !this.value.ended else { return }
            this.value.refuse(error)
        }
    }

    private func refuse(_ error: any Error) {
        let refusal = CloudKitErrorResponse(error, logger: courier.logger)
        let body = ByteBuffer(bytes: refusal.envelope(requestID: requestID))
        var headers = refusal.headers(requestID: requestID)
        headers[.contentLength] = String(body.readableBytes)
        headers[.date] = HTTPDate.now()
        headers[.server] = courier.serverName
        if closesConnection { headers[.connection] = "close" }
        headWritten = true
        context.write(NIOAny(HTTPResponsePart.head(HTTPResponse(status: refusal.status, headerFields: headers))), promise: nil)
        context.write(NIOAny(HTTPResponsePart.body(body)), promise: nil)
        log(status: refusal.status.code, bytesOut: body.readableBytes)
        end(close: closesConnection)
    }

    /// The exchange is over with nothing more to say: an empty poll answer, or the end of a stream.
    private func finish() {
        if headWritten {
            end(close: closesConnection)
        } else {
            answer(ByteBuffer())
        }
    }

    /// Writes the answer's end and lets the connection go on, or closes it after the end is written.
    private func end(close: Bool) {
        guard !ended else { return }
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(NIOAny(HTTPResponsePart.end(nil)), promise: written)
        if close {
            let channel = context.channel
            written.futureResult.whenComplete { _ in channel.close(promise: nil) }
        }
        release()
        onEnd()
    }

    /// The connection closed under the exchange: nothing more is written.
    func abandon() {
        release()
    }

    /// The server is shutting down: a poll answers now (with what a look under way finds), a stream ends, and the
    /// connection closes after the last answer.
    func shutDown() {
        guard !ended else { return }
        closesConnection = true
        guard let connection else { return }
        // Ends the connection as a newer one of its token would: a look under way ends the exchange when it returns.
        courier.push.end(connection)
        if !looking { finish() }
    }

    private func release() {
        guard !ended else { return }
        ended = true
        timer?.cancel()
        timer = nil
        guard let connection else { return }
        courier.metrics.pushConnection(opened: false)
        // A look under way still uses the connection; it is closed when the look returns.
        if !looking { connection.close() }
    }

    private func log(status: Int, bytesOut: Int?) {
        AccessLog(logger: courier.logger, metrics: courier.metrics).record(
            requestID: requestID, method: "GET", route: Courier.route, status: status, start: started,
            parameters: [("container", request.container), ("environment", request.environment.rawValue)], bytesIn: nil, bytesOut: bytesOut)
    }
}

/// At most `maximum` looks at the feeds under way at once; the others wait, in order, as closures (not tasks, which
/// would each hold memory while waiting).
final class LookGate: Sendable {
    private struct State {
        var running = 0
        var waiting: [@Sendable () -> Void] = []
        var next = 0
    }

    private let state = Mutex(State())
    let maximum: Int

    init(maximum: Int) {
        self.maximum = maximum
    }

    /// Runs `start` now if there is room, or when a look under way leaves.
    func enter(_ start: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            guard state.running < maximum else {
                state.waiting.append(start)
                return false
            }
            state.running += 1
            return true
        }
        if now { start() }
    }

    /// A look ended: the next waiting one starts in its place.
    func leave() {
        let next = state.withLock { state -> (@Sendable () -> Void)? in
            guard state.next < state.waiting.count else {
                state.running -= 1
                state.waiting.removeAll()
                state.next = 0
                return nil
            }
            defer {
                state.next += 1
                if state.next == state.waiting.count {
                    state.waiting.removeAll(keepingCapacity: false)
                    state.next = 0
                }
            }
            return state.waiting[state.next]
        }
        next?()
    }
}

/// What a look's task needs of its exchange: a way to wake it from any thread.
struct ExchangeWaker: Sendable {
    let loop: any EventLoop
    let exchange: NIOLoopBound<CourierExchange>

    /// Called by ``ChangeSignal`` on the thread that woke the connection.
    @Sendable func wake() {
        let exchange = self.exchange
        loop.execute { exchange.value.woken() }
    }
}

extension CloudKitErrorResponse {
    /// The envelope of an error raised outside the router (the courier handler), as ``CloudKitErrorMiddleware`` maps it.
    init(_ error: any Error, logger: Logger) {
        switch error {
        case let error as CumulusError:
            if error.code == .internalError || error.code == .unavailable {
                logger.error("request failed", metadata: ["error": "\(error.underlying.map { "\($0)" } ?? error.reason)"])
            }
            self.init(
                code: error.code.serverErrorCode, reason: error.code == .internalError ? "internal error" : error.reason,
                retryAfter: error.retryAfter)
        case let error as StoreError where error.code == .unavailable:
            logger.error("request failed", metadata: ["error": "\(error)"])
            self.init(code: .tryAgainLater, reason: "the store is unavailable; retry", retryAfter: 1)
        default:
            logger.error("request failed", metadata: ["error": "\(error)"])
            self.init(code: .internalError, reason: "internal error")
        }
    }
}
