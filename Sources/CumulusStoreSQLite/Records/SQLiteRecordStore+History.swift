import CumulusModel
public import CumulusStore
import GRDB
public import Logging

extension SQLiteRecordStore {
    /// The history's columns in the order ``storedRecord(_:zoneID:offset:)`` reads, with no share reference: a version
    /// brings back data, not who it was shared with.
    static let historyColumns = """
        h.record_name, h.record_type, h.change_seq, h.fields, h.parent_name, NULL, NULL,
        h.created_at, h.created_by, h.created_device, h.modified_at, h.modified_by, h.modified_device
        """

    /// ``StoreAction/keepVersions(zone:names:replacedAt:)``: one statement.
    static func keepVersions(_ db: Database, zone: Int64, names: [String], replacedAt: Int64) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO record_history (zone_id, record_name, record_type, change_seq, fields, parent_name,
                    created_at, created_by, created_device, modified_at, modified_by, modified_device, replaced_at)
                SELECT zone_id, record_name, record_type, change_seq, fields, parent_name,
                    created_at, created_by, created_device, modified_at, modified_by, modified_device, ?
                FROM records WHERE zone_id = ? AND record_name IN (SELECT value FROM json_each(?)) AND deleted = 0
                """
        ).execute(arguments: [replacedAt, zone, names.jsonArray])
    }

    /// The live zone's row ID, or `zoneNotFound`.
    private static func liveZone(_ db: Database, _ database: DatabaseRef, zoneName: String) throws -> Int64 {
        guard let databaseID = try databaseID(db, database), let zone = try zoneRow(db, databaseID: databaseID, zoneName: zoneName) else {
            throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
        }
        return zone.id
    }

    public func recordsChanged(
        since time: Int64, zoneName: String, in database: DatabaseRef, after: String?, limit: Int, logger: Logger
    ) async throws -> RecordChangesSincePage {
        try await read { db in
            try Self.run(HistoryScripts.recordsChanged(since: time, zoneName: zoneName, in: database, after: after, limit: limit), db)
        }
    }

    /// ``StoreAction/scanRecordNames(zone:after:limit:)``: a walk of the zone's name index.
    static func scanRecordNames(_ db: Database, zone: Int64, after: String, limit: Int) throws -> [(name: String, modified: Int64)] {
        try Row.fetchAll(
            db.cachedStatement(
                sql: "SELECT record_name, modified_at FROM records WHERE zone_id = ? AND record_name > ? ORDER BY record_name LIMIT ?"),
            arguments: [zone, after, limit]
        ).map { (name: $0[0], modified: $0[1]) }
    }

    /// ``StoreAction/readNamesReplaced(zone:after:through:since:)``. `+replaced_at`: through the zone's index by
    /// name, never the age index, whatever the statistics say.
    static func namesReplaced(_ db: Database, zone: Int64, after: String, through upper: String, since time: Int64) throws -> [String] {
        try String.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT DISTINCT record_name FROM record_history
                    WHERE zone_id = ? AND record_name > ? AND record_name <= ? AND +replaced_at > ?4 AND modified_at <= ?4
                    """),
            arguments: [zone, after, upper, time])
    }

    /// ``StoreAction/readVersions(zone:zoneID:names:at:)``.
    static func versions(_ db: Database, zone: Int64, zoneID: ZoneID, names: [String], at time: Int64) throws -> [String: StoredRecord] {
        var past: [String: StoredRecord] = [:]
        let rows = try Row.fetchCursor(
            db.cachedStatement(
                sql: """
                    SELECT \(historyColumns) FROM record_history h
                    WHERE h.zone_id = ? AND h.record_name IN (SELECT value FROM json_each(?)) AND h.modified_at <= ?3 AND +h.replaced_at > ?3
                    """),
            arguments: [zone, names.jsonArray, time])
        while let row = try rows.next() {
            let record = storedRecord(row, zoneID: zoneID)
            past[record.header.recordName] = record
        }
        return past
    }

    public func deletedRecords(
        since: Int64, zoneName: String, in database: DatabaseRef, names: [String]?, limit: Int, logger: Logger
    ) async throws -> [DeletedRecord] {
        let zoneID = database.zoneID(zoneName)
        return try await read { db in
            let zone = try Self.liveZone(db, database, zoneName: zoneName)
            // The version a deletion replaced carries the deletion's time as its `replaced_at`.
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.historyColumns), r.modified_at, r.modified_by, r.modified_device
                        FROM records r JOIN record_history h
                            ON h.zone_id = r.zone_id AND h.record_name = r.record_name AND h.replaced_at = r.modified_at
                        WHERE r.zone_id = ?1 AND r.deleted = 1 AND r.modified_at >= ?2
                            AND (?3 IS NULL OR r.record_name IN (SELECT value FROM json_each(?3)))
                        ORDER BY r.modified_at DESC, r.record_name LIMIT ?4
                        """),
                arguments: [zone, since, names?.jsonArray, limit])
            var seen = Set<String>()
            return rows.compactMap { row in
                let record = Self.storedRecord(row, zoneID: zoneID)
                guard seen.insert(record.header.recordName).inserted else { return nil }
                return DeletedRecord(record: record, deleted: RecordStamp(timestamp: row[13], userRecordName: row[14], deviceID: row[15]))
            }
        }
    }

    public func keptVersions(
        zoneName: String, in database: DatabaseRef, after: KeptVersion.Position?, limit: Int, logger: Logger
    ) async throws -> [KeptVersion] {
        let zoneID = database.zoneID(zoneName)
        return try await read { db in
            let zone = try Self.liveZone(db, database, zoneName: zoneName)
            // Along the zone's index by name and replacement time, from the last page's position.
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.historyColumns), h.replaced_at,
                            EXISTS (SELECT 1 FROM records r WHERE r.zone_id = h.zone_id AND r.record_name = h.record_name AND r.deleted = 1
                                AND r.modified_at = h.replaced_at)
                        FROM record_history h
                        WHERE h.zone_id = ?1 AND (?2 IS NULL OR (h.record_name, h.replaced_at) > (?2, ?3))
                        ORDER BY h.record_name, h.replaced_at LIMIT ?4
                        """),
                arguments: [zone, after?.recordName, after?.replacedAt ?? 0, limit])
            return rows.map { row in KeptVersion(record: Self.storedRecord(row, zoneID: zoneID), replacedAt: row[13], deleted: row[14]) }
        }
    }

    public func pruneHistory(replacedBefore time: Int64, logger: Logger) async throws -> Int {
        var pruned = 0
        // Steps of 5,000 rows: the one writer is never held long.
        while true {
            let count = try await write { db in
                try db.execute(
                    sql: "DELETE FROM record_history WHERE id IN (SELECT id FROM record_history WHERE replaced_at < ? LIMIT 5000)",
                    arguments: [time])
                return db.changesCount
            }
            pruned += count
            if count < 5000 { return pruned }
        }
    }
}
