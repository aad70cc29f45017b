public import CumulusModel
public import CumulusStore
import GRDB
public import Logging

// MARK: - Zone digests

extension SQLiteRecordStore {
    /// The `SET` list that adds a change to a zone's digest, lane by lane modulo 2³², with no read of the zone first:
    /// eight lanes, then the change of the record count.
    static let digestAdjustment =
        (0..<8).map { "digest_\($0) = (digest_\($0) + ?) & 4294967295" }.joined(separator: ", ") + ", record_count = record_count + ?"

    /// The SET list that empties a zone's digest.
    static let emptyDigest = (0..<8).map { "digest_\($0) = 0" }.joined(separator: ", ") + ", record_count = 0"

    /// The arguments of ``digestAdjustment``.
    static func digestArguments(_ change: ZoneDigest) -> StatementArguments {
        var arguments = StatementArguments(change.lanes.map { Int64($0) })
        _ = arguments.append(contentsOf: [change.recordCount])
        return arguments
    }

    /// Adds a change to a zone's stored digest.
    static func adjustZoneDigest(_ db: Database, zone: Int64, by change: ZoneDigest) throws {
        guard change != .empty else { return }
        var arguments = digestArguments(change)
        _ = arguments.append(contentsOf: [zone])
        try db.cachedStatement(sql: "UPDATE zones SET \(digestAdjustment) WHERE id = ?").execute(arguments: arguments)
    }

