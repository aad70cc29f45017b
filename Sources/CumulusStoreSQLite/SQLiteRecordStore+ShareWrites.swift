import CumulusModel
import CumulusStore
import Foundation
import GRDB

/// A share change that passed its checks, ready to apply after the batch's records.
struct PreparedShareChange {
    enum Target {
        case create(rootRecordName: String?)
        case update(shareID: Int64)
    }

    var recordName: String
    var target: Target
    var publicPermission: SharePermission?
    var participants: [ResolvedParticipant]?
}

extension SQLiteRecordStore {
    // MARK: - A participant's writes

    /// Checks every operation of a participant's batch against what their shares allow, inside the write transaction.
    ///
    /// Records outside the shared hierarchy answer `NOT_FOUND`, exactly as missing ones, so nothing about them leaks.
    static func enforce(
        _ access: ParticipantAccess, on plan: inout RecordBatchPlan, batch: RecordBatch, existing: [String: StoredRecord], zoneRowID: Int64,
        _ db: Database
    ) throws {
        let names = batch.operations.map(\.recordName)
        var toPlace = Set<String>()
        for operation in batch.operations {
            if existing[operation.recordName] != nil { toPlace.insert(operation.recordName) }
            if case .set(let parent) = operation.parent { toPlace.insert(parent) }
        }
        let placed = access.zoneWide ? [:] : try roots(of: Array(toPlace), zoneRowID: zoneRowID, among: access.roots, db)
        var createdParents: [String: String] = [:]
        for operation in batch.operations where existing[operation.recordName] == nil {
            if case .set(let parent) = operation.parent { createdParents[operation.recordName] = parent }
        }
        func root(of name: String, depth: Int = 0) -> String? {
            if let root = placed[name] { return root }
            guard depth < 200, let parent = createdParents[name] else { return nil }
            return root(of: parent, depth: depth + 1)
        }

        for (index, operation) in batch.operations.enumerated() {
            let name = operation.recordName
            let current = existing[name]
            func deny(_ code: ServerErrorCode, _ reason: String) {
                plan.fail(index, RecordFailure(recordName: name, code: code, reason: reason), atomic: batch.atomic, recordNames: names)
            }
            let touchesShare =
                ShareRecord.isShareType(operation.recordType) || ShareRecord.isShareType(current?.header.recordType)
                || access.shareRecordNames.contains(name) || name == ShareRecord.zoneWideRecordName
            if access.zoneWide {
                if current == nil, operation.operationType.isDelete { continue }
                if touchesShare { deny(.accessDenied, "only the owner can change a share"); continue }
                if !access.zoneWideWritable { deny(.accessDenied, "this share is read-only for you"); continue }
                continue
            }
            if let current {
                // The share records a participant can read are theirs to see, but only the owner changes them.
                if access.shareRecordNames.contains(name) {
                    deny(.accessDenied, "only the owner can change a share")
                    continue
                }
                guard let recordRoot = root(of: name) else { deny(.notFound, "record \(name) does not exist"); continue }
                if touchesShare || ShareRecord.isShareType(current.header.recordType) {
                    deny(.accessDenied, "only the owner can change a share")
                    continue
                }
                if !access.writableRoots.contains(recordRoot) { deny(.accessDenied, "this share is read-only for you"); continue }
                if operation.operationType.isDelete, name == recordRoot {
                    deny(.accessDenied, "only the owner can delete the root record of a share")
                    continue
                }
                if case .set(let parent) = operation.parent, parent != current.header.parent {
                    guard let parentRoot = root(of: parent), access.writableRoots.contains(parentRoot) else {
                        deny(.accessDenied, "a shared record's parent must stay in the shared hierarchy")
                        continue
                    }
                }
            } else {
                if operation.operationType.isDelete { continue }  // deleting a missing record reveals nothing
                if touchesShare { deny(.accessDenied, "only the owner can create a share"); continue }
                guard case .set(let parent) = operation.parent, let parentRoot = root(of: parent) else {
                    deny(.accessDenied, "records created through a share need a parent in the shared hierarchy")
                    continue
                }
                if !access.writableRoots.contains(parentRoot) { deny(.accessDenied, "this share is read-only for you"); continue }
            }
        }
    }

    // MARK: - Share changes

