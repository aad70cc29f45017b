import HTTPTypes
import Hummingbird
import Tracing

/// A span per request, for a tracer the process bootstraps (`cumulus serve` built with the `OpenTelemetry` trait):
/// named by the route's template, joined to the client's trace by its `traceparent`, ended when the answer's body is
/// written.
///
/// Hummingbird's `TracingMiddleware` records the path and the query; here the path can hold a share's short GUID or a
/// push token and the query `ckAPIToken` and `ckWebAuthToken`, so a span carries the route template, the method and
/// the status only, as the access log does.
struct RequestSpanMiddleware<Context: RequestContext>: RouterMiddleware {
    let tracer: any Tracer

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var serviceContext = ServiceContext.current ?? .topLevel
        tracer.extract(request.headers, into: &serviceContext, using: HeaderExtractor())
        let span = tracer.startAnySpan("HTTP \(request.method.rawValue)", context: serviceContext, ofKind: .server)
        span.attributes["http.request.method"] = request.method.rawValue
        do {
            return try await ServiceContext.$current.withValue(span.context) {
                var response = try await next(request, context)
                let route = context.endpointPath ?? "NotFound"
                span.operationName = "\(request.method.rawValue) \(route)"
                span.attributes["http.route"] = route
                span.attributes["http.response.status_code"] = Int(response.status.code)
                if response.status.code >= 500 { span.setStatus(SpanStatus(code: .error)) }
                let ending = SpanEnding(span)
                let body = response.body
                response.body = ResponseBody(contentLength: body.contentLength) { writer in
                    defer { ending.end() }
                    try await body.write(writer)
                }
                return response
            }
        } catch {
            span.operationName = "\(request.method.rawValue) \(context.endpointPath ?? "NotFound")"
            if let error = error as? any HTTPResponseError {
                span.attributes["http.response.status_code"] = Int(error.status.code)
                if error.status.code >= 500 { span.setStatus(SpanStatus(code: .error)) }
            } else {
                span.recordError(error)
                span.setStatus(SpanStatus(code: .error))
            }
            span.end()
            throw error
        }
    }
}

/// Ends a span once, from the closure that runs after the body is written.
private final class SpanEnding: @unchecked Sendable {
    // A span is ended from one closure, once.
    let span: any Span
    init(_ span: any Span) { self.span = span }
    func end() { span.end() }
}

/// Reads W3C trace context (and any other propagated fields) from request headers.
private struct HeaderExtractor: Extractor {
    func extract(key: String, from headers: HTTPFields) -> String? {
        HTTPField.Name(key).flatMap { headers[$0] }
    }
}
