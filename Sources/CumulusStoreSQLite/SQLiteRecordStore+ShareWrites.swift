import CumulusModel
import CumulusStore
import Foundation
import GRDB

extension SQLiteRecordStore {
    // MARK: - A participant's writes

    /// Plans a batch; for a participant, as ``SharePlanner/plan(_:access:existing:placed:planner:)`` does, reading where
    /// the records sit in the shared hierarchies inside the write transaction.
    static func plan(
        _ batch: RecordBatch, existing: [String: StoredRecord], planner: RecordBatchPlanner, zoneRowID: Int64, _ db: Database
    ) throws -> (RecordBatchPlan, visible: [String: StoredRecord]) {
        guard let access = batch.access else { return (planner.plan(batch, existing: existing), existing) }
        let toPlace = SharePlanner.namesToPlace(batch, existing: existing)
        let placed = access.zoneWide ? [:] : try roots(of: Array(toPlace), zoneRowID: zoneRowID, among: access.roots, db)
        return SharePlanner.plan(batch, access: access, existing: existing, placed: placed, planner: planner)
    }

    // MARK: - Share changes

    /// Reads what ``SharePlanner/checkShareChanges(_:batch:facts:)`` needs about the zone, and checks the batch's
    /// share changes, failing their operations where they break a rule.
    static func prepareShareChanges(
        _ plan: inout RecordBatchPlan, batch: RecordBatch, existing: [String: StoredRecord], zoneRowID: Int64, _ db: Database
    ) throws -> [PlannedShareChange] {
        guard !batch.shareChanges.isEmpty else { return [] }
        var shares: [String: ExistingShare] = [:]
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT s.share_record_name, s.root_record_name, s.public_permission,
                        (SELECT json_group_array(user_record_name) FROM share_participants WHERE share_id = s.id AND status <> 'REMOVED')
                    FROM shares s WHERE s.zone_id = ?
                    """),
            arguments: [zoneRowID]
        )
        for row in rows {
            let users = (try? JSONDecoder().decode([String].self, from: Data((row[3] as String? ?? "[]").utf8))) ?? []
            shares[row[0]] = ExistingShare(
                rootRecordName: row[1], publicPermission: SharePermission(rawValue: row[2]) ?? .none, activeUsers: Set(users))
        }
        let candidates = SharePlanner.rootsToCheck(batch)
        let hierarchyRoots = Set(shares.values.compactMap(\.rootRecordName))
        var sharedAncestors: [String: String] = [:]
        var sharedDescendants: [String: String] = [:]
        var liveRoots = Set<String>()
        if !candidates.isEmpty {
            liveRoots = Set(try liveRecords(db, zoneRowID: zoneRowID, zoneID: ZoneID(zoneName: batch.zoneName), names: Array(candidates)).keys)
            if !hierarchyRoots.isEmpty {
                for (candidate, ancestor) in try roots(of: Array(candidates), zoneRowID: zoneRowID, among: hierarchyRoots, db)
                where ancestor != candidate {
                    sharedAncestors[candidate] = ancestor
                }
                for candidate in candidates {
                    let (tree, treeArguments) = treeCTE(zoneRowID: zoneRowID, roots: [candidate])
                    let below = try String.fetchOne(
                        db.cachedStatement(sql: "\(tree) SELECT name FROM tree WHERE name <> ? AND name IN (SELECT value FROM json_each(?)) LIMIT 1"),
                        arguments: StatementArguments(treeArguments + [candidate.databaseValue, Array(hierarchyRoots).jsonArray.databaseValue])
                    )
                    if let below { sharedDescendants[candidate] = below }
                }
            }
        }
        let facts = ZoneShareFacts(shares: shares, liveRoots: liveRoots, sharedAncestors: sharedAncestors, sharedDescendants: sharedDescendants)
        return SharePlanner.checkShareChanges(&plan, batch: batch, facts: facts)
    }

    /// Stores share metadata after the batch's records are written: the share row, and its participants as
    /// ``SharePlanner/participants(current:owner:previousPublicPermission:publicPermission:listed:)`` decides them.
    static func applyShareChanges(_ changes: [PlannedShareChange], zoneRowID: Int64, batch: RecordBatch, _ db: Database) throws {
        for change in changes {
            let shareID: Int64
            var previousPublic: SharePermission = change.publicPermission ?? .none
            if change.isNew {
                let shortGUID: String
                if let rootName = change.rootRecordName {
                    let existingGUID = try String.fetchOne(
                        db.cachedStatement(sql: "SELECT short_guid FROM records WHERE zone_id = ? AND record_name = ?"),
                        arguments: [zoneRowID, rootName]
                    )
                    shortGUID = existingGUID ?? ShortGUID.make()
                    // The root points at its share, and takes a new change tag so every feed shows it.
                    let sequence = try Int64.fetchOne(
                        db.cachedStatement(sql: "UPDATE zones SET change_seq = change_seq + 1 WHERE id = ? RETURNING change_seq"),
                        arguments: [zoneRowID])!
                    try db.cachedStatement(
                        sql: "UPDATE records SET share_name = ?, short_guid = ?, change_seq = ? WHERE zone_id = ? AND record_name = ?"
                    ).execute(arguments: [change.recordName, shortGUID, sequence, zoneRowID, rootName]
                    )
                } else {
                    let existingGUID = try String.fetchOne(
                        db.cachedStatement(sql: "SELECT short_guid FROM zones WHERE id = ?"), arguments: [zoneRowID])
                    shortGUID = existingGUID ?? ShortGUID.make()
                    try db.cachedStatement(sql: "UPDATE zones SET short_guid = ? WHERE id = ?").execute(arguments: [shortGUID, zoneRowID])
                }
                try db.cachedStatement(
                    sql: "INSERT INTO shares (zone_id, share_record_name, root_record_name, short_guid, public_permission) VALUES (?, ?, ?, ?, ?)"
                ).execute(arguments: [zoneRowID, change.recordName, change.rootRecordName, shortGUID, previousPublic.rawValue]
                )
                shareID = db.lastInsertedRowID
            } else {
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT id, public_permission FROM shares WHERE zone_id = ? AND share_record_name = ?"),
                    arguments: [zoneRowID, change.recordName])!
                shareID = row[0]
                previousPublic = SharePermission(rawValue: row[1]) ?? .none
                if let permission = change.publicPermission {
                    try db.cachedStatement(sql: "UPDATE shares SET public_permission = ? WHERE id = ?").execute(arguments: [
                        permission.rawValue, shareID,
                    ])
                }
            }
            let current = try Row.fetchAll(
                db.cachedStatement(
                    sql: "SELECT user_record_name, type, permission, status, email FROM share_participants WHERE share_id = ? ORDER BY position"),
                arguments: [shareID]
            ).map(Self.participant)
            let planned = SharePlanner.participants(
                current: current, owner: batch.author, previousPublicPermission: previousPublic, publicPermission: change.publicPermission,
                listed: change.participants)
            if planned.participants != current {
                try db.cachedStatement(sql: "DELETE FROM share_participants WHERE share_id = ?").execute(arguments: [shareID])
                let insert = try db.cachedStatement(
                    sql:
                        "INSERT INTO share_participants (share_id, user_record_name, type, permission, status, email, position) VALUES (?, ?, ?, ?, ?, ?, ?)"
                )
                for (position, participant) in planned.participants.enumerated() {
                    try insert.execute(arguments: [
                        shareID, participant.userRecordName, participant.type.rawValue, participant.permission.rawValue, participant.status.rawValue,
                        participant.email, position,
                    ])
                }
            }
            try refreshViews(db, zoneRowID: zoneRowID, users: planned.affected)
        }
    }

    /// Ends the shares whose record or root was deleted (``SharePlanner/endings(of:deleted:)``): participants lose
    /// access, and the surviving half (the root's `share` reference, or the share record) is cleared with a new change
    /// sequence.
    static func endShares(_ db: Database, zoneRowID: Int64, deletedNames: [String], sequence: inout Int64, batch: RecordBatch) throws {
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT id, share_record_name, root_record_name FROM shares WHERE zone_id = ?1
                    AND (share_record_name IN (SELECT value FROM json_each(?2)) OR root_record_name IN (SELECT value FROM json_each(?2)))
                    """),
            arguments: [zoneRowID, deletedNames.jsonArray]
        )
        var shareIDs: [String: Int64] = [:]
        for row in rows { shareIDs[row[1]] = row[0] }
        let endings = SharePlanner.endings(of: rows.map { (shareRecordName: $0[1], rootRecordName: $0[2]) }, deleted: Set(deletedNames))
        for ending in endings {
            guard let shareID = shareIDs[ending.shareRecordName] else { continue }
            let users = Set(
                try String.fetchAll(
                    db.cachedStatement(sql: "SELECT user_record_name FROM share_participants WHERE share_id = ? AND type <> 'OWNER'"),
                    arguments: [shareID]))
            try db.cachedStatement(sql: "DELETE FROM shares WHERE id = ?").execute(arguments: [shareID])
            if let root = ending.rootToClear {
                sequence += 1
                try db.cachedStatement(
                    sql: "UPDATE records SET share_name = NULL, change_seq = ? WHERE zone_id = ? AND record_name = ? AND deleted = 0"
                ).execute(arguments: [sequence, zoneRowID, root]
                )
            }
            if ending.deletesShareRecord {
                sequence += 1
                try db.cachedStatement(
                    sql: """
                        UPDATE records SET deleted = 1, fields = NULL, change_seq = ?, modified_at = ?, modified_by = ?, modified_device = ?
                        WHERE zone_id = ? AND record_name = ? AND deleted = 0
                        """
                ).execute(arguments: [sequence, batch.timestamp, batch.author, batch.deviceID, zoneRowID, ending.shareRecordName]
                )
            }
            // The batch holds the zone's sequence until it ends; views take positions from the stored one.
            try db.cachedStatement(sql: "UPDATE zones SET change_seq = ? WHERE id = ?").execute(arguments: [sequence, zoneRowID])
            try refreshViews(db, zoneRowID: zoneRowID, users: users)
            sequence = try Int64.fetchOne(db.cachedStatement(sql: "SELECT change_seq FROM zones WHERE id = ?"), arguments: [zoneRowID]) ?? sequence
        }
    }
}

