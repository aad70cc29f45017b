import CumulusModel
import CumulusStore
import Foundation
import GRDB

// MARK: - Running scripts

extension SQLiteRecordStore {
    /// Runs a script to its end inside the transaction `db` is in: each action is SQL on this connection.
    static func run<Output>(_ script: TransactionScript<Output>, _ db: Database) throws -> Output {
        var script = script
        while true {
            switch script {
            case .done(let output): return output
            case .run(let action, let then): script = try then(try perform(action, db))
            }
        }
    }

    // The actions, each the SQL that does it; none decides anything.
    static func perform(_ action: StoreAction, _ db: Database) throws -> StoreAnswer {
        switch action {
        case .findZone(let database, let zoneName, _, _):
            // One writer at a time: SQLite's write transaction is the lock.
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT z.id, z.change_seq, d.id FROM zones z JOIN databases d ON d.id = z.database_id
                        WHERE d.container_id = ? AND d.environment = ? AND d.scope = ? AND d.owner_record_name = ?
                        AND z.zone_name = ? AND z.deleted = 0
                        """),
                arguments: [database.container, database.environment.rawValue, database.scope.rawValue, database.ownerRecordName, zoneName])
            return .zone(row.map { ZoneRow(id: $0[0], databaseID: $0[2], changeSequence: $0[1]) })
        case .createDatabase(let database, let timestamp):
            return .sequence(try ensureDatabase(db, database, timestamp: timestamp))
        case .createZone(let databaseID, let zoneName, let timestamp):
            if let existing = try zoneRow(db, databaseID: databaseID, zoneName: zoneName) {
                return .createdZone(ZoneRow(id: existing.id, databaseID: databaseID, changeSequence: existing.changeSequence), created: false)
            }
            try db.cachedStatement(sql: "INSERT INTO zones (database_id, zone_name, created_at) VALUES (?, ?, ?)").execute(arguments: [
                databaseID, zoneName, timestamp,
            ])
            return .createdZone(ZoneRow(id: db.lastInsertedRowID, databaseID: databaseID, changeSequence: 0), created: true)
        case .countZones(let databaseID):
            // The one writer runs one transaction at a time: nothing creates a zone between this count and the commit.
            let count = try Int.fetchOne(
                db.cachedStatement(sql: "SELECT count(*) FROM zones WHERE database_id = ? AND deleted = 0"), arguments: [databaseID])
            return .count(count ?? 0)
        case .deleteZone(let zone):
            for table in ["shares", "record_references", "records"] {
                try db.cachedStatement(sql: "DELETE FROM \(table) WHERE zone_id = ?").execute(arguments: [zone])
            }
            try db.cachedStatement(sql: "UPDATE zones SET deleted = 1, \(emptyDigest) WHERE id = ?").execute(arguments: [zone])
        case .touchZone(let zone, let databaseID, let sequence):
            try touchZone(db, zoneID: zone, databaseID: databaseID, changeSequence: sequence)
        case .finishZoneWrite(let zone, let databaseID, let sequence, let digest):
            try touchZone(db, zoneID: zone, databaseID: databaseID, changeSequence: sequence, digest: digest)
            try advanceViews(db, zoneRowID: zone, ending: false)
        case .adjustZoneDigest(let zone, let change):
            try adjustZoneDigest(db, zone: zone, by: change)
        case .advanceViews(let zone, let ending):
            try advanceViews(db, zoneRowID: zone, ending: ending)
        case .setZoneSequence(let zone, let sequence):
            try db.cachedStatement(sql: "UPDATE zones SET change_seq = ? WHERE id = ?").execute(arguments: [sequence, zone])
        case .takeZoneSequence(let zone):
            return .sequence(
                try Int64.fetchOne(
                    db.cachedStatement(sql: "UPDATE zones SET change_seq = change_seq + 1 WHERE id = ? RETURNING change_seq"), arguments: [zone])!)
        case .readZoneSequence(let zone):
            return .sequence(try Int64.fetchOne(db.cachedStatement(sql: "SELECT change_seq FROM zones WHERE id = ?"), arguments: [zone]) ?? 0)

        case .readRecords(let zone, let zoneID, let names):
            return .records(try liveRecords(db, zoneRowID: zone, zoneID: zoneID, names: names))
        case .readRoots(let zone, let names, let among):
            return .names(try roots(of: names, zoneRowID: zone, among: among, db))
        case .readRootsBelow(let zone, let candidates, let among):
            var below: [String: String] = [:]
            for candidate in candidates {
                let (tree, treeArguments) = treeCTE(zoneRowID: zone, roots: [candidate])
                let name = try String.fetchOne(
                    db.cachedStatement(
                        sql: "\(tree) SELECT name FROM tree WHERE name <> ? AND name IN (SELECT value FROM json_each(?)) ORDER BY name LIMIT 1"),
                    arguments: StatementArguments(treeArguments + [candidate.databaseValue, Array(among).jsonArray.databaseValue]))
                if let name { below[candidate] = name }
            }
            return .names(below)
        case .readSubtree(let zone, let roots):
            let (tree, treeArguments) = treeCTE(zoneRowID: zone, roots: Set(roots))
            return .list(try String.fetchAll(db.cachedStatement(sql: "\(tree) SELECT name FROM tree"), arguments: StatementArguments(treeArguments)))
        case .saveRecords(let zone, let writes, let sequences):
            let replaced = try liveSequences(db, zone: zone, names: writes.map(\.recordName))
            try saveRecords(writes, sequences: sequences, zone: zone, db)
            return .liveSequences(replaced)
        case .saveRecordsFinishingZone(let zone, let writes, let sequences, let names, let replacedAt, let digest):
            // The three actions one after another: in-process SQLite has no round trip to save.
            if !names.isEmpty { _ = try perform(.keepVersions(zone: zone.id, names: names, replacedAt: replacedAt), db) }
            try saveRecords(writes, sequences: sequences, zone: zone.id, db)
            let sequence = sequences.last ?? zone.changeSequence
            _ = try perform(.finishZoneWrite(zone: zone.id, databaseID: zone.databaseID, sequence: sequence, digest: digest), db)
        case .readReferrers(let zone, let targets):
            return .list(
                try String.fetchAll(
                    db.cachedStatement(
                        sql: """
                            SELECT DISTINCT r.source_name FROM record_references r
                            JOIN records s ON s.zone_id = r.zone_id AND s.record_name = r.source_name AND s.deleted = 0
                            WHERE r.zone_id = ? AND r.target_name IN (SELECT value FROM json_each(?))
                            """),
                    arguments: [zone, targets.jsonArray]))
        case .deleteRecords(let zone, let names, let sequences, let modified):
            let replaced = try liveSequences(db, zone: zone, names: names)
            let tombstone = try db.cachedStatement(
                sql: """
                    UPDATE records SET deleted = 1, fields = NULL, change_seq = ?, share_name = NULL,
                        modified_at = ?, modified_by = ?, modified_device = ?
                    WHERE zone_id = ? AND record_name = ? AND deleted = 0
                    """)
            for (name, sequence) in zip(names, sequences) {
                try tombstone.execute(arguments: [sequence, modified.timestamp, modified.userRecordName, modified.deviceID, zone, name])
            }
            try db.cachedStatement(sql: "DELETE FROM record_references WHERE zone_id = ? AND source_name IN (SELECT value FROM json_each(?))")
                .execute(arguments: [zone, names.jsonArray])
            return .liveSequences(replaced)
        case .renumberRecords(let zone, let names, let sequences):
            let replaced = try liveSequences(db, zone: zone, names: names)
            let renumber = try db.cachedStatement(sql: "UPDATE records SET change_seq = ? WHERE zone_id = ? AND record_name = ?")
            for (name, sequence) in zip(names, sequences) { try renumber.execute(arguments: [sequence, zone, name]) }
            return .liveSequences(replaced)
        case .recordExits(let zone, let root, let names, let sequences):
            let exit = try db.cachedStatement(
                sql: """
                    INSERT INTO share_exits (zone_id, root_record_name, record_name, change_seq) VALUES (?, ?, ?, ?)
                    ON CONFLICT (zone_id, root_record_name, record_name) DO UPDATE SET change_seq = excluded.change_seq
                    """)
            for (name, sequence) in zip(names, sequences) { try exit.execute(arguments: [zone, root, name, sequence]) }
        case .scanRecordNames(let zone, let after, let limit):
            return .modifiedTimes(try scanRecordNames(db, zone: zone, after: after, limit: limit))
        case .readNamesReplaced(let zone, let after, let upper, let time):
            return .list(try namesReplaced(db, zone: zone, after: after, through: upper, since: time))
        case .readVersions(let zone, let zoneID, let names, let time):
            return .records(try versions(db, zone: zone, zoneID: zoneID, names: names, at: time))
        case .keepVersions(let zone, let names, let replacedAt):
            try keepVersions(db, zone: zone, names: names, replacedAt: replacedAt)
        case .attachAssets(let attachments):
            try attachAssets(attachments, db)

        case .readShareFacts(let zone):
            return .shares(try shareFacts(zone: zone, db))
        case .readShareRows(let zone, let names):
            let condition =
                names == nil
                ? "" : "AND (share_record_name IN (SELECT value FROM json_each(?2)) OR root_record_name IN (SELECT value FROM json_each(?2)))"
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: "SELECT id, share_record_name, root_record_name, public_permission FROM shares WHERE zone_id = ?1 \(condition) ORDER BY id"),
                arguments: names.map { [zone, $0.jsonArray] } ?? [zone])
            return .shareRows(
                rows.map {
                    ShareRow(id: $0[0], shareRecordName: $0[1], rootRecordName: $0[2], publicPermission: SharePermission(rawValue: $0[3]) ?? .none)
                })
        case .readShare(let key):
            let found: [(id: Int64, state: ShareState)]
            switch key {
            case .shortGUID(let shortGUID): found = try loadShares(db, where: "s.short_guid = ?", arguments: [shortGUID])
            case .id(let id): found = try loadShares(db, where: "s.id = ?", arguments: [id])
            case .record(let zone, let name): found = try loadShares(db, where: "s.zone_id = ? AND s.share_record_name = ?", arguments: [zone, name])
            }
            return .share(found.first)
        case .readParticipants(let shareID):
            return .participants(try participants(shareID: shareID, db))
        case .readShortGUID(let zone, let recordName):
            if let recordName {
                return .text(
                    try String.fetchOne(
                        db.cachedStatement(sql: "SELECT short_guid FROM records WHERE zone_id = ? AND record_name = ?"),
                        arguments: [zone, recordName]))
            }
            return .text(try String.fetchOne(db.cachedStatement(sql: "SELECT short_guid FROM zones WHERE id = ?"), arguments: [zone]))
        case .pointRootAtShare(let zone, let root, let share, let shortGUID, let sequence):
            let replaced = try liveSequences(db, zone: zone, names: [root])
            try db.cachedStatement(sql: "UPDATE records SET share_name = ?, short_guid = ?, change_seq = ? WHERE zone_id = ? AND record_name = ?")
                .execute(arguments: [share, shortGUID, sequence, zone, root])
            return .liveSequences(replaced)
        case .setZoneShortGUID(let zone, let shortGUID):
            try db.cachedStatement(sql: "UPDATE zones SET short_guid = ? WHERE id = ?").execute(arguments: [shortGUID, zone])
        case .insertShare(let zone, let name, let root, let shortGUID, let publicPermission):
            try db.cachedStatement(
                sql: "INSERT INTO shares (zone_id, share_record_name, root_record_name, short_guid, public_permission) VALUES (?, ?, ?, ?, ?)"
            ).execute(arguments: [zone, name, root, shortGUID, publicPermission.rawValue])
            return .sequence(db.lastInsertedRowID)
        case .setPublicPermission(let shareID, let permission):
            try db.cachedStatement(sql: "UPDATE shares SET public_permission = ? WHERE id = ?").execute(arguments: [permission.rawValue, shareID])
        case .replaceParticipants(let shareID, let participants):
            try db.cachedStatement(sql: "DELETE FROM share_participants WHERE share_id = ?").execute(arguments: [shareID])
            let insert = try db.cachedStatement(
                sql:
                    "INSERT INTO share_participants (share_id, user_record_name, type, permission, status, email, position) VALUES (?, ?, ?, ?, ?, ?, ?)"
            )
            for (position, participant) in participants.enumerated() {
                try insert.execute(arguments: [
                    shareID, participant.userRecordName, participant.type.rawValue, participant.permission.rawValue, participant.status.rawValue,
                    participant.email, position,
                ])
            }
        case .setParticipantStatus(let shareID, let user, let status):
            try db.cachedStatement(sql: "UPDATE share_participants SET status = ? WHERE share_id = ? AND user_record_name = ? AND type <> 'OWNER'")
                .execute(arguments: [status.rawValue, shareID, user])
        case .addPublicParticipant(let shareID, let user, let permission):
            try db.cachedStatement(
                sql: """
                    INSERT INTO share_participants (share_id, user_record_name, type, permission, status, position)
                    VALUES (?1, ?2, 'PUBLIC_USER', ?3, 'ACCEPTED', (SELECT COALESCE(MAX(position), 0) + 1 FROM share_participants WHERE share_id = ?1))
                    """
            ).execute(arguments: [shareID, user, permission.rawValue])
        case .deleteShare(let shareID):
            try db.cachedStatement(sql: "DELETE FROM shares WHERE id = ?").execute(arguments: [shareID])
        case .clearShareReference(let zone, let root, let sequence):
            let replaced = try liveSequences(db, zone: zone, names: [root])
            try db.cachedStatement(sql: "UPDATE records SET share_name = NULL, change_seq = ? WHERE zone_id = ? AND record_name = ? AND deleted = 0")
                .execute(arguments: [sequence, zone, root])
            return .liveSequences(replaced)

        case .readViewAccess(let zone, let user):
            return .viewAccess(try viewAccess(db, zoneRowID: zone, user: user))
        case .readView(let zone, let user):
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT deleted, access FROM shared_zone_views WHERE user_record_name = ? AND zone_id = ?"),
                arguments: [user, zone])
            return .view(
                row.map { row in
                    StoredView(
                        ended: row[0], access: (row[1] as String?).flatMap { try? JSONDecoder().decode(SharedViewAccess.self, from: Data($0.utf8)) })
                })
        case .takeSharedDatabaseSequence(let user):
            return .sequence(try takeSharedDatabaseSequence(db, user: user))
        case .beginView(let zone, let user, let position, let access):
            try db.cachedStatement(sql: "DELETE FROM participant_changes WHERE user_record_name = ? AND zone_id = ?").execute(arguments: [user, zone])
            try db.cachedStatement(
                sql: """
                    INSERT INTO shared_zone_views (user_record_name, zone_id, view_seq, deleted, access) VALUES (?, ?, ?, 0, ?)
                    ON CONFLICT (user_record_name, zone_id) DO UPDATE SET view_seq = excluded.view_seq, deleted = 0, access = excluded.access
                    """
            ).execute(arguments: [user, zone, position, json(access)])
        case .endView(let zone, let user, let position):
            try db.cachedStatement(
                sql: "UPDATE shared_zone_views SET view_seq = ?, deleted = 1, access = NULL WHERE user_record_name = ? AND zone_id = ?"
            ).execute(arguments: [position, user, zone])
            try db.cachedStatement(sql: "DELETE FROM participant_changes WHERE user_record_name = ? AND zone_id = ?").execute(arguments: [user, zone])
        case .changeView(let zone, let user, let position, let access):
            try db.cachedStatement(sql: "UPDATE shared_zone_views SET view_seq = ?, access = ? WHERE user_record_name = ? AND zone_id = ?")
                .execute(arguments: [position, json(access), user, zone])
        case .recordAccessChange(let zone, let user, let old, let new):
            try recordAccessChange(db, zoneRowID: zone, user: user, from: old, to: new)

        case .readUserContainer, .readRecordsCreated, .readUserZones, .countZoneContents, .deleteHistory, .readParticipations,
            .removeParticipant, .deleteAssetReceipts, .anonymizeAuthor, .deleteUserRows:
            return try performUserAction(action, db)
        }
        return .none
    }

    /// Writes records with the statement prepared once and executed per row (in-process SQLite has no round trip to
    /// save, and this is its fastest bulk path), then their `DELETE_SELF` references.
    private static func saveRecords(_ writes: [PlannedWrite], sequences: [Int64], zone: Int64, _ db: Database) throws {
        let upsert = try db.cachedStatement(
            sql: """
                INSERT INTO records (zone_id, record_name, record_type, change_seq, deleted, fields, parent_name, share_name, short_guid,
                    created_at, created_by, created_device, modified_at, modified_by, modified_device)
                VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (zone_id, record_name) DO UPDATE SET
                    record_type = excluded.record_type, change_seq = excluded.change_seq, deleted = 0, fields = excluded.fields,
                    parent_name = excluded.parent_name, share_name = excluded.share_name, short_guid = excluded.short_guid,
                    created_at = excluded.created_at, created_by = excluded.created_by, created_device = excluded.created_device,
                    modified_at = excluded.modified_at, modified_by = excluded.modified_by, modified_device = excluded.modified_device
                """
        )
        for (write, sequence) in zip(writes, sequences) {
            try upsert.execute(arguments: [
                zone, write.recordName, write.recordType, sequence, String(decoding: write.fieldsJSON, as: UTF8.self), write.parent,
                write.share?.recordName, write.shortGUID, write.created.timestamp, write.created.userRecordName, write.created.deviceID,
                write.modified.timestamp, write.modified.userRecordName, write.modified.deviceID,
            ])
        }
        if writes.count == 1 {
            try db.cachedStatement(sql: "DELETE FROM record_references WHERE zone_id = ? AND source_name = ?").execute(arguments: [
                zone, writes[0].recordName,
            ])
        } else {
            try db.cachedStatement(sql: "DELETE FROM record_references WHERE zone_id = ? AND source_name IN (SELECT value FROM json_each(?))")
                .execute(arguments: [zone, writes.map(\.recordName).jsonArray])
        }
        // A record written twice in one batch keeps the references of its last write.
        var last: [String: Int] = [:]
        for (index, write) in writes.enumerated() { last[write.recordName] = index }
        let insertReference = try db.cachedStatement(
            sql: "INSERT OR IGNORE INTO record_references (zone_id, target_name, source_name) VALUES (?, ?, ?)")
        for (index, write) in writes.enumerated() where last[write.recordName] == index {
            for target in write.deleteSelfTargets { try insertReference.execute(arguments: [zone, target, write.recordName]) }
        }
    }

    /// Every share of a zone, with its active participants.
    private static func shareFacts(zone: Int64, _ db: Database) throws -> [String: ExistingShare] {
        var shares: [String: ExistingShare] = [:]
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT s.share_record_name, s.root_record_name, s.public_permission,
                        (SELECT json_group_array(user_record_name) FROM share_participants WHERE share_id = s.id AND status <> 'REMOVED')
                    FROM shares s WHERE s.zone_id = ?
                    """),
            arguments: [zone]
        )
        for row in rows {
            let users = (try? JSONDecoder().decode([String].self, from: Data((row[3] as String? ?? "[]").utf8))) ?? []
            shares[row[0]] = ExistingShare(
                rootRecordName: row[1], publicPermission: SharePermission(rawValue: row[2]) ?? .none, activeUsers: Set(users))
        }
        return shares
    }
}
