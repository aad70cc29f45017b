public import CumulusModel
public import Logging

/// The versions records had before a write replaced or deleted them (issue 37), kept for the operator's retention
/// window: what a zone restore and an undelete read.
///
/// A version enters the history in the transaction of the write that replaces it (``StoreAction/keepVersions(zone:names:replacedAt:)``,
/// when ``RecordBatch/keepsHistory``); it was the record from its modification time until `replacedAt`.
public protocol RecordHistoryStore: Sendable {
    /// The records of a zone that changed after `time`, among the next `limit` record names after `after` (in the byte
    /// order of their names): each with its live version now and the version it had at `time` (`nil` where it was not
    /// live then). A page walks a fixed number of names, so it costs the same anywhere in a large zone; it may hold
    /// none that changed while more follow. Throws `zoneNotFound` for a zone that is not live.
    func recordsChanged(
        since time: Int64, zoneName: String, in database: DatabaseRef, after: String?, limit: Int, logger: Logger
    ) async throws -> RecordChangesSincePage

    /// Records of a zone deleted at or after `since` and not written again, newest deletion first: each as its last
    /// version before the deletion, for undelete. `names` narrows the answer to those records.
    func deletedRecords(
        since: Int64, zoneName: String, in database: DatabaseRef, names: [String]?, limit: Int, logger: Logger
    ) async throws -> [DeletedRecord]

    /// Every version a zone keeps, in the byte order of record names and then by when each was replaced, at most
    /// `limit` after `after` (a record name and a replacement time, from the last page): what a user's export carries.
    /// Throws `zoneNotFound` for a zone that is not live.
    func keptVersions(
        zoneName: String, in database: DatabaseRef, after: KeptVersion.Position?, limit: Int, logger: Logger
    ) async throws -> [KeptVersion]

    /// Drops the versions replaced before `time`, in steps that keep each transaction short; answers how many.
    func pruneHistory(replacedBefore time: Int64, logger: Logger) async throws -> Int
}

/// A page of ``RecordHistoryStore/recordsChanged(since:zoneName:in:after:limit:logger:)``.
public struct RecordChangesSincePage: Sendable, Hashable {
    public var changes: [RecordChangeSince]
    /// Where the next page starts, or `nil` after the zone's last record.
    public var next: String?

    public init(changes: [RecordChangeSince], next: String?) {
        self.changes = changes
        self.next = next
    }

    /// Names in the byte order of their UTF-8, as both stores order them.
    public static func byteOrder(_ names: some Sequence<String>) -> [String] {
        names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }
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

/// A version a zone keeps: the record as it was until `replacedAt`, when a write replaced it, or a deletion removed it.
public struct KeptVersion: Sendable, Hashable {
    /// Where a version stands in ``RecordHistoryStore/keptVersions(zoneName:in:after:limit:logger:)``'s order.
    public struct Position: Sendable, Hashable {
        public var recordName: String
        public var replacedAt: Int64

        public init(recordName: String, replacedAt: Int64) {
            self.recordName = recordName
            self.replacedAt = replacedAt
        }
    }

    public var record: StoredRecord
    public var replacedAt: Int64
    /// Whether a deletion replaced it (the record is deleted since).
    public var deleted: Bool

    public init(record: StoredRecord, replacedAt: Int64, deleted: Bool) {
        self.record = record
        self.replacedAt = replacedAt
        self.deleted = deleted
    }

    public var position: Position { Position(recordName: record.header.recordName, replacedAt: replacedAt) }
}
