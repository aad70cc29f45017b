public import CumulusModel
public import Logging

/// The versions records had before a write replaced or deleted them (issue 37), kept for the operator's retention
/// window: what a zone restore and an undelete read.
///
/// A version enters the history in the transaction of the write that replaces it (``StoreAction/keepVersions(zone:names:replacedAt:)``,
/// when ``RecordBatch/keepsHistory``); it was the record from its modification time until `replacedAt`.
public protocol RecordHistoryStore: Sendable {
    /// The records of a zone that changed after `time`, in the byte order of their names after `after`: each with its
    /// live version now and the version it had at `time` (`nil` where it was not live then). Throws `zoneNotFound`
    /// for a zone that is not live.
    func recordsChanged(
        since time: Int64, zoneName: String, in database: DatabaseRef, after: String?, limit: Int, logger: Logger
    ) async throws -> [RecordChangeSince]

    /// Records of a zone deleted at or after `since` and not written again, newest deletion first: each as its last
    /// version before the deletion, for undelete. `names` narrows the answer to those records.
    func deletedRecords(
        since: Int64, zoneName: String, in database: DatabaseRef, names: [String]?, limit: Int, logger: Logger
    ) async throws -> [DeletedRecord]

    /// Drops the versions replaced before `time`, in steps that keep each transaction short; answers how many.
    func pruneHistory(replacedBefore time: Int64, logger: Logger) async throws -> Int
}

/// One record of a zone that changed since a moment: what it is now and what it was then.
public struct RecordChangeSince: Sendable, Hashable {
    public var recordName: String
    /// The live record now, or `nil` if it is deleted.
    public var current: StoredRecord?
    /// The record as it was at the moment, or `nil` if it did not exist or was deleted then.
    public var past: StoredRecord?

    public init(recordName: String, current: StoredRecord?, past: StoredRecord?) {
        self.recordName = recordName
        self.current = current
        self.past = past
    }
}

/// A deleted record, as its last version before the deletion.
public struct DeletedRecord: Sendable, Hashable {
    public var record: StoredRecord
    /// When it was deleted (milliseconds), and by whom.
    public var deleted: RecordStamp

    public init(record: StoredRecord, deleted: RecordStamp) {
        self.record = record
        self.deleted = deleted
    }
}
