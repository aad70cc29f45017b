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
    /// Sends a file as the request's body (an asset upload), reporting the bytes sent as they go. The default reads
    /// the file, calls ``send(_:)`` and reports the start and the end; a transport that can stream from disk does so.
    func upload(_ request: TransportRequest, fromFile file: URL, progress: @escaping @Sendable (AssetProgress) -> Void) async throws
        -> TransportResponse
    /// Receives the response's body into a file (an asset download), reporting the bytes received, and answers the
    /// response with an empty body when its status is 2xx. The default calls ``send(_:)``, writes the body and
    /// reports the start and the end; a transport that can stream to disk does so.
    func download(_ request: TransportRequest, toFile file: URL, progress: @escaping @Sendable (AssetProgress) -> Void) async throws
        -> TransportResponse
}

/// How far an asset transfer has come.
public struct AssetProgress: Sendable, Hashable {
    public var completedBytes: Int64
    /// `nil` while unknown (a download before its headers).
    public var totalBytes: Int64?

    public init(completedBytes: Int64, totalBytes: Int64?) {
        self.completedBytes = completedBytes
        self.totalBytes = totalBytes
    }

    /// From 0 to 1; 0 while the total is unknown.
    public var fractionCompleted: Double {
        guard let totalBytes, totalBytes > 0 else { return completedBytes > 0 ? 1 : 0 }
        return min(1, Double(completedBytes) / Double(totalBytes))
    }
}

extension Transport {
    public func upload(_ request: TransportRequest, fromFile file: URL, progress: @escaping @Sendable (AssetProgress) -> Void) async throws
        -> TransportResponse
    {
        var request = request
        let body = try Data(contentsOf: file)
        request.body = body
        progress(AssetProgress(completedBytes: 0, totalBytes: Int64(body.count)))
        let response = try await send(request)
        progress(AssetProgress(completedBytes: Int64(body.count), totalBytes: Int64(body.count)))
        return response
    }

    public func download(_ request: TransportRequest, toFile file: URL, progress: @escaping @Sendable (AssetProgress) -> Void) async throws
        -> TransportResponse
    {
        progress(AssetProgress(completedBytes: 0, totalBytes: nil))
        var response = try await send(request)
        guard (200..<300).contains(response.status) else { return response }
        try response.body.write(to: file, options: .atomic)
        progress(AssetProgress(completedBytes: Int64(response.body.count), totalBytes: Int64(response.body.count)))
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
        #if canImport(FoundationNetworking)
        // FoundationNetworking's URLSession deadlocks when a request's task is cancelled just as its answer arrives: the
        // cancellation holds the task's lock while it waits for the session's queue, where the answer waits for that
        // lock to resume the task (both threads stuck for good; seen in this package's tests). So the request runs in a
        // task that is never cancelled, and a cancelled caller only stops waiting for it.
        let (session, sent) = (self.session, urlRequest)
        let (data, response) = try await abandoningOnCancel(cancelsOperation: false) { try await session.data(for: sent) }
        #else
        let (data, response) = try await session.data(for: urlRequest)
        #endif
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
        }
        return TransportResponse(status: http.statusCode, headers: headers, body: data)
    }

    #if !canImport(FoundationNetworking)
    // On Apple platforms URLSession streams a file up from disk (reporting progress as it goes) and down to disk;
    // elsewhere the protocol's defaults (through `send`) serve.
    public func upload(_ request: TransportRequest, fromFile file: URL, progress: @escaping @Sendable (AssetProgress) -> Void) async throws
        -> TransportResponse
    {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await session.upload(for: urlRequest, fromFile: file, delegate: ProgressDelegate(progress))
        return try Self.transportResponse(response, body: data)
    }

    public func download(_ request: TransportRequest, toFile file: URL, progress: @escaping @Sendable (AssetProgress) -> Void) async throws
        -> TransportResponse
    {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        progress(AssetProgress(completedBytes: 0, totalBytes: nil))
        // No download delegate: one that handles the finished file would have it removed before this call returns.
        let (location, response) = try await session.download(for: urlRequest)
        var answer = try Self.transportResponse(response, body: Data())
        if (200..<300).contains(answer.status) {
            _ = try? FileManager.default.removeItem(at: file)
            try FileManager.default.moveItem(at: location, to: file)
            let size = (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.int64Value ?? 0
            progress(AssetProgress(completedBytes: size, totalBytes: size))
        } else {
            answer.body = (try? Data(contentsOf: location)) ?? Data()
        }
        return answer
    }

    private static func transportResponse(_ response: URLResponse, body: Data) throws -> TransportResponse {
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
        }
        return TransportResponse(status: http.statusCode, headers: headers, body: body)
    }

    /// Passes an upload's byte counts on as ``AssetProgress``.
    private final class ProgressDelegate: NSObject, URLSessionTaskDelegate, Sendable {
        let progress: @Sendable (AssetProgress) -> Void

        init(_ progress: @escaping @Sendable (AssetProgress) -> Void) { self.progress = progress }

        func urlSession(
            _ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64
        ) {
            progress(AssetProgress(completedBytes: totalBytesSent, totalBytes: totalBytesExpectedToSend > 0 ? totalBytesExpectedToSend : nil))
        }

    }
    #endif
}
