import CumulusModel
import Hummingbird

/// A wire message a handler returns: it writes itself as the response's JSON body (Hummingbird's
/// `ResponseEncodable`, with the project's own writer).
protocol WireResponse: WireMessage, ResponseGenerator {}

extension WireResponse {
    func response(from request: Request, context: some RequestContext) throws -> Response {
        var writer = JSONWriter()
        write(to: &writer)
        return .json(writer)
    }
}

extension ZonesResponse: WireResponse {}
extension DatabaseChangesResponse: WireResponse {}
extension SubscriptionsResponse: WireResponse {}
extension PushTokenResponse: WireResponse {}
extension CallerResponse: WireResponse {}
extension UsersResponse: WireResponse {}