    /// Checks the batch's share changes against the sharing rules, failing their operations where they break one.
    static func prepareShareChanges(
        _ plan: inout RecordBatchPlan, batch: RecordBatch, existing: [String: StoredRecord], zoneRowID: Int64, _ db: Database
    ) throws -> [PreparedShareChange] {
        guard !batch.shareChanges.isEmpty else { return [] }
        let names = batch.operations.map(\.recordName)
        var prepared: [PreparedShareChange] = []
        let writtenNames = Set(plan.writes.map(\.recordName))
        for change in batch.shareChanges {
            guard let index = names.firstIndex(of: change.recordName) else { continue }
            guard case .write = plan.outcomes[index] else { continue }
            guard case .save(let rootName, let publicPermission, let participants) = change.kind else { continue }
            func fail(_ reason: String) {
                plan.fail(
                    index, RecordFailure(recordName: change.recordName, code: .badRequest, reason: reason), atomic: batch.atomic, recordNames: names)
            }
            if batch.zoneName == ZoneID.defaultZoneName {
                fail("shares live in custom zones; the default zone cannot be shared")
                continue
            }
            let current = try Row.fetchOne(
                db, sql: "SELECT id, root_record_name, public_permission FROM shares WHERE zone_id = ? AND share_record_name = ?",
                arguments: [zoneRowID, change.recordName]
            )
            let effectivePublic = publicPermission ?? (current.flatMap { SharePermission(rawValue: $0[2]) } ?? .none)
            if effectivePublic != .none, let participants, participants.contains(where: { !$0.removed }) {
                let existingUsers = Set(
                    try String.fetchAll(
                        db, sql: "SELECT user_record_name FROM share_participants WHERE share_id = ? AND status <> 'REMOVED'",
                        arguments: [current?[0] as Int64? ?? -1]
                    )
                )
                if participants.contains(where: { !$0.removed && !existingUsers.contains($0.userRecordName) }) {
                    fail("participants can be invited only while publicPermission is NONE; anyone with the link can join a public share")
                    continue
                }
            }
            if let current {
                let storedRoot: String? = current[1]
                if let rootName, rootName != storedRoot {
                    fail("forRecord: a share's root cannot change")
                    continue
                }
                prepared.append(
                    PreparedShareChange(
                        recordName: change.recordName, target: .update(shareID: current[0]), publicPermission: publicPermission,
                        participants: participants)
                )
                continue
            }
            let shareRoots = Set(
                try String.fetchAll(
                    db, sql: "SELECT root_record_name FROM shares WHERE zone_id = ? AND root_record_name IS NOT NULL", arguments: [zoneRowID]))
            let zoneShared =
                try Bool.fetchOne(
                    db, sql: "SELECT EXISTS (SELECT 1 FROM shares WHERE zone_id = ? AND root_record_name IS NULL)", arguments: [zoneRowID]) ?? false
            if zoneShared {
                fail("the zone is already shared as a whole (cloudkit.zoneshare)")
                continue
            }
            if let rootName {
                let rootStored = try liveRecords(db, zoneRowID: zoneRowID, zoneID: ZoneID(zoneName: batch.zoneName), names: [rootName])
                guard writtenNames.contains(rootName) || !rootStored.isEmpty else {
                    fail("forRecord: record \(rootName) does not exist in zone \(batch.zoneName)")
                    continue
                }
                if shareRoots.contains(rootName) {
                    fail("forRecord: record \(rootName) is already shared")
                    continue
                }
                if let ancestor = try roots(of: [rootName], zoneRowID: zoneRowID, among: shareRoots, db)[rootName] {
                    fail("forRecord: record \(rootName) is already shared through its ancestor \(ancestor)")
                    continue
                }
                let (tree, treeArguments) = treeCTE(zoneRowID: zoneRowID, roots: [rootName])
                let sharedBelow = try String.fetchOne(
                    db, sql: "\(tree) SELECT name FROM tree WHERE name IN (SELECT value FROM json_each(?)) LIMIT 1",
                    arguments: StatementArguments(treeArguments + [Array(shareRoots).jsonArray.databaseValue])
                )
                if let sharedBelow {
                    fail("forRecord: record \(sharedBelow) below \(rootName) is already shared")
                    continue
                }
            } else if !shareRoots.isEmpty {
                fail("the zone has hierarchy shares; it cannot also be shared as a whole")
                continue
            }
            prepared.append(
                PreparedShareChange(
                    recordName: change.recordName, target: .create(rootRecordName: rootName), publicPermission: publicPermission,
                    participants: participants)
            )
        }
        return prepared
    }

