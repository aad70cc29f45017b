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

    public init(recordType: String, recordID: RecordID = RecordID(), fields: [String: FieldValue] = [:], parent: String? = nil) {
        self.recordID = recordID
        self.recordType = recordType
        self.fields = fields
        self.parent = parent
    }

    public subscript(key: String) -> FieldValue? {
        get { fields[key] }
        set { fields[key] = newValue }
    }

    /// Reads a record dictionary from a response.
    public init(wire json: JSONValue) throws {
        let object = try WireObject(json, path: "record")
        recordID = RecordID(
            recordName: try object.requiredString("recordName"),
            zoneID: try object.object("zoneID").map { (zone) throws(WireFormatError) in try ZoneID(wire: zone) } ?? ZoneID()
        )
        recordType = try object.requiredString("recordType")
        recordChangeTag = try object.string("recordChangeTag")
        fields = [:]
        if let fieldsObject = try object.object("fields") {
            for (name, field) in fieldsObject.members {
                if let value = try FieldValue.read(field: field, path: fieldsObject.path(name)) { fields[name] = value }
            }
        }
        parent = try object.object("parent")?.string("recordName")
        share = try object.object("share")?.string("recordName")
        func stamp(_ key: String) throws -> RecordStamp? {
            guard let value = try object.object(key), case .number(let text)? = value["timestamp"], let timestamp = Int64(text) else { return nil }
            return RecordStamp(
                timestamp: timestamp, userRecordName: try value.string("userRecordName") ?? "", deviceID: try value.string("deviceID") ?? "")
        }
        created = try stamp("created")
        modified = try stamp("modified")
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
