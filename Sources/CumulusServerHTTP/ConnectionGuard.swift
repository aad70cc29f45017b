package import NIOCore
package import NIOHTTPTypes
import Synchronization

/// Limits on connections: how many one instance holds, how many one address holds, and how long a request's body may
/// take. (Idle connections, and request heads that never complete, are closed by the idle timeout.)
public struct ConnectionLimits: Sendable, Hashable {
    /// Connections this instance holds open at once; more are closed as soon as they are accepted. `cumulus serve`
    /// keeps it below the process's open-file limit, which it raises to the hard limit at start.
    public var maximumConnections: Int
    /// Connections one client address holds open at once. Not applied when addresses come from `X-Forwarded-For`
    /// (every connection then comes from the load balancer, which has its own limits).
    public var maximumConnectionsPerAddress: Int
    /// How long a connection may stay open without a complete request head: after it opens, and between an answer and
    /// the next request. Silent connections and request heads sent a byte at a time are closed after it.
    public var idleTimeout: Duration
    /// How long a request's body may take to arrive, from its head to its last byte, however it trickles in.
    public var requestBodyTimeout: Duration

    public init(
        maximumConnections: Int = 16_384, maximumConnectionsPerAddress: Int = 512, idleTimeout: Duration = .seconds(60),
        requestBodyTimeout: Duration = .seconds(300)
    ) {
        self.maximumConnections = maximumConnections
        self.maximumConnectionsPerAddress = maximumConnectionsPerAddress
        self.idleTimeout = idleTimeout
        self.requestBodyTimeout = requestBodyTimeout
    }
}

/// The connections an instance holds, in total and per address, shared by every connection's ``ConnectionGuardHandler``.
package final class ConnectionCounts: Sendable {
    private let counts = Mutex((total: 0, byAddress: [String: Int]()))
    let limits: ConnectionLimits
    let countsAddresses: Bool
    let metrics: any ConnectionMetrics

    package init(limits: ConnectionLimits, countsAddresses: Bool, metrics: any ConnectionMetrics) {
        self.limits = limits
        self.countsAddresses = countsAddresses
        self.metrics = metrics
    }

    /// Counts a new connection, or answers `false` (counting nothing) when it is one too many.
    func admit(_ address: String) -> Bool {
        let admitted = counts.withLock { counts in
            guard counts.total < limits.maximumConnections else { return false }
            if countsAddresses {
                let held = counts.byAddress[address, default: 0]
                guard held < limits.maximumConnectionsPerAddress else { return false }
                counts.byAddress[address] = held + 1
            }
            counts.total += 1
            return true
        }
        if admitted { metrics.connection(opened: true) } else { metrics.refused(limit: "connections") }
        return admitted
    }

    /// Forgets a connection that was admitted.
    func release(_ address: String) {
        metrics.connection(opened: false)
        counts.withLock { counts in
            counts.total -= 1
            guard countsAddresses else { return }
            let held = counts.byAddress[address, default: 1] - 1
            counts.byAddress[address] = held > 0 ? held : nil
        }
    }
}

