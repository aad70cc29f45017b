public import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO

// MARK: - Zone digests

extension PostgresRecordStore {
    /// The `SET` list that adds a change to a zone's digest, lane by lane modulo 2³², with no read of the zone first;
    /// parameters from `$first`: eight lanes, then the change of the record count.
    static func digestAdjustment(from first: Int) -> String {
        (0..<8).map { "digest_\($0) = (digest_\($0) + $\(first + $0)) & 4294967295" }.joined(separator: ", ")
            + ", record_count = record_count + $\(first + 8)"
    }

    /// ``digestAdjustment(from:)`` as ``adjustZoneDigest(_:zone:by:logger:)`` numbers its parameters, built once.
    static let digestAdjustmentFrom2 = digestAdjustment(from: 2)

    /// The SET list that empties a zone's digest.
    static let emptyDigest = (0..<8).map { "digest_\($0) = 0" }.joined(separator: ", ") + ", record_count = 0"

    /// Adds a change to a zone's stored digest.
    static func adjustZoneDigest(_ connection: PostgresConnection, zone: Int64, by change: ZoneDigest, logger: Logger) async throws {
        guard change != .empty else { return }
        var bindings = try binds(zone)
        for lane in change.lanes { bindings.append(Int64(lane), context: .default) }
        bindings.append(change.recordCount, context: .default)
        try await connection.query(
            PostgresQuery(unsafeSQL: "UPDATE zones SET \(digestAdjustmentFrom2) WHERE id = $1", binds: bindings), logger: logger)
    }

