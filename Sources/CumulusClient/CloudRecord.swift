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

    /// A record as a response carries it.
    public init(_ record: ResponseRecord) {
        let header = record.header
        self.init(
            recordType: header.recordType, recordID: RecordID(recordName: header.recordName, zoneID: header.zoneID), fields: record.fieldValues,
            parent: header.parent)
        recordChangeTag = header.recordChangeTag.isEmpty ? nil : header.recordChangeTag
        share = header.share?.recordName
        // A record read without stamps has empty ones.
        created = header.created.timestamp == 0 && header.created.userRecordName.isEmpty ? nil : header.created
        modified = header.modified.timestamp == 0 && header.modified.userRecordName.isEmpty ? nil : header.modified
    }

    /// Reads a record dictionary from a response.
    public init(wire json: JSONValue) throws {
        guard case .record(let record) = try JSONScanner.scan(json.jsonBytes, { try RecordResult.read(scanning: &$0) }) else {
            throw WireFormatError(path: "record.recordType", message: "is required")
        }
        self.init(record)
    }

    /// The record dictionary a save sends: every field, and the parent (cleared when there is none).
    var draft: RecordDraft {
        RecordDraft(
            recordName: recordID.recordName, recordType: recordType, recordChangeTag: recordChangeTag, fields: fields.mapValues { .some($0) },
            parent: parent.map(FieldPatch.set) ?? .clear)
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
