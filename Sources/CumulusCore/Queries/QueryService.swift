public import CumulusModel
public import CumulusStore
public import Logging

/// The response to `records/query`.
public struct RecordsQueryResponse: Sendable {
    public var records: [StoredRecord]
    public var continuationMarker: String?
    public var desiredKeys: Set<String>?
    public var numbersAsStrings: Bool
    /// The shares behind share records in ``records``, by record name.
    public var shares: [String: ShareState] = [:]
}

/// `records/query`: records of a type matching filters, sorted, a page at a time, in one zone or a whole database.
public struct QueryService: Sendable, WriteHealthReporting {
    let store: any RecordZoneStore
    let policy: AuthorizationPolicy
    let limits: Limits
    let clock: WallClock
    let writeHealth: WriteHealth
    let secrets: TokenSecrets
    let zones: ZoneAccess
    /// Which fields are indexed, and which a query may index.
    let schemas: SchemaService
    /// The shares behind share records in a page.
    let shares: ShareService

    /// `records/query`: records of a type matching filters, sorted, a page at a time.
    public func query(caller: Caller, scope: DatabaseScope, request: RecordsQueryRequest, logger: Logger) async throws -> RecordsQueryResponse {
        var database = try policy.database(for: caller, scope: scope, access: .read)
        // Shares can be queried by their system type, in either spelling, as any other type.
        let recordType = ShareRecord.isShareType(request.recordType) ? ShareRecord.recordType : request.recordType
        if recordType != ShareRecord.recordType {
            try NameRules.checkIdentifier(recordType, kind: "record type", path: "query.recordType", limits: limits)
        }
        var zoneName: String?
        var access: ParticipantAccess?
        if scope == .shared {
            if request.zoneWide { throw CumulusError(.badRequest, "zoneWide: not available in the shared database; query one shared zone") }
            let zone: String
            (database, zone, access) = try await zones.sharedZone(caller: caller, zoneID: request.zoneID, logger: logger)
            zoneName = zone
        } else {
            zoneName = request.zoneWide ? nil : try policy.zoneName(request.zoneID, in: database)
        }
        if request.filters.count > limits.maximumQueryFilters {
            throw CumulusError(
                .badRequest, "query.filterBy: \(request.filters.count) filters; the limit is \(limits.maximumQueryFilters) per query")
        }
        if request.sorts.count > limits.maximumQuerySorts {
            throw CumulusError(.badRequest, "query.sortBy: \(request.sorts.count) sorts; the limit is \(limits.maximumQuerySorts) per query")
        }
        for (index, filter) in request.filters.enumerated() {
            try Self.validate(filter, path: "query.filterBy[\(index)]", limits: limits)
        }
        for (index, sort) in request.sorts.enumerated() {
            if case .field(let name) = sort.field {
                try NameRules.checkIdentifier(name, kind: "field name", path: "query.sortBy[\(index)].fieldName", limits: limits)
            }
        }
        do {
            _ = try QueryPlan(filters: request.filters, sorts: request.sorts)
        } catch {
            throw CumulusError(.badRequest, error.description)
        }
        var limit = limits.maximumResultsLimit
        if let requested = request.resultsLimit {
            guard requested > 0 else { throw CumulusError(.badRequest, "resultsLimit: must be at least 1") }
            limit = min(requested, limits.maximumResultsLimit)
        }
        let createsIndexes = try await schemas.checkQuerySchema(
            request, recordType: recordType, caller: caller, database: database, scope: scope, logger: logger)
        let codec = try await secrets.codec(logger: logger)
        let fingerprint = "\(database)|\(zoneName ?? "*")|\(recordType)|\(request.filters)|\(request.sorts)"
        let cursor = try request.continuationMarker.map { (marker) throws(CumulusError) in
            try codec.decodeContinuationMarker(marker, fingerprint: fingerprint)
        }
        let page = try await mapStoreErrors {
            try await store.queryRecords(
                RecordQuery(
                    database: database, zoneName: zoneName, recordType: recordType, filters: request.filters, sorts: request.sorts,
                    limit: limit, after: cursor, access: access, createsIndexes: createsIndexes,
                    // Production's fields are declared by a deploy: their indexes are made whatever development holds.
                    indexesRequired: createsIndexes && database.environment == .production
                ),
                logger: logger
            )
        }
        var shares: [String: ShareState] = [:]
        if let zoneName {
            shares = try await self.shares.states(for: page.records, database: database, zoneName: zoneName, logger: logger)
        } else {
            for (zoneName, records) in Dictionary(grouping: page.records, by: \.header.zoneID.zoneName) {
                shares.merge(try await self.shares.states(for: records, database: database, zoneName: zoneName, logger: logger)) { first, _ in first }
            }
        }
        return RecordsQueryResponse(
            records: page.records, continuationMarker: page.cursor.map { codec.continuationMarker($0, fingerprint: fingerprint) },
            desiredKeys: request.desiredKeys.map(Set.init), numbersAsStrings: request.numbersAsStrings, shares: shares
        )
    }

    /// Checks a filter's field name; what the filter may compare is ``QueryPlan``'s to say.
    static func validate(_ filter: QueryFilter, path: String, limits: Limits) throws(CumulusError) {
        if case .field(let name) = filter.field {
            try NameRules.checkIdentifier(name, kind: "field name", path: "\(path).fieldName", limits: limits)
        }
    }
}
