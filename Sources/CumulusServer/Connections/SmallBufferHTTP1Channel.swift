import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// HTTP/1.1 as Hummingbird serves it, with receive buffers that start small (``SmallBufferHTTP1Channel``).
func smallBufferHTTP1(configuration: HTTP1Channel.Configuration) -> HTTPServerBuilder {
    HTTPServerBuilder { responder in
        SmallBufferHTTP1Channel(http1: HTTP1Channel(responder: responder, configuration: configuration))
    }
}

/// Hummingbird's HTTP/1.1 channel with receive buffers that start at 512 bytes: NIO keeps a connection's last receive
/// buffer for its next read, and an idle connection (thousands of devices on their courier streams) need not hold
/// 2 KiB for a request head of a few hundred bytes. The buffers still grow at once for large bodies.
struct SmallBufferHTTP1Channel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value

    static let receiveBuffers = AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536)

    let http1: HTTP1Channel

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.setOption(ChannelOptions.recvAllocator, value: Self.receiveBuffers).flatMap {
            http1.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await http1.handle(value: value, logger: logger)
    }
}
