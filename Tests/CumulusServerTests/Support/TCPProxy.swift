import NIOCore
import NIOPosix
import Synchronization

/// A TCP proxy on loopback that can cut every connection and refuse new ones, then come back: what an instance sees
/// of a PostgreSQL server that restarts, without stopping the server the other suites use.
final class TCPProxy: Sendable {
    let port: Int
    private let channel: any Channel
    private let state: State

    private final class State: Sendable {
        let mutex = Mutex<(up: Bool, open: [any Channel])>((true, []))
        /// Bytes are dropped instead of passed on, connections left open: a server that stopped answering.
        let stalled = Mutex(false)
        func withLockedValue<T>(_ body: (inout (up: Bool, open: [any Channel])) -> T) -> T { mutex.withLock { body(&$0) } }
    }

    init(to targetHost: String, port targetPort: Int) async throws {
        let state = State()
        let group = MultiThreadedEventLoopGroup.singleton
        channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                guard state.withLockedValue({ $0.up }) else { return inbound.close() }
                return ClientBootstrap(group: inbound.eventLoop).connect(host: targetHost, port: targetPort).flatMap { outbound in
                    // A cut that came while this connection was being made closes it too: it was not in `open` yet.
                    let accepted = state.withLockedValue { state -> Bool in
                        guard state.up else { return false }
                        state.open += [inbound, outbound]
                        return true
                    }
                    guard accepted else {
                        outbound.close(promise: nil)
                        return inbound.close()
                    }
                    return inbound.pipeline.addHandler(Forward(to: outbound, state: state)).flatMap {
                        outbound.pipeline.addHandler(Forward(to: inbound, state: state))
                    }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
        self.state = state
    }

    /// Closes every connection and refuses new ones, as a server that went down.
    func cut() {
        let open = state.withLockedValue { state in
            state.up = false
            defer { state.open = [] }
            return state.open
        }
        for channel in open { channel.close(promise: nil) }
    }

    /// Accepts connections again, as a server that came back.
    func restore() {
        state.stalled.withLock { $0 = false }
        state.withLockedValue { $0.up = true }
    }

    /// Keeps every connection open but passes nothing on, either way: a server that stopped answering without closing
    /// anything (a machine gone, a partition). ``cut()`` then ``restore()`` bring it back.
    func stall() {
        state.stalled.withLock { $0 = true }
    }

    func close() async throws {
        cut()
        try await channel.close()
    }

    /// Copies what one side reads to the other, and closes the other when one closes.
    private final class Forward: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let peer: any Channel
        let state: State

        init(to peer: any Channel, state: State) {
            self.peer = peer
            self.state = state
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !state.stalled.withLock({ $0 }) else { return }
            peer.writeAndFlush(unwrapInboundIn(data), promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            peer.close(promise: nil)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}
