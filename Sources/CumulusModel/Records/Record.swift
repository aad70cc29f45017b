#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Who changed a record, and when: the `created` and `modified` dictionaries.
public struct RecordStamp: Sendable, Hashable {
    /// Milliseconds since the epoch.
    public var timestamp: Int64
    /// The user who made the change.
    public var userRecordName: String
    /// The device that made the change, as the client reported it.
    public var deviceID: String

    /// Creates a stamp.
    public init(timestamp: Int64, userRecordName: String, deviceID: String) {
        self.timestamp = timestamp
        self.userRecordName = userRecordName
        self.deviceID = deviceID
    }
}

/// The system fields of a record: everything but its `fields`.
public struct RecordHeader: Sendable, Hashable {
    public var recordName: String
    public var recordType: String
    /// Opaque change tag; changes on every save.
    public var recordChangeTag: String
    public var created: RecordStamp
    public var modified: RecordStamp
    /// Record name of the parent, in the same zone.
    public var parent: String?
    /// Reference to the share this record is the root of.
    public var share: Reference?
    public var zoneID: ZoneID
    /// Short GUID of the record's share link, once created.
    public var shortGUID: String?

    /// Creates a header.
    public init(
        recordName: String, recordType: String, recordChangeTag: String, created: RecordStamp, modified: RecordStamp,
        parent: String? = nil, share: Reference? = nil, zoneID: ZoneID, shortGUID: String? = nil
    ) {
        self.recordName = recordName
        self.recordType = recordType
        self.recordChangeTag = recordChangeTag
        self.created = created
        self.modified = modified
        self.parent = parent
        self.share = share
        self.zoneID = zoneID
        self.shortGUID = shortGUID
    }
}

/// A record: system fields plus typed fields.
///
/// ```swift
/// var drive = Record(header: header, fields: ["distance": .double(12_400), "name": .string("Commute")])
/// drive.fields["maxSpeed"] = .double(31.2)
/// ```
public struct Record: Sendable, Hashable {
    /// The system fields.
    public var header: RecordHeader
    /// The record's fields by name.
    public var fields: [String: FieldValue]

    /// Creates a record.
    public init(header: RecordHeader, fields: [String: FieldValue]) {
        self.header = header
        self.fields = fields
    }

    public var recordName: String { header.recordName }
    public var recordType: String { header.recordType }
    public var recordChangeTag: String { header.recordChangeTag }
}

/// How a record's fields are written into a response.
public enum RecordFieldsSource: Sendable {
    /// Canonical fields JSON, spliced into the response unchanged.
    case canonical([UInt8])
    /// Parsed fields.
    case values([String: FieldValue])
}

extension JSONWriter {
    /// Writes a record dictionary as CloudKit Web Services returns it.
    ///
    /// - Parameters:
    ///   - header: The system fields.
    ///   - fields: The fields, canonical or parsed.
    ///   - desiredKeys: When set, only these fields are written; `[]` writes system fields only.
    ///   - options: Number formatting.
    ///   - extra: Writes further keys (a share's `participants`, for example) before the dictionary closes.
    public mutating func record(
        header: RecordHeader, fields: RecordFieldsSource, desiredKeys: Set<String>? = nil, options: FieldWriteOptions = .init(),
        extra: ((inout JSONWriter) -> Void)? = nil
    ) {
        beginObject()
        key("recordName")
        string(header.recordName)
        key("recordType")
        string(header.recordType)
        key("recordChangeTag")
        string(header.recordChangeTag)
        key("fields")
        switch fields {
        case .canonical(let json)
        where desiredKeys == nil && !options.numbersAsStrings && !(options.assetDownloadURL != nil && Self.holdsAssets(json)):
            raw(json)
        case .canonical where desiredKeys?.isEmpty == true:
            // No field asked for (clients that need none back ask so): nothing to parse.
            beginObject()
            endObject()
        case .canonical(let json):
            var values = (try? RecordFieldsCoding.parseCanonical(json)) ?? [:]
            if let desiredKeys { values = values.filter { desiredKeys.contains($0.key) } }
            self.fields(values, options: options)
        case .values(var values):
            if let desiredKeys { values = values.filter { desiredKeys.contains($0.key) } }
            self.fields(values, options: options)
        }
        key("created")
        stamp(header.created)
        key("modified")
        stamp(header.modified)
        key("deleted")
        bool(false)
        key("zoneID")
        zoneID(header.zoneID)
        if let parent = header.parent {
            key("parent")
            recordNameObject(parent)
        }
        if let share = header.share {
            key("share")
            reference(share)
        }
        if let shortGUID = header.shortGUID {
            key("shortGUID")
            string(shortGUID)
        }
        extra?(&self)
        endObject()
    }

