/// Limits Cumulus enforces, defaulting to CloudKit Web Services' documented numbers.
public struct Limits: Sendable, Hashable {
    /// Operations in one `records/modify` or `zones/modify` request, and records in one `records/lookup`.
    public var maximumOperationsPerRequest: Int
    /// Size of one record's fields, canonically encoded, assets excluded.
    public var maximumRecordSize: Int
    /// Size of a request body.
    public var maximumRequestBodySize: Int
    /// Length of zone, record, record type and field names.
    public var maximumNameLength: Int
    /// Records per page of change feeds and queries (`resultsLimit` is capped here).
    public var maximumResultsLimit: Int
    /// Participants of a share, the owner aside.
    public var maximumShareParticipants: Int
    /// Filters (`filterBy`) in one query.
    public var maximumQueryFilters: Int
    /// Sort descriptors (`sortBy`) in one query.
    public var maximumQuerySorts: Int
    /// Subscriptions a user may have in one database.
    public var maximumSubscriptions: Int
    /// Live zones in one database, its default zone among them. What a zone costs grows with their number for its owner
    /// alone (the database's change feed, each look of a device watching the whole database), so this bounds what one
    /// account can make the server do for it; a zone deleted no longer counts.
    public var maximumZones: Int
    /// Values (objects, arrays, strings, numbers, booleans, nulls) in one request body, counted while it is parsed: what
    /// bounds the parsed tree's memory for any body (see `docs/SECURITY.md`).
    public var maximumJSONValues: Int
    /// Nesting of objects and arrays in one request body.
    public var maximumJSONDepth: Int
    /// Indexed (queryable or sortable) fields a container's development schema may gain from queries, over all its
    /// record types. Past it, a query on a field without an index is refused; a deployed schema is not bound by it.
    public var maximumIndexedFieldsPerContainer: Int
    /// Record types and fields, counted together, a container's development schema may grow to from writes.
    public var maximumSchemaSize: Int

    public init(
        maximumOperationsPerRequest: Int = 200, maximumRecordSize: Int = 1_000_000, maximumRequestBodySize: Int = 16 * 1024 * 1024,
        maximumNameLength: Int = 255, maximumResultsLimit: Int = 200, maximumShareParticipants: Int = 100, maximumQueryFilters: Int = 32,
        maximumQuerySorts: Int = 8, maximumSubscriptions: Int = 100, maximumZones: Int = 10_000, maximumJSONValues: Int = 1_000_000,
        maximumJSONDepth: Int = 64, maximumIndexedFieldsPerContainer: Int = 64, maximumSchemaSize: Int = 10_000
    ) {
        self.maximumOperationsPerRequest = maximumOperationsPerRequest
        self.maximumRecordSize = maximumRecordSize
        self.maximumRequestBodySize = maximumRequestBodySize
        self.maximumNameLength = maximumNameLength
        self.maximumResultsLimit = maximumResultsLimit
        self.maximumShareParticipants = maximumShareParticipants
        self.maximumQueryFilters = maximumQueryFilters
        self.maximumQuerySorts = maximumQuerySorts
        self.maximumSubscriptions = maximumSubscriptions
        self.maximumZones = maximumZones
        self.maximumJSONValues = maximumJSONValues
        self.maximumJSONDepth = maximumJSONDepth
        self.maximumIndexedFieldsPerContainer = maximumIndexedFieldsPerContainer
        self.maximumSchemaSize = maximumSchemaSize
    }
}

extension Limits {
    /// Refuses a request listing more items than one request may, naming the list.
    func checkCount(_ count: Int, path: String) throws(CumulusError) {
        if count > maximumOperationsPerRequest {
            throw CumulusError(.badRequest, "\(path): \(count) items; the limit is \(maximumOperationsPerRequest) per request")
        }
    }
}
