import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ServiceLifecycle

/// CloudKit's push wire, served by Cumulus: `tokens/create` and `tokens/register` (under `/device/1/…`, where
/// CloudKit JS sends them, and under `/database/1/…`, where Apple's page puts them), and the courier a client GETs in
/// a loop: each answer carries one notification, or is empty when none came before the timeout.
struct PushRoutes {
    let push: PushService
    let limits: Limits
    let address: PublicAddress
    /// How often an idle stream sends a comment line, so that proxies and clients see it alive.
    let heartbeat: Duration
    let metrics: ServerMetrics

    static let lastEventID = HTTPField.Name("Last-Event-ID")!

    /// How long a courier poll waits by default, and at most.
    static let defaultWait = 30
    static let longestWait = 60

    func registerTokens<Context: AuthenticatedRequestContext>(on group: RouterGroup<Context>) {
        group.post("tokens/create") { request, context in try await createToken(request, context: context) }
        group.post("tokens/register") { request, context in try await registerToken(request, context: context) }
    }

    func registerCourier(on router: Router<CumulusRequestContext>) {
        router.get("courier/1/:container/:environment/:token", use: courier)
    }

    func answer(_ token: StoredPushToken, request: Request) -> PushTokenResponse {
        PushTokenResponse(
            apnsEnvironment: token.environment.rawValue, apnsToken: token.token,
            webcourierURL: "\(address.base(for: request))/courier/1/\(token.container)/\(token.environment.rawValue)/\(token.token)")
    }

    func createToken(_ request: Request, context: some AuthenticatedRequestContext) async throws -> PushTokenResponse {
        // The body (`{apnsEnvironment}`) is optional; the token serves the path's environment.
        _ = try? await request.body.collect(upTo: 64 * 1024)
        return answer(try await push.createToken(caller: context.caller, logger: context.logger), request: request)
    }

    func registerToken(_ request: Request, context: some AuthenticatedRequestContext) async throws -> PushTokenResponse {
        let body = try PushTokenRegisterRequest(wire: try await RequestBody.object(request, limits: limits))
        return answer(try await push.registerToken(body.apnsToken, caller: context.caller, logger: context.logger), request: request)
    }

    @Sendable func courier(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        guard let container = context.parameters.get("container"), let token = context.parameters.get("token"),
            let environment = context.parameters.get("environment").flatMap(ContainerEnvironment.init(rawValue:))
        else {
            throw CumulusError(.badRequest, "path: expected /courier/1/{container}/{development|production}/{token}")
        }
        if request.headers[.accept]?.contains("text/event-stream") == true || request.uri.queryParameters["stream"] != nil {
            return try await stream(token: token, container: container, environment: environment, request: request, context: context)
        }
        var seconds = Self.defaultWait
        if let text = request.uri.queryParameters["timeout"] {
            guard let value = Int(text), (0...Self.longestWait).contains(value) else {
                throw CumulusError(.badRequest, "timeout: seconds from 0 to \(Self.longestWait)")
            }
            seconds = value
        }
        // A server shutting down answers waiting polls at once (empty) instead of holding its shutdown for their timeout.
        let push = self.push
        let logger = context.logger
        let wait = Duration.seconds(seconds)
        let notification: PushNotification?
        metrics.pushConnection(opened: true)
        defer { metrics.pushConnection(opened: false) }
        do {
            notification = try await cancelWhenGracefulShutdown {
                try await push.nextNotification(token: token, container: container, environment: environment, timeout: wait, logger: logger)
            }
        } catch is CancellationError {
            notification = nil
        }
        guard let notification else {
            // No notification before the timeout: an empty answer, and the client polls again.
            return Response(status: .ok, headers: [.contentType: "application/json; charset=utf-8", .contentLength: "0"], body: .init())
        }
        metrics.pushNotificationSent()
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: notification.payload)))
    }

    /// The courier as a Server-Sent Events stream: each notification is an event whose `id` a reconnecting client names
    /// in `Last-Event-ID` (or `lastEventID` in the query) to be sent what it missed; comment lines keep the connection
    /// alive through proxies; an `event: reset` says that what was missed is no longer known, so the client should fetch
    /// all changes.
    func stream(token: String, container: String, environment: ContainerEnvironment, request: Request, context: CumulusRequestContext)
        async throws -> Response
    {
        let named = request.headers[values: Self.lastEventID].first ?? request.uri.queryParameters["lastEventID"].map(String.init)
        let lastEventID = try named.map { text in
            guard let id = Int64(text.trimmingCharacters(in: .whitespaces)), id >= 0 else {
                throw CumulusError(.badRequest, "Last-Event-ID: expected the id of an event this stream sent")
            }
            return id
        }
        let connection = try await push.connect(token: token, container: container, environment: environment, logger: context.logger)
        var resumed = PushConnection.Resumption.resumed
        do {
            if let lastEventID { resumed = try await connection.resume(after: lastEventID, logger: context.logger) }
        } catch {
            connection.close()
            throw error
        }
        let resumption = resumed
        let heartbeat = self.heartbeat
        let push = self.push
        let logger = context.logger
        let metrics = self.metrics
        let headers: HTTPFields = [
            .contentType: "text/event-stream; charset=utf-8", .cacheControl: "no-cache",
            // nginx buffers answers unless told not to; a buffered stream delivers nothing until the buffer fills.
            HTTPField.Name("X-Accel-Buffering")!: "no",
        ]
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                let opened = connection
                var connection = connection
                metrics.pushConnection(opened: true)
                defer {
                    connection.close()
                    metrics.pushConnection(opened: false)
                }
                try await withGracefulShutdownHandler {
                    var opening = "retry: 2000\n: connected\n\n"
                    if case .reset(let id) = resumption { opening += "id: \(id)\nevent: reset\ndata: {}\n\n" }
                    try await writer.write(ByteBuffer(string: opening))
                    while true {
                        if let notification = try await connection.next(upTo: heartbeat, logger: logger) {
                            var event = ByteBuffer(string: "id: \(notification.id)\ndata: ")
                            event.writeBytes(notification.payload)
                            event.writeString("\n\n")
                            try await writer.write(event)
                            metrics.pushNotificationSent()
                        } else if connection.isSuperseded || Task.isCancelled {
                            break
                        } else {
                            try await writer.write(ByteBuffer(string: ": heartbeat\n\n"))
                        }
                    }
                } onGracefulShutdown: {
                    push.end(opened)
                }
                try await writer.finish(nil)
            })
    }
}
