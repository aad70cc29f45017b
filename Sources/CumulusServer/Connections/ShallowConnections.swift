import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// HTTP/1.1 as Hummingbird serves it, but each request is answered in a child task of the connection's task.
///
/// A Swift task keeps the memory of the deepest stack it ever had (its allocator's slabs) until it ends. Hummingbird
/// answers every request of a connection inside the connection's one task, so a keep-alive connection that once
/// answered a deep request (middleware, authentication, a store write) holds that memory for as long as it stays open:
/// about 20 KiB more than a fresh connection. A child task's slabs are freed when the request is answered, so an idle
/// connection (a device waiting on its courier stream, a client's pooled connection) costs what a fresh one does. The
/// child is created and awaited on the same thread, so no request waits for another thread to wake.
func shallowHTTP1(configuration: HTTP1Channel.Configuration) -> HTTPServerBuilder {
    HTTPServerBuilder { responder in
        ShallowHTTP1Channel(
            http1: HTTP1Channel(
                responder: { request, writer, channel in
                    let box = ResponseWriterBox(writer)
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            switch box.take() {
                            case .some(let writer): try await responder(request, writer, channel)
                            case .none: break
                            }
                        }
                        try await group.next()
                    }
                }, configuration: configuration))
    }
}

/// Hummingbird's HTTP/1.1 channel with receive buffers that start small: NIO keeps a connection's last receive buffer
/// for its next read, and an idle connection (thousands of devices on their courier streams) need not hold 2 KiB for
/// a request head of a few hundred bytes. The buffers still grow at once for large bodies.
struct ShallowHTTP1Channel: ServerChildChannel {
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

/// Moves a request's response writer (which cannot be copied) into the child task that answers the request. Taken
/// exactly once, by that task.
private final class ResponseWriterBox: @unchecked Sendable {
    private var writer: ResponseWriter?

    init(_ writer: consuming ResponseWriter) {
        self.writer = .some(writer)
    }

    func take() -> ResponseWriter? {
        writer.take()
    }
}
