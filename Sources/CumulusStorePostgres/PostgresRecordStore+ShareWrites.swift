import CumulusModel
import CumulusStore
import Logging
import PostgresNIO

extension PostgresRecordStore {
    // MARK: - A participant's writes

    /// Plans a batch; for a participant, as ``SharePlanner/plan(_:access:existing:placed:planner:)`` does, reading where
    /// the records sit in the shared hierarchies inside the write transaction.
    static func plan(
        _ batch: RecordBatch, existing: [String: StoredRecord], planner: RecordBatchPlanner, zoneRowID: Int64, _ connection: PostgresConnection,
        logger: Logger
    ) async throws -> (RecordBatchPlan, visible: [String: StoredRecord]) {
        guard let access = batch.access else { return (planner.plan(batch, existing: existing), existing) }
        let toPlace = SharePlanner.namesToPlace(batch, existing: existing)
        let placed =
            access.zoneWide ? [:] : try await roots(of: Array(toPlace), zoneRowID: zoneRowID, among: access.roots, connection, logger: logger)
        return SharePlanner.plan(batch, access: access, existing: existing, placed: placed, planner: planner)
    }

    // MARK: - Share changes

    /// Reads what ``SharePlanner/checkShareChanges(_:batch:facts:)`` needs about the zone (a statement per fact, for all
    /// candidate roots at once), and checks the batch's share changes.
    static func prepareShareChanges(
        _ plan: inout RecordBatchPlan, batch: RecordBatch, existing: [String: StoredRecord], zoneRowID: Int64, _ connection: PostgresConnection,
        logger: Logger
    ) async throws -> [PlannedShareChange] {
        guard !batch.shareChanges.isEmpty else { return [] }
        var shares: [String: ExistingShare] = [:]
        let rows = try await connection.query(
            """
            SELECT s.share_record_name, s.root_record_name, s.public_permission,
                ARRAY(SELECT user_record_name FROM share_participants WHERE share_id = s.id AND status <> 'REMOVED')
            FROM shares s WHERE s.zone_id = \(zoneRowID)
            """, logger: logger)
        for try await (name, root, permission, users) in rows.decode((String, String?, String, [String]).self) {
            shares[name] = ExistingShare(
                rootRecordName: root, publicPermission: SharePermission(rawValue: permission) ?? .none, activeUsers: Set(users))
        }
        let candidates = Array(SharePlanner.rootsToCheck(batch))
        let hierarchyRoots = Set(shares.values.compactMap(\.rootRecordName))
        var sharedAncestors: [String: String] = [:]
        var sharedDescendants: [String: String] = [:]
        var liveRoots = Set<String>()
        if !candidates.isEmpty {
            liveRoots = Set(
                try await liveRecords(connection, zoneRowID: zoneRowID, zoneID: ZoneID(zoneName: batch.zoneName), names: candidates, logger: logger)
                    .keys)
            if !hierarchyRoots.isEmpty {
                for (candidate, ancestor) in try await roots(of: candidates, zoneRowID: zoneRowID, among: hierarchyRoots, connection, logger: logger)
                where ancestor != candidate {
                    sharedAncestors[candidate] = ancestor
                }
                let below = try await connection.query(
                    """
                    WITH RECURSIVE down(start, name) AS (
                        SELECT c COLLATE "C", c COLLATE "C" FROM unnest(\(candidates)::text[]) AS c
                        UNION SELECT d.start, r.record_name FROM records r JOIN down d ON r.zone_id = \(zoneRowID) AND r.parent_name = d.name
                    )
                    SELECT DISTINCT ON (start) start, name FROM down
                    WHERE name <> start AND name = ANY(\(Array(hierarchyRoots))) ORDER BY start, name
                    """, logger: logger)
                for try await (candidate, root) in below.decode((String, String).self) { sharedDescendants[candidate] = root }
            }
        }
        let facts = ZoneShareFacts(shares: shares, liveRoots: liveRoots, sharedAncestors: sharedAncestors, sharedDescendants: sharedDescendants)
        return SharePlanner.checkShareChanges(&plan, batch: batch, facts: facts)
    }

