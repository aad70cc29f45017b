public import Foundation

#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// An HTTP request as the client sends it.
public struct TransportRequest: Sendable {
    public var method: String
    public var url: URL
    public var headers: [String: String]
    public var body: Data?

    public init(method: String, url: URL, headers: [String: String] = [:], body: Data? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// An HTTP response as the client receives it.
public struct TransportResponse: Sendable {
    public var status: Int
    /// Header names lowercased.
    public var headers: [String: String]
    public var body: Data

    public init(status: Int, headers: [String: String], body: Data) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Sends HTTP requests for the client. Cumulus ships ``URLSessionTransport``; tests and apps can plug in their own.
public protocol Transport: Sendable {
    /// Sends a request and returns the response, whatever its status. Throws only when no response arrived.
    func send(_ request: TransportRequest) async throws -> TransportResponse
    /// Sends a file as the request's body (an asset upload). The default reads the file and calls ``send(_:)``; a
    /// transport that can stream from disk does so.
    func upload(_ request: TransportRequest, fromFile file: URL) async throws -> TransportResponse
    /// Receives the response's body into a file (an asset download), answering the response with an empty body when
    /// its status is 2xx. The default calls ``send(_:)`` and writes the body; a transport that can stream to disk
    /// does so.
    func download(_ request: TransportRequest, toFile file: URL) async throws -> TransportResponse
}

extension Transport {
    public func upload(_ request: TransportRequest, fromFile file: URL) async throws -> TransportResponse {
        var request = request
        request.body = try Data(contentsOf: file)
        return try await send(request)
    }

    public func download(_ request: TransportRequest, toFile file: URL) async throws -> TransportResponse {
        var response = try await send(request)
        guard (200..<300).contains(response.status) else { return response }
        try response.body.write(to: file, options: .atomic)
        response.body = Data()
        return response
    }
}

/// A ``Transport`` on `URLSession`: native on Apple platforms, and on Linux through FoundationNetworking, so apps
/// need no further HTTP dependency.
public struct URLSessionTransport: Transport {
    let session: URLSession

    public init(session: URLSession = .shared) {
        self.session = session
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        urlRequest.httpBody = request.body
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await session.data(for: urlRequest)
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
        }
        return TransportResponse(status: http.statusCode, headers: headers, body: data)
    }
}
