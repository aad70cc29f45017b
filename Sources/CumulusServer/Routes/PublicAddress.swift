import Hummingbird

/// Where the server's public pages live, and how a page request asks for JSON: shared by share URLs and link URLs.
struct PublicAddress: Sendable {
    /// The configured public base URL (behind a proxy), without a trailing slash; `nil` uses the request's host.
    let configured: String?

    /// The base URL of links handed out in answers to this request.
    func base(for request: Request) -> String {
        configured ?? "http://\(request.head.authority ?? "localhost")"
    }

    /// A share's URL, as share records and the share page give it.
    func shareURL(_ shortGUID: String, for request: Request) -> String {
        base(for: request) + "/share/" + shortGUID
    }

    /// A page identifier from the path, and whether the client wants JSON: `Accept: application/json`, or the
    /// identifier ends in `.json` (for clients that cannot set headers).
    static func pageRequest(_ identifier: String, _ request: Request) -> (identifier: String, wantsJSON: Bool) {
        if identifier.hasSuffix(".json") { return (String(identifier.dropLast(5)), true) }
        return (identifier, request.headers[.accept]?.contains("application/json") ?? false)
    }
}