    /// Stores share metadata after the batch's records are written: the share row, and its participants as
    /// ``SharePlanner/participants(current:owner:previousPublicPermission:publicPermission:listed:)`` decides them.
    static func applyShareChanges(
        _ changes: [PlannedShareChange], zoneRowID: Int64, batch: RecordBatch, _ connection: PostgresConnection, logger: Logger
    ) async throws {
        for change in changes {
            var shareID: Int64?
            var previousPublic: SharePermission = change.publicPermission ?? .none
            if change.isNew {
                let shortGUID: String
                if let rootName = change.rootRecordName {
                    var existingGUID: String?
                    let rows = try await connection.query(
                        "SELECT short_guid FROM records WHERE zone_id = \(zoneRowID) AND record_name = \(rootName)", logger: logger)
                    for try await guid in rows.decode(String?.self) { existingGUID = guid }
                    shortGUID = existingGUID ?? ShortGUID.make()
                    // The root points at its share, and takes a new change tag so every feed shows it.
                    try await connection.query(
                        """
                        WITH z AS (UPDATE zones SET change_seq = change_seq + 1 WHERE id = \(zoneRowID) RETURNING change_seq)
                        UPDATE records SET share_name = \(change.recordName), short_guid = \(shortGUID), change_seq = z.change_seq FROM z
                        WHERE zone_id = \(zoneRowID) AND record_name = \(rootName)
                        """, logger: logger)
                } else {
                    var existingGUID: String?
                    let rows = try await connection.query("SELECT short_guid FROM zones WHERE id = \(zoneRowID)", logger: logger)
                    for try await guid in rows.decode(String?.self) { existingGUID = guid }
                    shortGUID = existingGUID ?? ShortGUID.make()
                    try await connection.query("UPDATE zones SET short_guid = \(shortGUID) WHERE id = \(zoneRowID)", logger: logger)
                }
                let inserted = try await connection.query(
                    """
                    INSERT INTO shares (zone_id, share_record_name, root_record_name, short_guid, public_permission)
                    VALUES (\(zoneRowID), \(change.recordName), \(change.rootRecordName), \(shortGUID), \(previousPublic.rawValue)) RETURNING id
                    """, logger: logger)
                for try await id in inserted.decode(Int64.self) { shareID = id }
            } else {
                let rows = try await connection.query(
                    "SELECT id, public_permission FROM shares WHERE zone_id = \(zoneRowID) AND share_record_name = \(change.recordName)",
                    logger: logger)
                for try await (id, permission) in rows.decode((Int64, String).self) {
                    shareID = id
                    previousPublic = SharePermission(rawValue: permission) ?? .none
                }
                if let shareID, let permission = change.publicPermission {
                    try await connection.query("UPDATE shares SET public_permission = \(permission.rawValue) WHERE id = \(shareID)", logger: logger)
                }
            }
            guard let shareID else { throw StoreError(.unexpected, "share \(change.recordName) vanished while it was saved") }
            var current: [ShareParticipantState] = []
            let rows = try await connection.query(
                "SELECT user_record_name, type, permission, status, email FROM share_participants WHERE share_id = \(shareID) ORDER BY position",
                logger: logger)
            for try await (user, type, permission, status, email) in rows.decode((String, String, String, String, String?).self) {
                current.append(participant(user, type, permission, status, email))
            }
            let planned = SharePlanner.participants(
                current: current, owner: batch.author, previousPublicPermission: previousPublic, publicPermission: change.publicPermission,
                listed: change.participants)
            if planned.participants != current {
                let participants = planned.participants
                try await connection.query("DELETE FROM share_participants WHERE share_id = \(shareID)", logger: logger)
                try await connection.query(
                    """
                    INSERT INTO share_participants (share_id, user_record_name, type, permission, status, email, position)
                    SELECT \(shareID), u.name, u.type, u.permission, u.status, u.email, u.position
                    FROM UNNEST(\(participants.map(\.userRecordName)), \(participants.map(\.type.rawValue)),
                        \(participants.map(\.permission.rawValue)), \(participants.map(\.status.rawValue)), \(NullableTextArray(participants.map(\.email))),
                        \(participants.indices.map(Int64.init))) AS u(name, type, permission, status, email, position)
                    """, logger: logger)
            }
            try await refreshViews(connection, zoneRowID: zoneRowID, users: planned.affected, logger: logger)
        }
    }

