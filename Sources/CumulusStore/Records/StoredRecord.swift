public import CumulusModel

/// A stored record: system fields plus canonical fields JSON.
public struct StoredRecord: Sendable, Hashable {
    public var header: RecordHeader
    /// The fields as canonical JSON (see `RecordFieldsCoding`).
    public var fieldsJSON: [UInt8]
    /// The zone change sequence of the record's last write.
    public var changeSequence: Int64

    public init(header: RecordHeader, fieldsJSON: [UInt8], changeSequence: Int64) {
        self.header = header
        self.fieldsJSON = fieldsJSON
        self.changeSequence = changeSequence
    }

    /// The parsed fields.
    public func fields() throws -> [String: FieldValue] {
        try RecordFieldsCoding.parseCanonical(fieldsJSON)
    }
}