    /// Stores share metadata after the batch's records are written.
    static func applyShareChanges(_ changes: [PreparedShareChange], zoneRowID: Int64, batch: RecordBatch, _ db: Database) throws {
        for change in changes {
            let shareID: Int64
            var affected = Set<String>()
            switch change.target {
            case .create(let rootName):
                let shortGUID: String
                if let rootName {
                    let existingGUID = try String.fetchOne(
                        db, sql: "SELECT short_guid FROM records WHERE zone_id = ? AND record_name = ?", arguments: [zoneRowID, rootName]
                    )
                    shortGUID = existingGUID ?? ShortGUID.make()
                    // The root points at its share, and takes a new change tag so every feed shows it.
                    let sequence = try Int64.fetchOne(
                        db, sql: "UPDATE zones SET change_seq = change_seq + 1 WHERE id = ? RETURNING change_seq", arguments: [zoneRowID])!
                    try db.execute(
                        sql: "UPDATE records SET share_name = ?, short_guid = ?, change_seq = ? WHERE zone_id = ? AND record_name = ?",
                        arguments: [change.recordName, shortGUID, sequence, zoneRowID, rootName]
                    )
                } else {
                    let existingGUID = try String.fetchOne(db, sql: "SELECT short_guid FROM zones WHERE id = ?", arguments: [zoneRowID])
                    shortGUID = existingGUID ?? ShortGUID.make()
                    try db.execute(sql: "UPDATE zones SET short_guid = ? WHERE id = ?", arguments: [shortGUID, zoneRowID])
                }
                try db.execute(
                    sql: "INSERT INTO shares (zone_id, share_record_name, root_record_name, short_guid, public_permission) VALUES (?, ?, ?, ?, ?)",
                    arguments: [zoneRowID, change.recordName, rootName, shortGUID, (change.publicPermission ?? .none).rawValue]
                )
                shareID = db.lastInsertedRowID
                try db.execute(
                    sql:
                        "INSERT INTO share_participants (share_id, user_record_name, type, permission, status, position) VALUES (?, ?, 'OWNER', 'READ_WRITE', 'ACCEPTED', 0)",
                    arguments: [shareID, batch.author]
                )
            case .update(let id):
                shareID = id
                if let permission = change.publicPermission {
                    let old =
                        SharePermission(
                            rawValue: try String.fetchOne(db, sql: "SELECT public_permission FROM shares WHERE id = ?", arguments: [id]) ?? "NONE")
                        ?? .none
                    if old == .none, permission != .none {
                        // Going public removes pending invitations; accepted participants stay.
                        affected.formUnion(
                            try String.fetchAll(
                                db, sql: "SELECT user_record_name FROM share_participants WHERE share_id = ? AND status = 'INVITED'", arguments: [id])
                        )
                        try db.execute(
                            sql: "UPDATE share_participants SET status = 'REMOVED' WHERE share_id = ? AND status = 'INVITED'", arguments: [id])
                    } else if old != .none, permission == .none {
                        // Going private removes everyone but the owner.
                        affected.formUnion(
                            try String.fetchAll(
                                db, sql: "SELECT user_record_name FROM share_participants WHERE share_id = ? AND type <> 'OWNER'", arguments: [id]))
                        try db.execute(
                            sql: "UPDATE share_participants SET status = 'REMOVED' WHERE share_id = ? AND type <> 'OWNER'", arguments: [id])
                    } else if permission != .none {
                        try db.execute(
                            sql: "UPDATE share_participants SET permission = ? WHERE share_id = ? AND type = 'PUBLIC_USER'",
                            arguments: [permission.rawValue, id])
                    }
                    try db.execute(sql: "UPDATE shares SET public_permission = ? WHERE id = ?", arguments: [permission.rawValue, id])
                }
            }
            if let participants = change.participants {
                let listed = Set(participants.filter { !$0.removed }.map(\.userRecordName))
                // Participants missing from the list are removed, as when a client saves a share without them.
                let dropped = try String.fetchAll(
                    db, sql: "SELECT user_record_name FROM share_participants WHERE share_id = ? AND type <> 'OWNER' AND status <> 'REMOVED'",
                    arguments: [shareID]
                ).filter { !listed.contains($0) }
                for user in dropped + participants.filter(\.removed).map(\.userRecordName) {
                    try db.execute(
                        sql: "UPDATE share_participants SET status = 'REMOVED' WHERE share_id = ? AND user_record_name = ? AND type <> 'OWNER'",
                        arguments: [shareID, user]
                    )
                    affected.insert(user)
                }
                for participant in participants where !participant.removed && participant.userRecordName != batch.author {
                    try db.execute(
                        sql: """
                            INSERT INTO share_participants (share_id, user_record_name, type, permission, status, email, position)
                            VALUES (?, ?, 'USER', ?, 'INVITED', ?, (SELECT COALESCE(MAX(position), 0) + 1 FROM share_participants WHERE share_id = ?))
                            ON CONFLICT (share_id, user_record_name) DO UPDATE SET permission = excluded.permission,
                                status = CASE status WHEN 'REMOVED' THEN 'INVITED' ELSE status END, email = COALESCE(excluded.email, email)
                            """,
                        arguments: [shareID, participant.userRecordName, participant.permission.rawValue, participant.email, shareID]
                    )
                    affected.insert(participant.userRecordName)
                }
            }
            try refreshViews(db, zoneRowID: zoneRowID, users: affected)
        }
    }