extension SQLiteRecordStore {
    /// Records whose parent changed may have left (or joined) a shared hierarchy, with everything below them. Those
    /// records take new change sequences, so the hierarchy they joined delivers them, and the one they left records an
    /// exit, so its participants' feeds report them deleted.
    static func trackHierarchyMoves(
        _ db: Database, zoneRowID: Int64, existing: [String: StoredRecord], writes: [PlannedWrite], sequence: inout Int64
    ) throws {
        // Only a batch that moves records pays for reading the zone's share roots.
        let candidates = SharePlanner.moves(writes, existing: existing, shareRoots: [])
        guard !candidates.isEmpty else { return }
        let shareRoots = Set(
            try String.fetchAll(
                db.cachedStatement(sql: "SELECT root_record_name FROM shares WHERE zone_id = ? AND root_record_name IS NOT NULL"),
                arguments: [zoneRowID])
        )
        guard !shareRoots.isEmpty else { return }
        for write in SharePlanner.moves(candidates, existing: existing, shareRoots: shareRoots) {
            let oldParent = existing[write.recordName]?.header.parent
            let oldRoot = try oldParent.flatMap { try roots(of: [$0], zoneRowID: zoneRowID, among: shareRoots, db)[$0] }
            let newRoot = try write.parent.flatMap { try roots(of: [$0], zoneRowID: zoneRowID, among: shareRoots, db)[$0] }
            guard oldRoot != newRoot else { continue }
            let (tree, treeArguments) = treeCTE(zoneRowID: zoneRowID, roots: [write.recordName])
            let subtree = try String.fetchAll(db.cachedStatement(sql: "\(tree) SELECT name FROM tree"), arguments: StatementArguments(treeArguments))
            for name in subtree {
                sequence += 1
                try db.cachedStatement(sql: "UPDATE records SET change_seq = ? WHERE zone_id = ? AND record_name = ?").execute(arguments: [
                    sequence, zoneRowID, name,
                ])
                if let oldRoot {
                    try db.cachedStatement(
                        sql: """
                            INSERT INTO share_exits (zone_id, root_record_name, record_name, change_seq) VALUES (?, ?, ?, ?)
                            ON CONFLICT (zone_id, root_record_name, record_name) DO UPDATE SET change_seq = excluded.change_seq
                            """
                    ).execute(arguments: [zoneRowID, oldRoot, name, sequence]
                    )
                }
            }
        }
    }
}
