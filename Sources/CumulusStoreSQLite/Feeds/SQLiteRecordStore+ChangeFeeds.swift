import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging

extension SQLiteRecordStore {
    /// Each feed page is read in one read transaction, a snapshot: its rows and its final position agree. Writers commit
    /// one at a time and take the next sequence numbers, so a write that commits after the snapshot always lands after
    /// the position returned, and a paging client never skips it.
    public func databaseChanges(in database: DatabaseRef, after sequence: Int64, limit: Int, logger: Logger) async throws -> DatabaseChangePage {
        try await read { db in
            guard let databaseID = try Self.databaseID(db, database) else {
                return DatabaseChangePage(zones: [], sequence: 0, moreComing: false)
            }
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT id, zone_name, change_seq, database_change_seq, deleted FROM zones
                        WHERE database_id = ? AND database_change_seq > ? ORDER BY database_change_seq LIMIT ?
                        """),
                arguments: [databaseID, sequence, limit + 1]
            )
            let moreComing = rows.count > limit
            let page = rows.prefix(limit)
            let zones: [DatabaseZoneChange] = page.map { row in
                let zoneID = database.zoneID(row["zone_name"])
                if row["deleted"] as Bool { return .deleted(zoneID) }
                return .changed(ZoneState(zoneID: zoneID, changeSequence: row["change_seq"], incarnation: row["id"]))
            }
            let position: Int64
            if moreComing, let last = page.last {
                position = last["database_change_seq"]
            } else {
                position =
                    try Int64.fetchOne(db.cachedStatement(sql: "SELECT change_seq FROM databases WHERE id = ?"), arguments: [databaseID]) ?? sequence
            }
            return DatabaseChangePage(zones: zones, sequence: max(position, sequence), moreComing: moreComing)
        }
    }

    public func zoneChanges(_ request: ZoneChangeRequest, logger: Logger) async throws -> ZoneChangePage {
        try await read { db in
            let zoneID = request.database.zoneID(request.zoneName)
            guard let databaseID = try Self.databaseID(db, request.database) else {
                if request.zoneName == ZoneID.defaultZoneName, request.incarnation == nil || request.incarnation == 0 {
                    return ZoneChangePage(
                        zone: ZoneState(zoneID: zoneID, changeSequence: 0, incarnation: 0), changes: [], sequence: 0, moreComing: false,
                        digest: request.recordTypes == nil ? .empty : nil)
                }
                throw StoreError(.zoneNotFound, "zone \(request.zoneName) does not exist")
            }
            guard let zone = try Self.zoneRow(db, databaseID: databaseID, zoneName: request.zoneName) else {
                throw StoreError(.zoneNotFound, "zone \(request.zoneName) does not exist")
            }
            if !request.matches(incarnation: zone.id) {
                throw StoreError(.invalidState, "zone \(request.zoneName) was deleted and created again since this change token")
            }
            let (sql, arguments) = Self.zoneFeedStatement(request, zoneRowID: zone.id)
            let statement = try db.cachedStatement(sql: sql)
            var changes: [ZoneRecordChange] = []
            changes.reserveCapacity(min(request.limit, 1024))
            // A participant's feed can meet a record twice in a page (changed, then seen or unseen): the later wins.
            var indexByName: [String: Int] = [:]
            var lastSequence = request.after
            var moreComing = false
            let cursor = try Row.fetchCursor(statement, arguments: arguments)
            while let row = try cursor.next() {
                // Columns: deleted, recordColumns, then the feed position.
                let name: String = row[1]
                let change: ZoneRecordChange =
                    row[0] as Bool ? .deleted(recordName: name, recordType: row[2]) : .changed(Self.storedRecord(row, zoneID: zoneID, offset: 1))
                if let index = indexByName[name] {
                    changes[index] = change
                    lastSequence = row[14]
                    continue
                }
                if changes.count == request.limit {
                    moreComing = true
                    break
                }
                lastSequence = row[14]
                if request.access != nil { indexByName[name] = changes.count }
                changes.append(change)
            }
            let state = ZoneState(zoneID: zoneID, changeSequence: zone.changeSequence, incarnation: zone.id)
            // The page that ends the feed carries the digest of what the reader holds once they applied it, read in
            // this snapshot.
            var digest: ZoneDigest?
            if !moreComing, request.recordTypes == nil {
                if let access = request.access, !access.zoneWide {
                    digest = try Self.scan(DigestScan(), db, zone: zone.id, range: .all, access: access).digest
                } else {
                    digest = try Self.storedDigest(db, zone: zone.id)
                }
            }
            return ZoneChangePage(
                zone: state, changes: changes, sequence: moreComing ? lastSequence : max(zone.changeSequence, request.after), moreComing: moreComing,
                digest: digest)
        }
    }

    /// The statement of one feed page. Its columns: `deleted`, ``recordColumns``, the position in the feed.
    ///
    /// The owner reads the zone's records in sequence order. A participant reads, merged in position order: the
    /// records they see now; records that left a hierarchy they see (`share_exits`), as deletions; and records whose
    /// visibility to them changed (`participant_changes`), as they are now or as deletions.
    static func zoneFeedStatement(_ request: ZoneChangeRequest, zoneRowID: Int64) -> (String, StatementArguments) {
        let typeFilter = request.recordTypes.map { Array($0).jsonArray }
        guard let access = request.access else {
            var sql = "SELECT deleted, \(recordColumns), change_seq FROM records WHERE zone_id = ? AND change_seq > ?"
            var arguments: StatementArguments = [zoneRowID, request.after]
            if let typeFilter {
                sql += " AND record_type IN (SELECT value FROM json_each(?))"
                _ = arguments.append(contentsOf: [typeFilter])
            }
            sql += " ORDER BY change_seq LIMIT ?"
            _ = arguments.append(contentsOf: [request.limit + 1])
            return (sql, arguments)
        }
        // Numbered parameters: ?1 zone, ?2 position, ?3 roots, ?4 share records, ?5 record types, ?6 user, ?7 limit.
        // The text depends only on the kind of access and on filtering by type, so the statement cache stays small.
        var sql = ""
        let visible: (String) -> String
        if access.zoneWide {
            visible = { _ in "1" }
        } else {
            sql = """
                WITH RECURSIVE tree(name) AS (
                    SELECT value FROM json_each(?3)
                    UNION SELECT r.record_name FROM records r JOIN tree ON r.zone_id = ?1 AND r.parent_name = tree.name
                )

                """
            visible = { column in "(\(column) IN (SELECT name FROM tree) OR \(column) IN (SELECT value FROM json_each(?4)))" }
        }
        let types = typeFilter == nil ? "" : " AND r.record_type IN (SELECT value FROM json_each(?5))"
        let columns = recordColumns.split(separator: ",").map { "r." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .joined(separator: ", ")
        sql += """
            SELECT r.deleted, \(columns), r.change_seq AS position FROM records r
            WHERE r.zone_id = ?1 AND r.change_seq > ?2 AND \(visible("r.record_name"))\(types)
            """
        if !access.zoneWide {
            sql += """

                UNION ALL SELECT 1, \(columns), e.change_seq FROM share_exits e
                JOIN records r ON r.zone_id = e.zone_id AND r.record_name = e.record_name
                WHERE e.zone_id = ?1 AND e.change_seq > ?2 AND e.root_record_name IN (SELECT value FROM json_each(?3))
                AND NOT \(visible("e.record_name"))\(types)
                """
        }
        sql += """

            UNION ALL SELECT CASE WHEN \(visible("r.record_name")) THEN r.deleted ELSE 1 END, \(columns), p.change_seq
            FROM participant_changes p JOIN records r ON r.zone_id = p.zone_id AND r.record_name = p.record_name
            WHERE p.user_record_name = ?6 AND p.zone_id = ?1 AND p.change_seq > ?2\(types)
            ORDER BY position LIMIT ?7
            """
        let arguments: StatementArguments = [
            zoneRowID, request.after, Array(access.roots).jsonArray, Array(access.shareRecordNames).jsonArray, typeFilter,
            access.userRecordName, request.limit + 1,
        ]
        return (sql, arguments)
    }
}