    /// Ends the shares whose record or root was deleted: participants lose access, and the surviving half (the root's
    /// `share` reference, or the share record) is cleared with a new change sequence.
    static func endShares(_ db: Database, zoneRowID: Int64, deletedNames: [String], sequence: inout Int64, batch: RecordBatch) throws {
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT id, share_record_name, root_record_name FROM shares WHERE zone_id = ?
                AND (share_record_name IN (SELECT value FROM json_each(?1)) OR root_record_name IN (SELECT value FROM json_each(?1)))
                """.replacingOccurrences(of: "?1", with: "?2"),
            arguments: [zoneRowID, deletedNames.jsonArray]
        )
        let deleted = Set(deletedNames)
        for row in rows {
            let shareID: Int64 = row[0]
            let shareRecordName: String = row[1]
            let rootName: String? = row[2]
            let users = Set(
                try String.fetchAll(
                    db, sql: "SELECT user_record_name FROM share_participants WHERE share_id = ? AND type <> 'OWNER'", arguments: [shareID]))
            try db.execute(sql: "DELETE FROM shares WHERE id = ?", arguments: [shareID])
            if let rootName, !deleted.contains(rootName) {
                sequence += 1
                try db.execute(
                    sql: "UPDATE records SET share_name = NULL, change_seq = ? WHERE zone_id = ? AND record_name = ? AND deleted = 0",
                    arguments: [sequence, zoneRowID, rootName]
                )
            }
            if !deleted.contains(shareRecordName) {
                sequence += 1
                try db.execute(
                    sql: """
                        UPDATE records SET deleted = 1, fields = NULL, change_seq = ?, modified_at = ?, modified_by = ?, modified_device = ?
                        WHERE zone_id = ? AND record_name = ? AND deleted = 0
                        """,
                    arguments: [sequence, batch.timestamp, batch.author, batch.deviceID, zoneRowID, shareRecordName]
                )
            }
            // The batch holds the zone's sequence until it ends; views take positions from the stored one.
            try db.execute(sql: "UPDATE zones SET change_seq = ? WHERE id = ?", arguments: [sequence, zoneRowID])
            try refreshViews(db, zoneRowID: zoneRowID, users: users)
            sequence = try Int64.fetchOne(db, sql: "SELECT change_seq FROM zones WHERE id = ?", arguments: [zoneRowID]) ?? sequence
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
        let moved = writes.filter { write in
            guard let previous = existing[write.recordName] else { return false }
            return previous.header.parent != write.parent
        }
        guard !moved.isEmpty else { return }
        let shareRoots = Set(
            try String.fetchAll(
                db, sql: "SELECT root_record_name FROM shares WHERE zone_id = ? AND root_record_name IS NOT NULL", arguments: [zoneRowID])
        )
        guard !shareRoots.isEmpty else { return }
        for write in moved where !shareRoots.contains(write.recordName) {
            let oldParent = existing[write.recordName]?.header.parent
            let oldRoot = try oldParent.flatMap { try roots(of: [$0], zoneRowID: zoneRowID, among: shareRoots, db)[$0] }
            let newRoot = try write.parent.flatMap { try roots(of: [$0], zoneRowID: zoneRowID, among: shareRoots, db)[$0] }
            guard oldRoot != newRoot else { continue }
            let (tree, treeArguments) = treeCTE(zoneRowID: zoneRowID, roots: [write.recordName])
            let subtree = try String.fetchAll(db, sql: "\(tree) SELECT name FROM tree", arguments: StatementArguments(treeArguments))
            for name in subtree {
                sequence += 1
                try db.execute(
                    sql: "UPDATE records SET change_seq = ? WHERE zone_id = ? AND record_name = ?", arguments: [sequence, zoneRowID, name])
                if let oldRoot {
                    try db.execute(
                        sql: """
                            INSERT INTO share_exits (zone_id, root_record_name, record_name, change_seq) VALUES (?, ?, ?, ?)
                            ON CONFLICT (zone_id, root_record_name, record_name) DO UPDATE SET change_seq = excluded.change_seq
                            """,
                        arguments: [zoneRowID, oldRoot, name, sequence]
                    )
                }
            }
        }
    }
}
