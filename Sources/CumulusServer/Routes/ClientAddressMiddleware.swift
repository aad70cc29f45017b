import Foundation
import HTTPTypes
import Hummingbird

/// Behind a trusted load balancer, the client's address is the one it appended last to `X-Forwarded-For` (earlier
/// entries come from the client and prove nothing); this middleware puts it in ``CumulusRequestContext/remoteAddress``,
/// which every per-address limit reads. Installed only when the configuration trusts the header.
struct ClientAddressMiddleware: RouterMiddleware {
    typealias Context = CumulusRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        if let forwarded = request.headers[values: .xForwardedFor].last,
            let last = forwarded.split(separator: ",").last?.trimmingCharacters(in: .whitespaces), !last.isEmpty, last.utf8.count <= 64
        {
            context.remoteAddress = last
        }
        return try await next(request, context)
    }
}

extension HTTPField.Name {
    static let xForwardedFor = Self("X-Forwarded-For")!
}