    /// The change sequences of the live records among `names`: what an action that changes them replaces.
    static func liveSequences(_ db: Database, zone: Int64, names: [String]) throws -> [String: Int64] {
        var sequences: [String: Int64] = [:]
        if names.count == 1 {
            if let sequence = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT change_seq FROM records WHERE zone_id = ? AND record_name = ? AND deleted = 0"),
                arguments: [zone, names[0]])
            {
                sequences[names[0]] = sequence
            }
            return sequences
        }
        let rows = try Row.fetchCursor(
            db.cachedStatement(
                sql:
                    "SELECT record_name, change_seq FROM records WHERE zone_id = ? AND record_name IN (SELECT value FROM json_each(?)) AND deleted = 0"
            ),
            arguments: [zone, names.jsonArray])
        while let row = try rows.next() { sequences[row[0]] = row[1] }
        return sequences
    }

    /// The zone's stored digest; `nil` until it is computed.
    static func storedDigest(_ db: Database, zone: Int64) throws -> ZoneDigest? {
        let columns = (0..<8).map { "digest_\($0)" }.joined(separator: ", ")
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT \(columns), record_count FROM zones WHERE id = ?"), arguments: [zone]),
            let count = row[8] as Int64?
        else { return nil }
        return ZoneDigest(lanes: (0..<8).map { UInt32(truncatingIfNeeded: row[$0] as Int64) }, recordCount: count)
    }

    /// Runs a scan over the live records of a zone in `range`, as `access` lets its participant see them.
    ///
    /// A bound is written into the statement only when the range has it: `(? IS NULL OR record_name >= ?)` hides the
    /// bound from SQLite's planner, which then reads the whole zone for every range (a reconciliation of 64 empty
    /// ranges read a 50,000-record zone 64 times). So each of the four shapes is its own cached statement, and reads
    /// only its range of the zone's key.
    static func scan<Scan: RecordSequenceScan>(
        _ scan: Scan, _ db: Database, zone: Int64, range: RecordNameRange, access: ParticipantAccess?
    ) throws -> Scan {
        var scan = scan
        var prefix = ""
        var arguments: StatementArguments = []
        if let access, !access.zoneWide {
            prefix = """
                WITH RECURSIVE tree(name) AS (
                    SELECT value FROM json_each(?)
                    UNION SELECT r.record_name FROM records r JOIN tree ON r.zone_id = ? AND r.parent_name = tree.name
                )

                """
            _ = arguments.append(contentsOf: [Array(access.roots).jsonArray, zone])
        }
        var condition = "r.zone_id = ? AND r.deleted = 0"
        _ = arguments.append(contentsOf: [zone])
        if let lower = range.lowerBound {
            condition += " AND r.record_name >= ?"
            _ = arguments.append(contentsOf: [lower])
        }
        if let upper = range.upperBound {
            condition += " AND r.record_name < ?"
            _ = arguments.append(contentsOf: [upper])
        }
        if let access, !access.zoneWide {
            condition += " AND (r.record_name IN (SELECT name FROM tree) OR r.record_name IN (SELECT value FROM json_each(?)))"
            _ = arguments.append(contentsOf: [Array(access.shareRecordNames).jsonArray])
        }
        let count = try Int.fetchOne(db.cachedStatement(sql: "\(prefix)SELECT count(*) FROM records r WHERE \(condition)"), arguments: arguments) ?? 0
        scan.begin(count: count)
        let rows = try Row.fetchCursor(
            db.cachedStatement(sql: "\(prefix)SELECT r.record_name, r.change_seq FROM records r WHERE \(condition) ORDER BY r.record_name"),
            arguments: arguments)
        while let row = try rows.next() { scan.add(recordName: row[0], changeSequence: row[1]) }
        return scan
    }

    /// Computes the digests of live zones from their records and stores those that differ (or, `unknownOnly`, only
    /// those never computed), in the transaction `db` is in.
    static func refreshZoneDigests(_ db: Database, unknownOnly: Bool, zone only: Int64? = nil, settingRight: Bool = true) throws
        -> [ZoneDigestRepair]
    {
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT z.id, z.zone_name, d.container_id, d.environment, d.scope, d.owner_record_name FROM zones z
                JOIN databases d ON d.id = z.database_id
                WHERE z.deleted = 0 AND (?1 = 0 OR z.record_count IS NULL) AND (?2 IS NULL OR z.id = ?2)
                ORDER BY z.id
                """, arguments: [unknownOnly, only])
        var repairs: [ZoneDigestRepair] = []
        for row in rows {
            let zone: Int64 = row[0]
            let computed = try scan(DigestScan(), db, zone: zone, range: .all, access: nil).digest
            let stored = try storedDigest(db, zone: zone)
            guard stored != computed else { continue }
            if settingRight {
                var arguments = StatementArguments(computed.lanes.map { Int64($0) })
                _ = arguments.append(contentsOf: [computed.recordCount, zone])
                try db.execute(
                    sql: "UPDATE zones SET \((0..<8).map { "digest_\($0) = ?" }.joined(separator: ", ")), record_count = ? WHERE id = ?",
                    arguments: arguments)
            }
            let database = DatabaseRef(
                container: row[2], environment: ContainerEnvironment(rawValue: row[3]) ?? .development,
                scope: DatabaseScope(rawValue: row[4]) ?? .private,
                ownerRecordName: row[5])
            repairs.append(ZoneDigestRepair(database: database, zoneName: row[1], stored: stored, computed: computed))
        }
        return repairs
    }

    public func scanRecords<Scan: RecordSequenceScan>(
        _ scan: Scan, in range: RecordNameRange, zoneName: String, database: DatabaseRef, access: ParticipantAccess?, logger: Logger
    ) async throws -> Scan {
        try await read { db in
            guard let databaseID = try Self.databaseID(db, database), let zone = try Self.zoneRow(db, databaseID: databaseID, zoneName: zoneName)
            else {
                if zoneName == ZoneID.defaultZoneName {
                    var empty = scan
                    empty.begin(count: 0)
                    return empty
                }
                throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
            }
            return try Self.scan(scan, db, zone: zone.id, range: range, access: access)
        }
    }

    public func driftedZoneDigests(logger: Logger) async throws -> [ZoneDigestRepair] {
        // A read is one snapshot: each zone's stored digest and its records agree in it as they do under the lock.
        try await read { db in try Self.refreshZoneDigests(db, unknownOnly: false, settingRight: false) }
    }

    public func refreshZoneDigests(unknownOnly: Bool, logger: Logger) async throws -> [ZoneDigestRepair] {
        // One write transaction per zone, so writers wait for one zone's scan at most.
        let zones = try await read { db in
            try Int64.fetchAll(
                db, sql: "SELECT id FROM zones WHERE deleted = 0 AND (? = 0 OR record_count IS NULL) ORDER BY id", arguments: [unknownOnly])
        }
        var repairs: [ZoneDigestRepair] = []
        for zone in zones {
            repairs += try await write { db in try Self.refreshZoneDigests(db, unknownOnly: unknownOnly, zone: zone) }
        }
        return repairs
    }
}