    /// Ends the shares whose record or root was deleted (``SharePlanner/endings(of:deleted:)``): participants lose
    /// access, and the surviving half (the root's `share` reference, or the share record) is cleared with a new change
    /// sequence.
    static func endShares(
        _ connection: PostgresConnection, zoneRowID: Int64, deletedNames: [String], sequence: inout Int64, batch: RecordBatch, logger: Logger
    ) async throws {
        let rows = try await connection.query(
            """
            SELECT id, share_record_name, root_record_name FROM shares WHERE zone_id = \(zoneRowID)
            AND (share_record_name = ANY(\(deletedNames)) OR root_record_name = ANY(\(deletedNames)))
            """, logger: logger)
        var shareIDs: [String: Int64] = [:]
        var shares: [(shareRecordName: String, rootRecordName: String?)] = []
        for try await (id, name, root) in rows.decode((Int64, String, String?).self) {
            shareIDs[name] = id
            shares.append((name, root))
        }
        for ending in SharePlanner.endings(of: shares, deleted: Set(deletedNames)) {
            guard let shareID = shareIDs[ending.shareRecordName] else { continue }
            var users = Set<String>()
            let participants = try await connection.query(
                "SELECT user_record_name FROM share_participants WHERE share_id = \(shareID) AND type <> 'OWNER'", logger: logger)
            for try await user in participants.decode(String.self) { users.insert(user) }
            try await connection.query("DELETE FROM shares WHERE id = \(shareID)", logger: logger)
            if let root = ending.rootToClear {
                sequence += 1
                try await connection.query(
                    """
                    UPDATE records SET share_name = NULL, change_seq = \(sequence)
                    WHERE zone_id = \(zoneRowID) AND record_name = \(root) AND NOT deleted
                    """, logger: logger)
            }
            if ending.deletesShareRecord {
                sequence += 1
                try await connection.query(
                    """
                    UPDATE records SET deleted = true, fields = NULL, change_seq = \(sequence), modified_at = \(batch.timestamp),
                        modified_by = \(batch.author), modified_device = \(batch.deviceID)
                    WHERE zone_id = \(zoneRowID) AND record_name = \(ending.shareRecordName) AND NOT deleted
                    """, logger: logger)
            }
            // The batch holds the zone's sequence until it ends; views take positions from the stored one.
            try await connection.query("UPDATE zones SET change_seq = \(sequence) WHERE id = \(zoneRowID)", logger: logger)
            try await refreshViews(connection, zoneRowID: zoneRowID, users: users, logger: logger)
            for try await stored in try await connection.query("SELECT change_seq FROM zones WHERE id = \(zoneRowID)", logger: logger).decode(
                Int64.self)
            {
                sequence = stored
            }
        }
    }

    /// Records whose parent changed may have left (or joined) a shared hierarchy, with everything below them. Those
    /// records take new change sequences, so the hierarchy they joined delivers them, and the one they left records an
    /// exit, so its participants' feeds report them deleted.
    static func trackHierarchyMoves(
        _ connection: PostgresConnection, zoneRowID: Int64, existing: [String: StoredRecord], writes: [PlannedWrite], sequence: inout Int64,
        logger: Logger
    ) async throws {
        // Only a batch that moves records pays for reading the zone's share roots.
        let candidates = SharePlanner.moves(writes, existing: existing, shareRoots: [])
        guard !candidates.isEmpty else { return }
        var shareRoots = Set<String>()
        let rows = try await connection.query(
            "SELECT root_record_name FROM shares WHERE zone_id = \(zoneRowID) AND root_record_name IS NOT NULL", logger: logger)
        for try await root in rows.decode(String.self) { shareRoots.insert(root) }
        guard !shareRoots.isEmpty else { return }
        let moves = SharePlanner.moves(candidates, existing: existing, shareRoots: shareRoots)
        let ends = Array(Set(moves.flatMap { [existing[$0.recordName]?.header.parent, $0.parent].compactMap { $0 } }))
        let placed = try await roots(of: ends, zoneRowID: zoneRowID, among: shareRoots, connection, logger: logger)
        for write in moves {
            let oldRoot = existing[write.recordName]?.header.parent.flatMap { placed[$0] }
            let newRoot = write.parent.flatMap { placed[$0] }
            guard oldRoot != newRoot else { continue }
            let subtree = try await subtree(of: [write.recordName], zoneRowID: zoneRowID, connection, logger: logger)
            guard !subtree.isEmpty else { continue }
            let sequences = subtree.indices.map { sequence + Int64($0) + 1 }
            sequence += Int64(subtree.count)
            try await connection.query(
                """
                UPDATE records r SET change_seq = u.seq FROM UNNEST(\(subtree), \(sequences)) AS u(name, seq)
                WHERE r.zone_id = \(zoneRowID) AND r.record_name = u.name
                """, logger: logger)
            if let oldRoot {
                try await connection.query(
                    """
                    INSERT INTO share_exits (zone_id, root_record_name, record_name, change_seq)
                    SELECT \(zoneRowID), \(oldRoot), u.name, u.seq FROM UNNEST(\(subtree), \(sequences)) AS u(name, seq)
                    ON CONFLICT (zone_id, root_record_name, record_name) DO UPDATE SET change_seq = excluded.change_seq
                    """, logger: logger)
            }
        }
    }
}
