import CumulusModel

/// What happened to one record of a zone since a moment, as a restore to that moment undoes it (issue 37): the rule,
/// written once, that turns a zone's history into ordinary changes with new change tags, which devices fetch from
/// their feeds like any other.
public enum RestoreDifference: Sendable, Hashable {
    /// Changed since: comes back as it was (this version).
    case changed(StoredRecord)
    /// Deleted since: comes back as it was (this version).
    case deleted(StoredRecord)
    /// Created since (or deleted then and brought back since): is deleted.
    case created(recordName: String)

    /// The difference between a record then and now, or `nil` when there is nothing to undo: it is as it was (changed
    /// and changed back), it did not exist at either time, or it is a share record (a restore brings back data, not who
    /// it was shared with; a share ended since stays ended).
    public static func between(_ change: RecordChangeSince) -> RestoreDifference? {
        let isShare = { (record: StoredRecord?) in record?.header.recordType == ShareRecord.recordType }
        guard !isShare(change.past), !isShare(change.current) else { return nil }
        switch (change.past, change.current) {
        case (nil, nil):
            return nil
        case (nil, .some):
            return .created(recordName: change.recordName)
        case (let past?, nil):
            return .deleted(past)
        case (let past?, let current?):
            let same =
                past.header.recordType == current.header.recordType && past.header.parent == current.header.parent
                && past.fieldsJSON == current.fieldsJSON
            return same ? nil : .changed(past)
        }
    }

    public var recordName: String {
        switch self {
        case .changed(let record), .deleted(let record): record.header.recordName
        case .created(let name): name
        }
    }

    /// The operation that undoes it: a `forceReplace` with the version's type, fields and parent (creating the record
    /// if it is deleted), or a `forceDelete`.
    public func modification() throws -> RecordModification {
        switch self {
        case .changed(let record), .deleted(let record):
            return RecordModification(
                operationType: .forceReplace, recordName: record.header.recordName, recordType: record.header.recordType,
                fields: try record.fields().mapValues { Optional($0) }, parent: record.header.parent.map { .set($0) } ?? .clear,
                sentFieldsJSON: record.fieldsJSON)
        case .created(let name):
            return RecordModification(operationType: .forceDelete, recordName: name)
        }
    }
}
