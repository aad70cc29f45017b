public import CumulusModel
public import Logging

/// Zones and their records: writes, lookups, the change feeds and queries.
public protocol RecordZoneStore: Sendable {
    /// All live zones of a database, the default zone first.
    func zones(in database: DatabaseRef, logger: Logger) async throws -> [ZoneState]

    /// The live zones with these names; missing zones are absent from the result.
    func zones(named names: [String], in database: DatabaseRef, logger: Logger) async throws -> [String: ZoneState]

    /// Creates and deletes zones, in order. Creating an existing zone succeeds and returns it; deleting a zone deletes
    /// its records. A create that would leave the database with more than `maximumZones` live zones (its default zone
    /// among them) fails with `QUOTA_EXCEEDED`, whatever other transactions create at the same time.
    func modifyZones(_ operations: [ZoneOperation], in database: DatabaseRef, timestamp: Int64, maximumZones: Int, logger: Logger)
        async throws -> [ZoneModificationResult]

    /// The live records with these names in a zone. Throws ``StoreError/Code/zoneNotFound`` if the zone does not exist.
    /// With `access`, only records a participant may see are returned.
    func records(named names: [String], zoneName: String, in database: DatabaseRef, access: ParticipantAccess?, logger: Logger) async throws
        -> [String: StoredRecord]

    /// Applies a `records/modify` batch in one transaction. Throws ``StoreError/Code/zoneNotFound`` if the zone does not
    /// exist; per-operation failures are results, not errors.
    func modifyRecords(_ batch: RecordBatch, logger: Logger) async throws -> [RecordModificationResult]

    /// Zones of a database changed or deleted after a position of its change feed.
    func databaseChanges(in database: DatabaseRef, after sequence: Int64, limit: Int, logger: Logger) async throws -> DatabaseChangePage

    /// Records of a zone changed or deleted after a position of its change feed. Throws ``StoreError/Code/zoneNotFound``
    /// if the zone does not exist, and ``StoreError/Code/invalidState`` if it is not the incarnation the position
    /// belongs to (it was deleted and created again).
    func zoneChanges(_ request: ZoneChangeRequest, logger: Logger) async throws -> ZoneChangePage

    /// Scans the live records of a zone whose names fall in `range`, in name order (as a participant sees them, with
    /// `access`), in one read. Throws ``StoreError/Code/zoneNotFound`` if the zone does not exist.
    func scanRecords<Scan: RecordSequenceScan>(
        _ scan: Scan, in range: RecordNameRange, zoneName: String, database: DatabaseRef, access: ParticipantAccess?, logger: Logger
    ) async throws -> Scan

    /// Computes zones' digests from their records and stores those that differ from the stored ones (`unknownOnly`:
    /// only those never computed), each zone under its writers' lock. Answers the zones it set right.
    func refreshZoneDigests(unknownOnly: Bool, logger: Logger) async throws -> [ZoneDigestRepair]

    /// The zones whose stored digest differs from the digest of their records, each compared under its writers' lock;
    /// nothing is changed (`cumulus doctor`).
    func driftedZoneDigests(logger: Logger) async throws -> [ZoneDigestRepair]

    /// One page of records matching a query. Throws ``StoreError/Code/zoneNotFound`` if the zone does not exist.
    func queryRecords(_ query: RecordQuery, logger: Logger) async throws -> RecordQueryPage
}

extension RecordZoneStore {
    /// Creates and deletes zones, in order, with no limit on their number: for tools and tests. The service passes its
    /// limit (`Limits.maximumZones`).
    public func modifyZones(_ operations: [ZoneOperation], in database: DatabaseRef, timestamp: Int64, logger: Logger) async throws
        -> [ZoneModificationResult]
    {
        try await modifyZones(operations, in: database, timestamp: timestamp, maximumZones: .max, logger: logger)
    }
}
