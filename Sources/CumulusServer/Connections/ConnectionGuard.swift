import NIOCore
import NIOHTTPTypes
import Synchronization

/// Limits on connections: how many one instance holds, how many one address holds, and how long a request's body may
/// take. (Idle connections, and request heads that never complete, are closed by Hummingbird's idle timeout.)
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
final class ConnectionCounts: Sendable {
    private let counts = Mutex((total: 0, byAddress: [String: Int]()))
    let limits: ConnectionLimits
    let countsAddresses: Bool
    let metrics: ServerMetrics

    init(limits: ConnectionLimits, countsAddresses: Bool, metrics: ServerMetrics) {
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

/// Admits a connection under ``ConnectionLimits`` (closing it at once when it is one too many) and closes it when a
/// request's body takes longer than ``ConnectionLimits/requestBodyTimeout``.
final class ConnectionGuardHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let counts: ConnectionCounts
    private var admittedAddress: String?
    private var bodyDeadline: Scheduled<Void>?

    init(counts: ConnectionCounts) {
        self.counts = counts
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let address = context.channel.remoteAddress?.ipAddress ?? "unknown"
        if counts.admit(address) {
            admittedAddress = address
        } else {
            context.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        forget()
    }

    func channelInactive(context: ChannelHandlerContext) {
        forget()
        context.fireChannelInactive()
    }

    /// Cancels the body deadline and gives back the connection's place, once, whichever comes first: the connection
    /// closing or the handler leaving the pipeline.
    private func forget() {
        bodyDeadline?.cancel()
        bodyDeadline = nil
        if let address = admittedAddress {
            admittedAddress = nil
            counts.release(address)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
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
}
