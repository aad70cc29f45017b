import HTTPTypes
import Hummingbird
import Logging
import Synchronization

/// One structured line per request: the route (its template, so no record name, share GUID or push token from the
/// path), the container, environment and database, the status, the duration, the bytes, and the request ID; and the
/// same request counted in ``ServerMetrics``.
///
/// Never the query string, which carries `ckAPIToken` and `ckWebAuthToken`, nor a header or a body.
struct AccessLogMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let requestID = RequestIdentity.uuid(context)
        var context = context
        if let header = request.headers[HTTPField.Name("traceparent")!], let trace = TraceParent(header) {
            context.logger[metadataKey: "trace_id"] = "\(trace.traceID)"
            context.logger[metadataKey: "parent_span_id"] = "\(trace.parentID)"
        }
        do {
            var response = try await next(request, context)
            response.headers[RequestIdentity.header] = requestID
            log(request, context: context, requestID: requestID, status: response.status.code, bytesOut: response.body.contentLength, start: start)
            return response
        } catch let error as any HTTPResponseError {
            log(request, context: context, requestID: requestID, status: error.status.code, bytesOut: nil, start: start)
            throw error
        } catch {
            log(request, context: context, requestID: requestID, status: 500, bytesOut: nil, start: start)
            throw error
        }
    }

    private func log(_ request: Request, context: Context, requestID: String, status: Int, bytesOut: Int?, start: ContinuousClock.Instant) {
        var parameters: [(String, String)] = []
        for name in ["container", "environment", "database"] {
            if let value = context.parameters.get(name) { parameters.append((name, String(value))) }
        }
        AccessLog(logger: context.logger, metrics: metrics).record(
            requestID: requestID, method: request.method.rawValue, route: context.endpointPath ?? "NotFound", status: status,
            start: start, parameters: parameters, bytesIn: request.headers[.contentLength], bytesOut: bytesOut)
    }
}

/// The access log's line and the request metrics of one request, for the router's requests and for those answered
/// below it (the courier, ``CourierChannelHandler``).
struct AccessLog {
    let logger: Logger
    let metrics: ServerMetrics

    func record(
        requestID: String, method: String, route: String, status: Int, start: ContinuousClock.Instant, parameters: [(String, String)],
        bytesIn: String?, bytesOut: Int?
    ) {
        let now = ContinuousClock.now
        let elapsed = now - start
        metrics.request(route: route, method: method, status: status, duration: elapsed)
        guard logger.logLevel <= .info else { return }
        // Refused credentials and throttled requests are what a flood is made of: a few lines a second tell of it, and
        // the next line written says how many were left out (`/metrics` counts them all).
        var suppressed = 0
        if status == 401 || status == 429 {
            guard let left = metrics.refusalLines.admit(now: now) else { return }
            suppressed = left
        }
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        var metadata: Logger.Metadata = [
            "request_id": "\(requestID)",
            "method": "\(method)",
            "route": "\(route)",
            "status": "\(status)",
            "duration_ms": "\((milliseconds * 1000).rounded() / 1000)",
        ]
        for (name, value) in parameters { metadata[name] = "\(value)" }
        if let bytesIn { metadata["bytes_in"] = "\(bytesIn)" }
        if let bytesOut { metadata["bytes_out"] = "\(bytesOut)" }
        if suppressed > 0 { metadata["refusals_not_logged"] = "\(suppressed)" }
        logger.info("request", metadata: metadata)
    }
}

/// At most `linesPerSecond` access-log lines of refusals a second, per instance.
final class RefusalLogSampler: Sendable {
    private struct Window {
        var start: ContinuousClock.Instant
        var written = 0
        var left = 0
    }

    let linesPerSecond: Int
    private let window = Mutex<Window?>(nil)

    init(linesPerSecond: Int) {
        self.linesPerSecond = linesPerSecond
    }

    /// `nil` when this refusal's line is left out; otherwise how many were left out since the last one written.
    func admit(now: ContinuousClock.Instant) -> Int? {
        window.withLock { window in
            var current = window ?? Window(start: now)
            if now - current.start >= .seconds(1) {
                current.start = now
                current.written = 0
            }
            guard current.written < linesPerSecond else {
                current.left += 1
                window = current
                return nil
            }
            current.written += 1
            let left = current.left
            current.left = 0
            window = current
            return left
        }
    }
}

/// The request ID: Hummingbird's per-request ID (random per process, then counted) shaped as a UUID, as CloudKit's
/// error envelopes carry one. The same ID is in the `X-Request-ID` header, in every error envelope's `uuid`, and in
/// the access log, so a user's report can be found in the logs.
enum RequestIdentity {
    static let header = HTTPField.Name("X-Request-ID")!

    static func uuid(_ context: some RequestContext) -> String {
        var hex = Array(context.id.lowercased().utf8.filter { $0 != UInt8(ascii: "-") }.suffix(32))
        if hex.count < 32 { hex = Array(repeating: UInt8(ascii: "0"), count: 32 - hex.count) + hex }
        var shaped: [UInt8] = []
        shaped.reserveCapacity(36)
        for (index, byte) in hex.enumerated() {
            if index == 8 || index == 12 || index == 16 || index == 20 { shaped.append(UInt8(ascii: "-")) }
            shaped.append(byte)
        }
        return String(decoding: shaped, as: UTF8.self)
    }
}
