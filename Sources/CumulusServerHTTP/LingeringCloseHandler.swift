import HTTPTypes
package import NIOCore
package import NIOHTTPTypes

/// Closes a connection after a response that says `Connection: close` (an oversized body's `413`, a malformed
/// message's `400`), once the client has finished sending its request, or after a bounded linger.
///
/// A client that writes its whole body before reading (Python's `http.client` and `requests`, many mobile stacks) would
/// otherwise see its connection reset mid-upload and never read the answer; reading and discarding the rest of the body
/// for a while lets it finish writing and read the `413`, and the linger bounds what a client that never stops costs.
package final class LingeringCloseHandler: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPRequestPart
    package typealias InboundOut = HTTPRequestPart
    package typealias OutboundIn = HTTPResponsePart
    package typealias OutboundOut = HTTPResponsePart

    private var state = LingeringCloseState()
    private let linger: TimeAmount
    private var lingerTask: Scheduled<Void>?

    /// - Parameter linger: How long the rest of a refused request is read and discarded before the connection closes.
    package init(linger: TimeAmount) {
        self.linger = linger
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        let action = state.read(part)
        context.fireChannelRead(data)
        apply(action, context: context)
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let part = unwrapOutboundIn(data)
        let action = state.write(part)
        guard action != .none else {
            context.write(data, promise: promise)
            return
        }
        // Only once the response's last part is on the wire may the connection close.
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.cascade(to: promise)
        context.writeAndFlush(data, promise: written)
        let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        let loopBoundSelf = NIOLoopBound(self, eventLoop: context.eventLoop)
        written.futureResult.whenComplete { _ in
            loopBoundSelf.value.apply(action, context: loopBoundContext.value)
        }
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        lingerTask?.cancel()
    }

    private func apply(_ action: LingeringCloseState.Action, context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .close:
            lingerTask?.cancel()
            context.close(promise: nil)
        case .lingerThenClose:
            let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
            lingerTask = context.eventLoop.scheduleTask(in: linger) {
                loopBoundContext.value.close(promise: nil)
            }
        }
    }
}

/// The decisions of ``LingeringCloseHandler``, apart from I/O.
struct LingeringCloseState: Sendable, Equatable {
    enum Action: Sendable, Equatable {
        case none
        /// Close now: the request and its `Connection: close` response are complete.
        case close
        /// The response is complete but the client is still sending: read on for a while, then close.
        case lingerThenClose
    }

    private var requestComplete = true
    private var closeRequested = false
    private var responseComplete = false

    mutating func read(_ part: HTTPRequestPart) -> Action {
        switch part {
        case .head:
            requestComplete = false
            return .none
        case .body:
            return .none
        case .end:
            requestComplete = true
            return closeRequested && responseComplete ? .close : .none
        }
    }

    mutating func write(_ part: HTTPResponsePart) -> Action {
        switch part {
        case .head(let head):
            if head.headerFields[.connection]?.lowercased() == "close" { closeRequested = true }
            return .none
        case .body:
            return .none
        case .end:
            guard closeRequested else { return .none }
            responseComplete = true
            return requestComplete ? .close : .lingerThenClose
        }
    }
}
