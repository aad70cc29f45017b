/// A range of a zone's record names with the digest of the records one side holds in it: what `records/reconcile`
/// compares.
public struct RangeDigest: Sendable, Hashable {
    public var range: RecordNameRange
    public var digest: ZoneDigest

    public init(range: RecordNameRange, digest: ZoneDigest) {
        self.range = range
        self.digest = digest
    }

    init(wire object: WireObject) throws(WireFormatError) {
        range = RecordNameRange(lowerBound: try object.string("lowerBound"), upperBound: try object.string("upperBound"))
        digest = try ZoneDigest(wire: object)
    }

    func writeMembers(to writer: inout JSONWriter) {
        writer.member("lowerBound", range.lowerBound)
        writer.member("upperBound", range.upperBound)
        writer.key("fingerprint")
        writer.string(digest.fingerprint)
        writer.key("recordCount")
        writer.int(digest.recordCount)
    }
}

/// The body of `records/reconcile`, a Cumulus extension of the wire: ranges of one zone's record names, each with the
/// digest of what the device holds in it.
public struct RecordsReconcileRequest: WireMessage, Hashable {
    public var zoneID: ZoneID
    public var ranges: [RangeDigest]

    public init(zoneID: ZoneID, ranges: [RangeDigest]) {
        self.zoneID = zoneID
        self.ranges = ranges
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        zoneID = try ZoneID(wire: object.requiredObject("zoneID"))
        ranges = try object.requiredObjects("ranges") { object throws(WireFormatError) in try RangeDigest(wire: object) }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("zoneID")
        writer.zoneID(zoneID)
        writer.array("ranges", ranges) { writer, range in
            writer.beginObject()
            range.writeMembers(to: &writer)
            writer.endObject()
        }
        writer.endObject()
    }
}

/// The server's answer for one range of a `records/reconcile` request.
public enum RangeReconciliation: Sendable, Hashable {
    /// The server holds the same records in the range.
    case match(RecordNameRange)
    /// The range differs and holds many records: its parts, each with the digest of what the server holds in it, to
    /// compare again.
    case split(RecordNameRange, [RangeDigest])
    /// The range differs and holds few records: each one the server holds in it, with its change tag.
    case list(RecordNameRange, [RecordVersion])

    /// The range the answer is about.
    public var range: RecordNameRange {
        switch self {
        case .match(let range), .split(let range, _), .list(let range, _): range
        }
    }
}

/// A record's name and change tag: which version of it one side holds.
public struct RecordVersion: Sendable, Hashable {
    public var recordName: String
    public var recordChangeTag: String

    public init(recordName: String, recordChangeTag: String) {
        self.recordName = recordName
        self.recordChangeTag = recordChangeTag
    }
}

/// The answer of `records/reconcile`: one reconciliation per range asked for, in the request's order.
public struct RecordsReconcileResponse: WireMessage, Hashable {
    public var zoneID: ZoneID
    public var ranges: [RangeReconciliation]

    public init(zoneID: ZoneID, ranges: [RangeReconciliation]) {
        self.zoneID = zoneID
        self.ranges = ranges
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        zoneID = try ZoneID(wire: object.requiredObject("zoneID"))
        ranges = try object.requiredObjects("ranges") { object throws(WireFormatError) -> RangeReconciliation in
            let range = RecordNameRange(lowerBound: try object.string("lowerBound"), upperBound: try object.string("upperBound"))
            switch try object.requiredString("status") {
            case "MATCH": return .match(range)
            case "SPLIT":
                return .split(range, try object.requiredObjects("subranges") { object throws(WireFormatError) in try RangeDigest(wire: object) })
            case "LIST":
                return .list(
                    range,
                    try object.requiredObjects("records") { object throws(WireFormatError) in
                        RecordVersion(
                            recordName: try object.requiredString("recordName"), recordChangeTag: try object.requiredString("recordChangeTag"))
                    })
            case let status: throw WireFormatError(path: object.path("status"), message: "unknown status \(status)")
            }
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("zoneID")
        writer.zoneID(zoneID)
        writer.array("ranges", ranges) { writer, answer in
            writer.beginObject()
            writer.member("lowerBound", answer.range.lowerBound)
            writer.member("upperBound", answer.range.upperBound)
            switch answer {
            case .match:
                writer.member("status", "MATCH")
            case .split(_, let parts):
                writer.member("status", "SPLIT")
                writer.array("subranges", parts) { writer, part in
                    writer.beginObject()
                    part.writeMembers(to: &writer)
                    writer.endObject()
                }
            case .list(_, let records):
                writer.member("status", "LIST")
                writer.array("records", records) { writer, record in
                    writer.beginObject()
                    writer.member("recordName", record.recordName)
                    writer.member("recordChangeTag", record.recordChangeTag)
                    writer.endObject()
                }
            }
            writer.endObject()
        }
        writer.endObject()
    }
}
