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
                db,
                sql: """
                    SELECT id, zone_name, change_seq, database_change_seq, deleted FROM zones
                    WHERE database_id = ? AND database_change_seq > ? ORDER BY database_change_seq LIMIT ?
                    """,
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
                position = try Int64.fetchOne(db, sql: "SELECT change_seq FROM databases WHERE id = ?", arguments: [databaseID]) ?? sequence
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
                        zone: ZoneState(zoneID: zoneID, changeSequence: 0, incarnation: 0), changes: [], sequence: 0, moreComing: false)
                }
                throw StoreError(.zoneNotFound, "zone \(request.zoneName) does not exist")
            }
            guard let zone = try Self.zoneRow(db, databaseID: databaseID, zoneName: request.zoneName) else {
                throw StoreError(.zoneNotFound, "zone \(request.zoneName) does not exist")
            }
            if !request.matches(incarnation: zone.id) {
                throw StoreError(.invalidState, "zone \(request.zoneName) was deleted and created again since this change token")
            }
            var sql = ""
            var arguments = StatementArguments()
            var visibility = ""
            if let access = request.access, !access.zoneWide {
                // A participant sees the shared hierarchies (deletions included) and the share records.
                let (tree, treeArguments) = Self.treeCTE(zoneRowID: zone.id, roots: access.roots)
                sql = tree + " "
                _ = arguments.append(contentsOf: StatementArguments(treeArguments))
                visibility = " AND (record_name IN (SELECT name FROM tree) OR record_name IN (SELECT value FROM json_each(?)))"
            }
            sql += "SELECT deleted, \(Self.recordColumns) FROM records WHERE zone_id = ? AND change_seq > ?"
            _ = arguments.append(contentsOf: [zone.id, request.after])
            if let access = request.access, !access.zoneWide {
                sql += visibility
                _ = arguments.append(contentsOf: [Array(access.shareRecordNames).jsonArray])
            }
            if let types = request.recordTypes {
                sql += " AND record_type IN (SELECT value FROM json_each(?))"
                _ = arguments.append(contentsOf: [Array(types).jsonArray])
            }
            if let access = request.access, !access.zoneWide {
                // Records that left a shared hierarchy read as deletions, unless they are back in one.
                sql = sql.replacingOccurrences(
                    of: "SELECT deleted, \(Self.recordColumns) FROM records",
                    with: "SELECT deleted, \(Self.recordColumns), change_seq AS position FROM records")
                sql += """
                     UNION ALL SELECT 1, e.record_name, r.record_type, e.change_seq, NULL, NULL, NULL, NULL, 0, '', '', 0, '', '', e.change_seq
                    FROM share_exits e JOIN records r ON r.zone_id = e.zone_id AND r.record_name = e.record_name
                    WHERE e.zone_id = ? AND e.change_seq > ? AND e.root_record_name IN (SELECT value FROM json_each(?))
                    AND e.record_name NOT IN (SELECT name FROM tree)
                    ORDER BY position LIMIT ?
                    """
                _ = arguments.append(contentsOf: [zone.id, request.after, Array(access.roots).jsonArray, request.limit + 1])
            } else {
                sql += " ORDER BY change_seq LIMIT ?"
                _ = arguments.append(contentsOf: [request.limit + 1])
            }
            let statement = try db.cachedStatement(sql: sql)
            var changes: [ZoneRecordChange] = []
            changes.reserveCapacity(min(request.limit, 1024))
            var lastSequence = request.after
            var moreComing = false
            let cursor = try Row.fetchCursor(statement, arguments: arguments)
            while let row = try cursor.next() {
                if changes.count == request.limit {
                    moreComing = true
                    break
                }
                // Columns: deleted, then recordColumns.
                lastSequence = row[3]
                if row[0] as Bool {
                    changes.append(.deleted(recordName: row[1], recordType: row[2]))
                } else {
                    changes.append(.changed(Self.storedRecord(row, zoneID: zoneID, offset: 1)))
                }
            }
            let state = ZoneState(zoneID: zoneID, changeSequence: zone.changeSequence, incarnation: zone.id)
            return ZoneChangePage(
                zone: state, changes: changes, sequence: moreComing ? lastSequence : max(zone.changeSequence, request.after), moreComing: moreComing
            )
        }
    }
}
