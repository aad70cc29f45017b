public import CumulusModel

/// A value of a sort key, as the store compares it; used to resume a query after a row.
public enum QueryKeyValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
}

/// Where a query page ends: the sort key values and the store's row identity of its last record.
public struct QueryCursor: Sendable, Hashable {
    public var keys: [QueryKeyValue]
    public var rowID: Int64

    public init(keys: [QueryKeyValue], rowID: Int64) {
        self.keys = keys
        self.rowID = rowID
    }
}

/// A validated `records/query`, ready for a store.
public struct RecordQuery: Sendable, Hashable {
    public var database: DatabaseRef
    /// The zone to search; `nil` searches every zone of the database (`zoneWide`).
    public var zoneName: String?
    public var recordType: String
    public var filters: [QueryFilter]
    public var sorts: [QuerySort]
    public var limit: Int
    /// Resume after this row.
    public var after: QueryCursor?
    /// Set when a participant queries: only what their shares cover.
    public var access: ParticipantAccess?
    /// Whether the store may make a missing field index for this query (within its cap, for fields records hold).
    /// Not for anonymous callers, who are anyone holding the app's API token: their queries use the indexes there are.
    public var createsIndexes: Bool
    /// Whether the query's fields are declared `QUERYABLE`/`SORTABLE` in its container's production schema: their
    /// indexes are made past the development budget (``FieldIndexBudget``).
    public var indexesRequired: Bool

    public init(
        database: DatabaseRef, zoneName: String?, recordType: String, filters: [QueryFilter], sorts: [QuerySort], limit: Int,
        after: QueryCursor? = nil, access: ParticipantAccess? = nil, createsIndexes: Bool = true, indexesRequired: Bool = false
    ) {
        self.indexesRequired = indexesRequired
        self.database = database
        self.zoneName = zoneName
        self.recordType = recordType
        self.filters = filters
        self.sorts = sorts
        self.limit = limit
        self.after = after
        self.access = access
        self.createsIndexes = createsIndexes
    }
}

/// One page of query results.
public struct RecordQueryPage: Sendable, Hashable {
    public var records: [StoredRecord]
    /// Where to resume; `nil` when there are no more results.
    public var cursor: QueryCursor?

    public init(records: [StoredRecord], cursor: QueryCursor?) {
        self.records = records
        self.cursor = cursor
    }
}