    /// The zone's stored digest; `nil` until it is computed.
    static func storedDigest(_ connection: PostgresConnection, zone: Int64, lock: Bool = false, logger: Logger) async throws -> ZoneDigest? {
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: "SELECT ARRAY[\((0..<8).map { "digest_\($0)" }.joined(separator: ", "))], record_count FROM zones WHERE id = $1"
                    + (lock ? " FOR UPDATE" : ""),
                binds: try binds(zone)), logger: logger)
        for try await (lanes, count) in rows.decode(([Int64], Int64?).self) {
            guard let count else { return nil }
            return ZoneDigest(lanes: lanes.map { UInt32(truncatingIfNeeded: $0) }, recordCount: count)
        }
        return nil
    }

    /// Runs a scan over the live records of a zone in `range`, as `access` lets its participant see them: the count,
    /// then the names and sequences in name order, in the caller's transaction.
    static func scan<Scan: RecordSequenceScan>(
        _ scan: Scan, _ connection: PostgresConnection, zone: Int64, range: RecordNameRange, access: ParticipantAccess?, logger: Logger
    ) async throws -> Scan {
        var scan = scan
        // Parameters: $1 zone, $2 lower bound, $3 upper bound, $4 roots, $5 share records.
        var prefix = ""
        let hierarchy = access.map { !$0.zoneWide } ?? false
        var condition =
            "r.zone_id = $1 AND NOT r.deleted AND ($2::text IS NULL OR r.record_name >= $2) AND ($3::text IS NULL OR r.record_name < $3)"
        if hierarchy {
            prefix = """
                WITH RECURSIVE tree(name) AS (
                    SELECT unnest($4::text[]) COLLATE "C"
                    UNION SELECT r.record_name FROM records r JOIN tree ON r.zone_id = $1 AND r.parent_name = tree.name
                )

                """
            condition += " AND (r.record_name IN (SELECT name FROM tree) OR r.record_name = ANY($5))"
        }
        func bindings() throws -> PostgresBindings {
            var bindings = try binds(zone)
            bindings.append(range.lowerBound, context: .default)
            bindings.append(range.upperBound, context: .default)
            if hierarchy {
                bindings.append(Array(access?.roots ?? []), context: .default)
                bindings.append(Array(access?.shareRecordNames ?? []), context: .default)
            }
            return bindings
        }
        let counted = try await connection.query(
            PostgresQuery(unsafeSQL: "\(prefix)SELECT count(*) FROM records r WHERE \(condition)", binds: try bindings()), logger: logger)
        var count: Int64 = 0
        for try await value in counted.decode(Int64.self) { count = value }
        scan.begin(count: Int(count))
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: "\(prefix)SELECT r.record_name, r.change_seq FROM records r WHERE \(condition) ORDER BY r.record_name",
                binds: try bindings()), logger: logger)
        for try await (name, sequence) in rows.decode((String, Int64).self) { scan.add(recordName: name, changeSequence: sequence) }
        return scan
    }

    public func scanRecords<Scan: RecordSequenceScan>(
        _ scan: Scan, in range: RecordNameRange, zoneName: String, database: DatabaseRef, access: ParticipantAccess?, logger: Logger
    ) async throws -> Scan {
        try await read(logger: logger) { connection in
            guard let zone = try await Self.zoneRow(connection, database, zoneName: zoneName, logger: logger) else {
                if zoneName == ZoneID.defaultZoneName {
                    var empty = scan
                    empty.begin(count: 0)
                    return empty
                }
                throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
            }
            return try await Self.scan(scan, connection, zone: zone.id, range: range, access: access, logger: logger)
        }
    }

    public func refreshZoneDigests(unknownOnly: Bool, logger: Logger) async throws -> [ZoneDigestRepair] {
        try await client.withConnection { connection in
            try await Self.refreshZoneDigests(connection, unknownOnly: unknownOnly, logger: logger)
        }
    }

    public func driftedZoneDigests(logger: Logger) async throws -> [ZoneDigestRepair] {
        try await client.withConnection { connection in
            try await Self.refreshZoneDigests(connection, unknownOnly: false, settingRight: false, logger: logger)
        }
    }

    /// Computes the digests of live zones from their records and stores those that differ (or, `unknownOnly`, those
    /// never computed): one transaction per zone, which holds the zone's row as its writers do.
    static func refreshZoneDigests(_ connection: PostgresConnection, unknownOnly: Bool, settingRight: Bool = true, logger: Logger) async throws
        -> [ZoneDigestRepair]
    {
        // The condition written out, not bound, so the unknown ones are read from their partial index.
        let listed = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT z.id, z.zone_name, d.container_id, d.environment, d.scope, d.owner_record_name FROM zones z
                    JOIN databases d ON d.id = z.database_id
                    WHERE NOT z.deleted\(unknownOnly ? " AND z.record_count IS NULL" : "") ORDER BY z.id
                    """), logger: logger)
        var zones: [(Int64, String, DatabaseRef)] = []
        for try await (id, name, container, environment, scope, owner) in listed.decode((Int64, String, String, String, String, String).self) {
            let database = DatabaseRef(
                container: container, environment: ContainerEnvironment(rawValue: environment) ?? .development,
                scope: DatabaseScope(rawValue: scope) ?? .private, ownerRecordName: owner)
            zones.append((id, name, database))
        }
        var repairs: [ZoneDigestRepair] = []
        for (zone, name, database) in zones {
            let repair = try await connection.withTransaction(logger: logger) { connection -> ZoneDigestRepair? in
                // Setting right locks the zone as its writers do; only looking reads one snapshot, which also works
                // where the database cannot be written.
                if !settingRight { try await connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", logger: logger) }
                let stored = try await storedDigest(connection, zone: zone, lock: settingRight, logger: logger)
                let computed = try await scan(DigestScan(), connection, zone: zone, range: .all, access: nil, logger: logger).digest
                guard stored != computed else { return nil }
                guard settingRight else { return ZoneDigestRepair(database: database, zoneName: name, stored: stored, computed: computed) }
                var bindings = try binds(zone)
                for lane in computed.lanes { bindings.append(Int64(lane), context: .default) }
                bindings.append(computed.recordCount, context: .default)
                let lanes = (0..<8).map { "digest_\($0) = $\($0 + 2)" }.joined(separator: ", ")
                try await connection.query(
                    PostgresQuery(unsafeSQL: "UPDATE zones SET \(lanes), record_count = $10 WHERE id = $1", binds: bindings), logger: logger)
                return ZoneDigestRepair(database: database, zoneName: name, stored: stored, computed: computed)
            }
            if let repair { repairs.append(repair) }
        }
        return repairs
    }
}
