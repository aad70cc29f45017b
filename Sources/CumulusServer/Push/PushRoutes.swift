import CumulusCore
import CumulusModel
import CumulusStore
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

    /// How long a courier poll waits by default, and at most.
    static let defaultWait = 30
    static let longestWait = 60

    func registerTokens(on group: RouterGroup<CumulusRequestContext>) {
        group.post("tokens/create", use: createToken)
        group.post("tokens/register", use: registerToken)
    }

    func registerCourier(on router: Router<CumulusRequestContext>) {
        router.get("courier/1/:container/:environment/:token", use: courier)
    }

    func answer(_ token: PushTokenRecord, request: Request) -> Response {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("apnsEnvironment")
        writer.string(token.environment.rawValue)
        writer.key("apnsToken")
        writer.string(token.token)
        writer.key("webcourierURL")
        writer.string("\(address.base(for: request))/courier/1/\(token.container)/\(token.environment.rawValue)/\(token.token)")
        writer.endObject()
        return .json(writer)
    }

    @Sendable func createToken(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        // The body (`{apnsEnvironment}`) is optional; the token serves the path's environment.
        _ = try? await request.body.collect(upTo: 64 * 1024)
        return answer(try await push.createToken(caller: try context.requireCaller(), logger: context.logger), request: request)
    }

    @Sendable func registerToken(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let token = try body.requiredString("apnsToken")
        return answer(try await push.registerToken(token, caller: try context.requireCaller(), logger: context.logger), request: request)
    }

    @Sendable func courier(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        guard let container = context.parameters.get("container"), let token = context.parameters.get("token"),
            let environment = context.parameters.get("environment").flatMap(ContainerEnvironment.init(rawValue:))
        else {
            throw CumulusError(.badRequest, "path: expected /courier/1/{container}/{development|production}/{token}")
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
        let notification: [UInt8]?
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
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: notification)))
    }
}
