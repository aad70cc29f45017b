/// The answer of a share-a-copy upload: one link per snapshot, in order.
public struct CreatedLinksResponse: WireMessage, Hashable {
    /// A snapshot's link: its ID, its page, and when it expires (ISO 8601, UTC, milliseconds).
    public struct Link: Sendable, Hashable {
        public var id: String
        public var url: String
        /// Milliseconds since the epoch.
        public var expiresAt: Int64

        public init(id: String, url: String, expiresAt: Int64) {
            self.id = id
            self.url = url
            self.expiresAt = expiresAt
        }
    }

    public var links: [Link]

    public init(links: [Link]) {
        self.links = links
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        links = try object.requiredObjects("links") { link throws(WireFormatError) in
            let text = try link.requiredString("expiresAt")
            guard let expiresAt = ISO8601Milliseconds.milliseconds(text) else {
                throw WireFormatError(path: link.path("expiresAt"), message: "expected an ISO 8601 time, found \(text)")
            }
            return Link(id: try link.requiredString("id"), url: try link.requiredString("url"), expiresAt: expiresAt)
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("links", links) { writer, link in
            writer.beginObject()
            writer.member("id", link.id)
            writer.member("url", link.url)
            writer.member("expiresAt", ISO8601Milliseconds.string(link.expiresAt))
            writer.endObject()
        }
        writer.endObject()
    }
}

/// A snapshot behind a share-a-copy link, as the app downloads it: `{id, kind, expiresAt, drive | records}`.
public struct LinkSnapshotResponse: WireMessage {
    /// What the snapshot holds.
    public enum Content: Sendable {
        /// The snapshot as stored (a drive's or the records' JSON, cleaned when it was uploaded): written unchanged.
        case stored(kind: String, json: [UInt8])
        case drive(SharedDrive)
        case records([RecordDraft])
    }

    public var id: String
    /// Milliseconds since the epoch.
    public var expiresAt: Int64
    public var content: Content

    public init(id: String, expiresAt: Int64, content: Content) {
        self.id = id
        self.expiresAt = expiresAt
        self.content = content
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        id = try object.requiredString("id")
        let text = try object.requiredString("expiresAt")
        guard let expiresAt = ISO8601Milliseconds.milliseconds(text) else {
            throw WireFormatError(path: object.path("expiresAt"), message: "expected an ISO 8601 time, found \(text)")
        }
        self.expiresAt = expiresAt
        switch try object.requiredString("kind") {
        case "drive":
            guard let drive = object["drive"] else { throw WireFormatError(path: object.path("drive"), message: "is required") }
            content = .drive(try SharedDrive(wire: drive, path: object.path("drive")))
        default:
            content = .records(try object.requiredObjects("records") { record throws(WireFormatError) in try RecordDraft(wire: record) })
        }
    }

    /// The snapshot's kind: `drive` or `records`.
    public var kind: String {
        switch content {
        case .stored(let kind, _): kind
        case .drive: "drive"
        case .records: "records"
        }
    }

    /// Bytes to reserve for the answer.
    public var expectedSize: Int {
        if case .stored(_, let json) = content { return json.count + 256 }
        return 4096
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("id", id)
        writer.member("kind", kind)
        writer.member("expiresAt", ISO8601Milliseconds.string(expiresAt))
        writer.key(kind == "drive" ? "drive" : "records")
        switch content {
        case .stored(_, let json):
            writer.raw(json)
        case .drive(let drive):
            drive.write(to: &writer)
        case .records(let records):
            writer.beginArray()
            for record in records { record.write(to: &writer) }
            writer.endArray()
        }
        writer.endObject()
    }
}

/// The body of a drives upload (`links/1/…/drives`): `{drives: [...]}`, one link per drive.
public struct DriveLinksRequest: WireMessage, Hashable {
    public var drives: [SharedDrive]

    public init(drives: [SharedDrive]) {
        self.drives = drives
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        try self.init(wire: object, maximumDrives: .max, maximumPoints: .max)
    }

    /// Reads the body within the service's limits, counted before the drives are read.
    public init(wire object: WireObject, maximumDrives: Int, maximumPoints: Int) throws(WireFormatError) {
        guard let values = try object.array("drives") else { throw WireFormatError(path: object.path("drives"), message: "is required") }
        guard !values.isEmpty else { throw WireFormatError(path: object.path("drives"), message: "must not be empty") }
        guard values.count <= maximumDrives else {
            throw WireFormatError(path: object.path("drives"), message: "\(values.count) drives; at most \(maximumDrives) per request")
        }
        drives = []
        for (index, value) in values.enumerated() {
            drives.append(try SharedDrive(wire: value, path: "\(object.path("drives"))[\(index)]", maximumPoints: maximumPoints))
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("drives", drives) { writer, drive in drive.write(to: &writer) }
        writer.endObject()
    }
}

/// The body of a records snapshot upload (`links/1/…/records`): `{records: [...]}`, one link for them all.
public struct RecordsLinkRequest: WireMessage, Hashable {
    public var records: [RecordDraft]

    public init(records: [RecordDraft]) {
        self.records = records
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        try self.init(wire: object, maximumRecords: .max)
    }

    /// Reads the body within the service's limit, counted before the records are read.
    public init(wire object: WireObject, maximumRecords: Int) throws(WireFormatError) {
        guard let values = try object.array("records") else { throw WireFormatError(path: object.path("records"), message: "is required") }
        guard !values.isEmpty, values.count <= maximumRecords else {
            throw WireFormatError(path: object.path("records"), message: "1 to \(maximumRecords) records per snapshot")
        }
        records = []
        for (index, value) in values.enumerated() {
            records.append(try RecordDraft(wire: WireObject(value, path: "\(object.path("records"))[\(index)]")))
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("records", records) { writer, record in record.write(to: &writer) }
        writer.endObject()
    }
}
