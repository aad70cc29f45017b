import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    /// The history's columns in the order ``storedRecord(_:zoneID:offset:)`` reads, with no share reference: a version
    /// brings back data, not who it was shared with.
    static let historyColumns = """
        h.record_name, h.record_type, h.change_seq, h.fields, h.parent_name, NULL::text, NULL::text,
        h.created_at, h.created_by, h.created_device, h.modified_at, h.modified_by, h.modified_device
        """

    /// ``StoreAction/keepVersions(zone:names:replacedAt:)``: one statement.
    static func keepVersions(_ connection: PostgresConnection, zone: Int64, names: [String], replacedAt: Int64, logger: Logger) async throws {
        var bindings = PostgresBindings()
        bindings.append(zone)
        bindings.append(names)
        bindings.append(replacedAt)
        try await connection.query(PostgresQuery(unsafeSQL: keptVersionsFrom1, binds: bindings), logger: logger)
    }

    /// The statement that copies live versions into the history, with its zone, names and replacement time as these
    /// parameters: alone, or as a step of the statement that saves a batch.
    static func keptVersions(zone: String, names: String, replacedAt: String) -> String {
        """
        INSERT INTO record_history (zone_id, record_name, record_type, change_seq, fields, parent_name,
            created_at, created_by, created_device, modified_at, modified_by, modified_device, replaced_at)
        SELECT r.zone_id, r.record_name, r.record_type, r.change_seq, r.fields, r.parent_name,
            r.created_at, r.created_by, r.created_device, r.modified_at, r.modified_by, r.modified_device, \(replacedAt)::bigint
        FROM \(recordsNamed(names, inZone: zone, as: "r")) WHERE NOT r.deleted
        """
    }

    private static let keptVersionsFrom1 = keptVersions(zone: "$1", names: "$2", replacedAt: "$3")

    /// The live zone's row ID, or `zoneNotFound`.
    private static func liveZone(_ connection: PostgresConnection, _ database: DatabaseRef, zoneName: String, logger: Logger) async throws -> Int64 {
        guard let zone = try await zoneRow(connection, database, zoneName: zoneName, logger: logger) else {
            throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
        }
        return zone.id
    }

    public func recordsChanged(
        since time: Int64, zoneName: String, in database: DatabaseRef, after: String?, limit: Int, logger: Logger
    ) async throws -> RecordChangesSincePage {
        try await transaction(snapshot: true, logger: logger) { connection in
            try await Self.run(
                HistoryScripts.recordsChanged(since: time, zoneName: zoneName, in: database, after: after, limit: limit), connection, logger: logger)
        }
    }

    /// ``StoreAction/scanRecordNames(zone:after:limit:)``: a walk of the zone's name index.
    static func scanRecordNames(_ connection: PostgresConnection, zone: Int64, after: String, limit: Int, logger: Logger) async throws
        -> [(name: String, modified: Int64)]
    {
        var scanned: [(name: String, modified: Int64)] = []
        for try await (name, modified) in try await connection.query(
            "SELECT record_name, modified_at FROM records WHERE zone_id = \(zone) AND record_name > \(after) ORDER BY record_name LIMIT \(limit)",
            logger: logger
        ).decode((String, Int64).self) {
            scanned.append((name, modified))
        }
        return scanned
    }

    /// ``StoreAction/readNamesReplaced(zone:after:through:since:)``. `replaced_at + 0`: through the zone's index by
    /// name, never the age index. Statistics gathered before the latest writes say no version was replaced after a
    /// recent moment, so the planner would walk the age index from the moment, reading every version replaced since.
    static func namesReplaced(_ connection: PostgresConnection, zone: Int64, after: String, through upper: String, since time: Int64, logger: Logger)
        async throws -> [String]
    {
        var names: [String] = []
        for try await name in try await connection.query(
            """
            SELECT DISTINCT record_name FROM record_history
            WHERE zone_id = \(zone) AND record_name > \(after) AND record_name <= \(upper) AND replaced_at + 0 > \(time) AND modified_at <= \(time)
            """, logger: logger
        ).decode(String.self) {
            names.append(name)
        }
        return names
    }

    /// ``StoreAction/readVersions(zone:zoneID:names:at:)`` (`replaced_at + 0`, as above).
    static func versions(_ connection: PostgresConnection, zone: Int64, zoneID: ZoneID, names: [String], at time: Int64, logger: Logger)
        async throws -> [String: StoredRecord]
    {
        var past: [String: StoredRecord] = [:]
        for try await row in try await connection.query(
            """
            SELECT \(unescaped: historyColumns) FROM record_history h
            WHERE h.zone_id = \(zone) AND h.record_name = ANY(\(names)) AND h.modified_at <= \(time) AND h.replaced_at + 0 > \(time)
            """, logger: logger)
        {
            let record = try storedRecord(RowReader(row), zoneID: zoneID)
            past[record.header.recordName] = record
        }
        return past
    }

    public func keptVersions(
        zoneName: String, in database: DatabaseRef, after: KeptVersion.Position?, limit: Int, logger: Logger
    ) async throws -> [KeptVersion] {
        let zoneID = database.zoneID(zoneName)
        return try await transaction(snapshot: true, logger: logger) { connection in
            let zone = try await Self.liveZone(connection, database, zoneName: zoneName, logger: logger)
            var versions: [KeptVersion] = []
            // Along the zone's index by name and replacement time, from the last page's position.
            for try await row in try await connection.query(
                """
                SELECT \(unescaped: Self.historyColumns), h.replaced_at,
                    EXISTS (SELECT 1 FROM records r WHERE r.zone_id = h.zone_id AND r.record_name = h.record_name AND r.deleted
                        AND r.modified_at = h.replaced_at)
                FROM record_history h
                WHERE h.zone_id = \(zone) AND (\(after == nil) OR (h.record_name, h.replaced_at) > (\(after?.recordName ?? ""), \(after?.replacedAt ?? 0)))
                ORDER BY h.record_name, h.replaced_at LIMIT \(limit)
                """, logger: logger)
            {
                let reader = RowReader(row)
                versions.append(
                    KeptVersion(record: try Self.storedRecord(reader, zoneID: zoneID), replacedAt: try reader[13], deleted: try reader[14]))
            }
            return versions
        }
    }

    public func deletedRecords(
        since: Int64, zoneName: String, in database: DatabaseRef, names: [String]?, limit: Int, logger: Logger
    ) async throws -> [DeletedRecord] {
        let zoneID = database.zoneID(zoneName)
        return try await transaction(snapshot: true, logger: logger) { connection in
            let zone = try await Self.liveZone(connection, database, zoneName: zoneName, logger: logger)
            // The version a deletion replaced carries the deletion's time as its `replaced_at`.
            var deleted: [DeletedRecord] = []
            var seen = Set<String>()
            for try await row in try await connection.query(
                """
                SELECT \(unescaped: Self.historyColumns), r.modified_at, r.modified_by, r.modified_device
                FROM records r JOIN record_history h
                    ON h.zone_id = r.zone_id AND h.record_name = r.record_name AND h.replaced_at = r.modified_at
                WHERE r.zone_id = \(zone) AND r.deleted AND r.modified_at >= \(since)
                    AND (\(names == nil) OR r.record_name = ANY(\(names ?? [])))
                ORDER BY r.modified_at DESC, r.record_name LIMIT \(limit)
                """, logger: logger)
            {
                let reader = RowReader(row)
                let record = try Self.storedRecord(reader, zoneID: zoneID)
                guard seen.insert(record.header.recordName).inserted else { continue }
                deleted.append(
                    DeletedRecord(
                        record: record, deleted: RecordStamp(timestamp: try reader[13], userRecordName: try reader[14], deviceID: try reader[15])))
            }
            return deleted
        }
    }

    public func pruneHistory(replacedBefore time: Int64, logger: Logger) async throws -> Int {
        var pruned = 0
        // Steps of 5,000 rows: no transaction holds many row locks for long.
        while true {
            let count = try await transaction(logger: logger) { connection in
                var count = 0
                for try await _ in try await connection.query(
                    """
                    DELETE FROM record_history WHERE id IN (SELECT id FROM record_history WHERE replaced_at < \(time) LIMIT 5000) RETURNING 1
                    """, logger: logger
                ).decode(Int.self) {
                    count += 1
                }
                return count
            }
            pruned += count
            if count < 5000 { return pruned }
        }
    }
}
