import CumulusClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting

/// A client ``Transport`` that sends requests to the application in process, through HummingbirdTesting: client tests
/// that need no socket.
struct InProcessTransport: Transport {
    let client: any TestClientProtocol

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        var uri = request.url.path
        if let query = request.url.query { uri += "?" + query }
        var headers = HTTPFields()
        for (name, value) in request.headers { if let field = HTTPField.Name(name) { headers[field] = value } }
        let response = try await client.execute(
            uri: uri, method: HTTPRequest.Method(rawValue: request.method) ?? .post, headers: headers,
            body: request.body.map { ByteBuffer(bytes: $0) }
        )
        var responseHeaders: [String: String] = [:]
        for field in response.headers { responseHeaders[field.name.canonicalName] = field.value }
        return TransportResponse(status: Int(response.status.code), headers: responseHeaders, body: Data(response.body.readableBytesView))
    }
}