    /// Whether canonical fields hold an asset (its `"type":"ASSETID"` or `"ASSETID_LIST"`), which needs a download URL
    /// written into it.
    public static func holdsAssets(_ json: [UInt8]) -> Bool {
        // Every record of every page read passes here: memchr to each `A`, then one comparison, not a loop in Swift.
        let needle = Array(#""ASSETID"#.utf8)
        return json.withUnsafeBytes { bytes in
            guard let base = bytes.baseAddress, bytes.count >= needle.count else { return false }
            var offset = 1
            let last = bytes.count - needle.count + 1
            while offset <= last {
                guard let hit = memchr(base + offset, Int32(UInt8(ascii: "A")), last - offset + 1) else { return false }
                let start = base.distance(to: UnsafeRawPointer(hit)) - 1
                if memcmp(base + start, needle, needle.count) == 0 { return true }
                offset = start + 2
            }
            return false
        }
    }

    /// Writes a deleted record's tombstone: `{recordName, deleted: true}`.
    public mutating func tombstone(recordName: String, zoneID: ZoneID? = nil) {
        beginObject()
        key("recordName")
        string(recordName)
        key("deleted")
        bool(true)
        if let zoneID {
            key("zoneID")
            self.zoneID(zoneID)
        }
        endObject()
    }

    /// Writes `{"recordName": …}`, the form of `parent` and `forRecord`.
    public mutating func recordNameObject(_ recordName: String) {
        beginObject()
        key("recordName")
        string(recordName)
        endObject()
    }

    /// Writes a record of a share-a-copy snapshot: `{recordName, recordType, fields, parent?}`.
    public mutating func snapshotRecord(recordName: String, recordType: String, fields: [String: FieldValue], parent: String?) {
        beginObject()
        key("recordName")
        string(recordName)
        key("recordType")
        string(recordType)
        key("fields")
        self.fields(fields)
        if let parent {
            key("parent")
            recordNameObject(parent)
        }
        endObject()
    }

    /// Writes a `created` or `modified` dictionary.
    public mutating func stamp(_ stamp: RecordStamp) {
        beginObject()
        key("timestamp")
        int(stamp.timestamp)
        key("userRecordName")
        string(stamp.userRecordName)
        key("deviceID")
        string(stamp.deviceID)
        endObject()
    }
}

/// Canonical encoding of a fields dictionary: compact, keys sorted, every field with its `type`.
public enum RecordFieldsCoding {
    /// Encodes fields canonically.
    public static func canonical(_ fields: [String: FieldValue]) -> [UInt8] {
        var writer = JSONWriter(reservingCapacity: estimatedSize(of: fields.values.lazy.map(Optional.some)))
        writer.fields(fields)
        return writer.bytes
    }

    /// Room for a fields dictionary written out, so the writer's bytes seldom grow (and copy) while it writes: a field's
    /// frame and name about 64 bytes, and the long values their length.
    private static func estimatedSize(of values: some Sequence<FieldValue?>) -> Int {
        var size = 2
        for value in values {
            size += 64
            switch value {
            case .bytes(let data)?: size += data.count / 3 * 4 + 4
            case .string(let string)?: size += string.utf8.count
            default: break
            }
        }
        return size
    }

    /// Encodes the fields a request sent canonically, leaving out those it cleared: what ``canonical(_:)`` makes of the
    /// values that are set, without building that dictionary.
    public static func canonical(sent fields: [String: FieldValue?]) -> [UInt8] {
        var writer = JSONWriter(reservingCapacity: estimatedSize(of: fields.values))
        writer.fields(sent: fields)
        return writer.bytes
    }

    /// Parses canonical (or any well-formed) fields JSON.
    public static func parseCanonical(_ json: [UInt8]) throws -> [String: FieldValue] {
        let object = try WireObject(JSONValue(parsing: json), path: "fields")
        var fields: [String: FieldValue] = [:]
        fields.reserveCapacity(object.members.count)
        for (name, field) in object.members {
            if let value = try FieldValue.read(field: field, path: object.path(name)) { fields[name] = value }
        }
        return fields
    }
}
