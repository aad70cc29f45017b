/// A W3C Trace Context `traceparent` header (`00-<trace-id>-<parent-id>-<flags>`), read leniently: a client's trace
/// is carried into every log line of its request (`trace_id`, `parent_span_id`), so one search finds the app's logs and
/// the server's for the same action. A malformed header, or the all-zero IDs the specification forbids, is ignored.
struct TraceParent: Sendable, Hashable {
    var traceID: String
    var parentID: String

    init?(_ header: String) {
        let parts = header.filter { $0 != " " && $0 != "\t" }.lowercased().split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].count == 2, parts[0] != "ff", parts[1].count == 32, parts[2].count == 16, parts[3].count == 2,
            parts.prefix(4).allSatisfy({ $0.allSatisfy(\.isHexDigit) }),
            parts[1].contains(where: { $0 != "0" }), parts[2].contains(where: { $0 != "0" })
        else { return nil }
        // Version 00 has exactly four parts; a later version may add more after them.
        if parts[0] == "00" && parts.count != 4 { return nil }
        traceID = String(parts[1])
        parentID = String(parts[2])
    }
}
