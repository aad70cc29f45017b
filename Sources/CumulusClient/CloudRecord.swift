public import CumulusModel
public import Foundation

/// Identifies a record: its name and zone.
public struct RecordID: Sendable, Hashable, CustomStringConvertible {
    public var recordName: String
    public var zoneID: ZoneID

    public init(recordName: String = UUID().uuidString, zoneID: ZoneID = ZoneID()) {
        self.recordName = recordName
        self.zoneID = zoneID
    }

    public var description: String { "\(recordName)@\(zoneID)" }
}

/// A record on the client, shaped like CKRecord: an ID, a type, fields, and the system fields the server last gave it.
public struct CloudRecord: Sendable, Hashable {
    public var recordID: RecordID
    public var recordType: String
    public var fields: [String: FieldValue]
    /// The server's change tag; `nil` for a record never saved.
    public var recordChangeTag: String?
    /// The parent record name (same zone): shares follow it.
    public var parent: String?
    /// The name of the share this record is the root of (same zone), as the server reports it; saving never sets it.
    public var share: String?
    public var created: RecordStamp?
    public var modified: RecordStamp?
    /// Local files to upload into `ASSETID` fields when the record is saved (``setAsset(fileAt:forKey:)``), by field.
    public var assetFiles: [String: URL] = [:]
    /// Where a sync engine that downloads on fetch put the record's assets, by field
    /// (``SyncEngine/AssetDownloads/onFetch(directory:)``). Never sent.
    public var downloadedAssets: [String: URL] = [:]

    public init(recordType: String, recordID: RecordID = RecordID(), fields: [String: FieldValue] = [:], parent: String? = nil) {
        self.recordID = recordID
        self.recordType = recordType
        self.fields = fields
        self.parent = parent
    }

    /// A field's local file to upload, as `CKRecord`'s subscript takes a `CKAsset`: setting one is
    /// ``setAsset(fileAt:forKey:)``; `nil` removes the file and the field.
    public subscript(asset key: String) -> CloudAsset? {
        get { assetFiles[key].map(CloudAsset.init(fileURL:)) }
        set {
            if let newValue {
                setAsset(fileAt: newValue.fileURL, forKey: key)
            } else {
                assetFiles[key] = nil
                fields[key] = nil
            }
        }
    }

    /// Sets a field to a local file, as a `CKAsset` is: ``CloudDatabase/modifyRecords(saving:deleting:zoneID:atomic:)``
    /// (and so the sync engine) uploads it before saving the record, and the field then holds the uploaded asset.
    public mutating func setAsset(fileAt file: URL, forKey key: String) {
        assetFiles[key] = file
        fields[key] = nil
    }

    /// The asset a field holds, with its `downloadURL` when the record was fetched; ``CloudDatabase/downloadAsset(_:to:)``
    /// fetches its bytes.
    public func asset(forKey key: String) -> Asset? {
        if case .asset(let asset)? = fields[key] { return asset }
        return nil
    }

    public subscript(key: String) -> FieldValue? {
        get { fields[key] }
        set { fields[key] = newValue }
    }

    /// Reads a record dictionary from a response.
    public init(wire json: JSONValue) throws {
        guard case .record(let record) = try JSONScanner.scan(json.jsonBytes, { scanner in try Self.readItem(scanning: &scanner) }) else {
            throw WireFormatError(path: "record.recordType", message: "is required")
        }
        self = record
    }

    /// An element of a response's records array: a record, or a tombstone (`deleted: true`).
    enum WireItem {
        case record(CloudRecord)
        case deleted(recordName: String, recordType: String?)
    }

    /// Reads an element of a records array straight from the response's bytes: the change feed's hot path.
    static func readItem(scanning scanner: inout JSONScanner) throws -> WireItem {
        var recordName: String?
        var recordType: String?
        var deleted = false
        var zoneID: ZoneID?
        var record = CloudRecord(recordType: "", recordID: RecordID(recordName: "", zoneID: ZoneID()))
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            switch key {
            case "recordName": recordName = try scanner.readString()
            case "recordType": recordType = try scanner.readNull() ? nil : try scanner.readString()
            case "recordChangeTag": record.recordChangeTag = try scanner.readNull() ? nil : try scanner.readString()
            case "deleted": deleted = try scanner.readValue() == .bool(true)
            case "zoneID": zoneID = try ZoneID(wire: WireObject(try scanner.readValue(), path: "record.zoneID"))
            case "fields": try readFields(scanning: &scanner, into: &record.fields)
            case "parent": record.parent = try readRecordName(scanning: &scanner)
            case "share": record.share = try readRecordName(scanning: &scanner)
            case "created": record.created = try readStamp(scanning: &scanner)
            case "modified": record.modified = try readStamp(scanning: &scanner)
            default: try scanner.skipValue()
            }
        }
        guard let recordName else { throw WireFormatError(path: "record.recordName", message: "is required") }
        if deleted { return .deleted(recordName: recordName, recordType: recordType) }
        guard let recordType else { throw WireFormatError(path: "record.recordType", message: "is required") }
        record.recordID = RecordID(recordName: recordName, zoneID: zoneID ?? ZoneID())
        record.recordType = recordType
        return .record(record)
    }

    private static func readFields(scanning scanner: inout JSONScanner, into fields: inout [String: FieldValue]) throws {
        guard try !scanner.readNull() else { return }
        try scanner.beginObject()
        while let name = try scanner.nextKey() {
            if let value = try FieldValue.read(scanning: &scanner, path: "record.fields.\(name)") { fields[name] = value }
        }
    }

    /// The `recordName` of a `parent` or `share` dictionary.
    private static func readRecordName(scanning scanner: inout JSONScanner) throws -> String? {
        guard try !scanner.readNull() else { return nil }
        var recordName: String?
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            if key == "recordName", try !scanner.readNull() { recordName = try scanner.readString() } else { try scanner.skipValue() }
        }
        return recordName
    }

    private static func readStamp(scanning scanner: inout JSONScanner) throws -> RecordStamp? {
        guard try !scanner.readNull() else { return nil }
        var timestamp: Int64?
        var userRecordName = ""
        var deviceID = ""
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            switch (key, try scanner.peek()) {
            case ("timestamp", .number): timestamp = Int64(try scanner.readNumber())
            case ("userRecordName", .string): userRecordName = try scanner.readString()
            case ("deviceID", .string): deviceID = try scanner.readString()
            default: try scanner.skipValue()
            }
        }
        return timestamp.map { RecordStamp(timestamp: $0, userRecordName: userRecordName, deviceID: deviceID) }
    }

    /// Writes the record dictionary of a `records/modify` operation.
    func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("recordName")
        writer.string(recordID.recordName)
        writer.key("recordType")
        writer.string(recordType)
        if let recordChangeTag {
            writer.key("recordChangeTag")
            writer.string(recordChangeTag)
        }
        writer.key("fields")
        writer.fields(fields)
        writer.key("parent")
        if let parent {
            writer.recordNameObject(parent)
        } else {
            writer.null()
        }
        writer.endObject()
    }
}

/// A local file for a record's `ASSETID` field, as `CKAsset` is: `record[asset: "photo"] = CloudAsset(fileURL: url)`.
/// Saving the record uploads it; a fetched record's field then holds the uploaded ``Asset``, with its `downloadURL`.
public struct CloudAsset: Sendable, Hashable {
    public var fileURL: URL

    public init(fileURL: URL) {
        self.fileURL = fileURL
    }
}