/// Admits a connection under ``ConnectionLimits`` (closing it at once when it is one too many), closes it when a
/// request's body takes longer than ``ConnectionLimits/requestBodyTimeout``, and closes it when it stays idle for
/// ``ConnectionLimits/idleTimeout``.
///
/// The idle timeout is kept here, ahead of every other handler, rather than by Hummingbird's connection handler: this
/// one sees every request and answer, those of the courier (``CourierChannelHandler``, which answers below the router)
/// included, so an open stream is never taken for an idle connection.
package final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPRequestPart
    package typealias InboundOut = HTTPRequestPart
    package typealias OutboundIn = HTTPResponsePart
    package typealias OutboundOut = HTTPResponsePart

    private let counts: ConnectionCounts
    private var admittedAddress: String?
    private var bodyDeadline: Scheduled<Void>?
    private var idle: IdleConnectionState
    private var idleCheck: Scheduled<Void>?
    /// When the scheduled idle check is due.
    private var idleCheckDue: ContinuousClock.Instant
    /// The time; tests pass their own, to run a late idle check on a simulated loop.
    private let now: () -> ContinuousClock.Instant
    /// How late an idle check may run and still trust what it saw: later, the loop was busy (another connection's long
    /// request), and bytes of this connection may wait unread, since a loop runs the timers that fell due before it
    /// reads its sockets again.
    static let stalledLoopAllowance: Duration = .milliseconds(25)

    package init(counts: ConnectionCounts, now: @escaping () -> ContinuousClock.Instant = { .now }) {
        self.counts = counts
        self.now = now
        self.idle = IdleConnectionState(at: now())
        self.idleCheckDue = now()
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        let address = context.channel.remoteAddress?.ipAddress ?? "unknown"
        if counts.admit(address) {
            admittedAddress = address
        } else {
            context.close(promise: nil)
            return
        }
        if context.channel.isActive { scheduleIdleCheck(context: context) }
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        forget()
    }

    package func channelActive(context: ChannelHandlerContext) {
        scheduleIdleCheck(context: context)
        context.fireChannelActive()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        forget()
        context.fireChannelInactive()
    }

    /// Cancels the timers and gives back the connection's place, once, whichever comes first: the connection closing
    /// or the handler leaving the pipeline.
    private func forget() {
        bodyDeadline?.cancel()
        bodyDeadline = nil
        idleCheck?.cancel()
        idleCheck = nil
        if let address = admittedAddress {
            admittedAddress = nil
            counts.release(address)
        }
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        idle.read(part, at: now())
        switch part {
        case .head:
            bodyDeadline?.cancel()
            let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
            bodyDeadline = context.eventLoop.scheduleTask(in: TimeAmount(counts.limits.requestBodyTimeout)) {
                loopBoundContext.value.close(promise: nil)
            }
        case .body:
            break
        case .end:
            bodyDeadline?.cancel()
            bodyDeadline = nil
        }
        context.fireChannelRead(data)
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if idle.wrote(unwrapOutboundIn(data), at: now()) { scheduleIdleCheck(context: context) }
        context.write(data, promise: promise)
    }

    private func scheduleIdleCheck(context: ChannelHandlerContext) {
        guard idleCheck == nil, admittedAddress != nil else { return }
        scheduleIdleCheck(in: counts.limits.idleTimeout, context: context)
    }

    private func scheduleIdleCheck(in delay: Duration, context: ChannelHandlerContext) {
        let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        let loopBoundSelf = NIOLoopBound(self, eventLoop: context.eventLoop)
        idleCheckDue = now() + delay
        idleCheck = context.eventLoop.scheduleTask(in: TimeAmount(delay)) {
            loopBoundSelf.value.checkIdle(context: loopBoundContext.value)
        }
    }

    private func checkIdle(context: ChannelHandlerContext) {
        idleCheck = nil
        let now = self.now()
        switch idle.check(now: now, timeout: counts.limits.idleTimeout) {
        case .answering:
            // Scheduled again when the answer ends.
            break
        case .idle where now - idleCheckDue > Self.stalledLoopAllowance:
            // Looked too late to trust: look again once the loop has read its sockets (it does before the next check).
            scheduleIdleCheck(in: Self.stalledLoopAllowance, context: context)
        case .idle:
            context.close(promise: nil)
        case .activeUntil(let deadline):
            scheduleIdleCheck(in: now.duration(to: deadline), context: context)
        }
    }
}

/// When a connection is idle: no request part read and no answer under way for the idle timeout. A connection whose
/// request was read and whose answer is still being written (a long poll, a stream) is never idle.
struct IdleConnectionState: Sendable, Equatable {
    enum Verdict: Sendable, Equatable {
        /// An answer is under way: look again when it ends.
        case answering
        case idle
        /// Active lately: look again at this instant.
        case activeUntil(ContinuousClock.Instant)
    }

    private var answersUnderWay = 0
    private var readingRequest = false
    private var lastActive: ContinuousClock.Instant

    init(at now: ContinuousClock.Instant = .now) {
        lastActive = now
    }

    mutating func read(_ part: HTTPRequestPart, at now: ContinuousClock.Instant) {
        lastActive = now
        switch part {
        case .head:
            readingRequest = true
            answersUnderWay += 1
        case .body:
            break
        case .end:
            readingRequest = false
        }
    }

    /// Returns `true` when the last answer under way ended, so the idle time starts again.
    mutating func wrote(_ part: HTTPResponsePart, at now: ContinuousClock.Instant) -> Bool {
        guard case .end = part else { return false }
        // An answer written with no request read (a malformed head's 400) counts nothing.
        answersUnderWay = max(0, answersUnderWay - 1)
        guard answersUnderWay == 0 else { return false }
        lastActive = now
        return true
    }

    func check(now: ContinuousClock.Instant, timeout: Duration) -> Verdict {
        if !readingRequest, answersUnderWay > 0 { return .answering }
        let deadline = lastActive + timeout
        return now >= deadline ? .idle : .activeUntil(deadline)
    }
}

/// Where the connection guard counts what it does; the server's `/metrics` in production.
package protocol ConnectionMetrics: Sendable {
    /// An HTTP connection was admitted or closed.
    func connection(opened: Bool)
    /// A limit refused something (`limit` names it: `connections`, `connections_per_address`, …).
    func refused(limit: String)
}
