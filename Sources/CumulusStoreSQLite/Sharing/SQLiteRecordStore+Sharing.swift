public import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging

// MARK: - Hierarchy membership

extension SQLiteRecordStore {
    /// For each name, its nearest ancestor (or itself) among `roots`, following `parent` links; tombstones keep their
    /// parent, so a deleted record is still placed in its hierarchy.
    static func roots(of names: [String], zoneRowID: Int64, among roots: Set<String>, _ db: Database) throws -> [String: String] {
        guard !names.isEmpty, !roots.isEmpty else { return [:] }
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    WITH RECURSIVE up(start, name, parent, depth) AS (
                        SELECT record_name, record_name, parent_name, 0 FROM records
                        WHERE zone_id = ?1 AND record_name IN (SELECT value FROM json_each(?2))
                        UNION ALL
                        SELECT up.start, r.record_name, r.parent_name, up.depth + 1 FROM up
                        JOIN records r ON r.zone_id = ?1 AND r.record_name = up.parent
                        WHERE up.depth < 1000 AND up.name NOT IN (SELECT value FROM json_each(?3))
                    )
                    SELECT start, name FROM up WHERE name IN (SELECT value FROM json_each(?3))
                    """),
            arguments: [zoneRowID, names.jsonArray, Array(roots).jsonArray]
        )
        var result: [String: String] = [:]
        for row in rows { result[row[0]] = row[1] }
        return result
    }

    /// A common table expression `tree(name)`: the roots and every record below them (tombstones included).
    static func treeCTE(zoneRowID: Int64, roots: Set<String>) -> (String, [DatabaseValue]) {
        (
            """
            WITH RECURSIVE tree(name) AS (
                SELECT value FROM json_each(?)
                UNION
                SELECT r.record_name FROM records r JOIN tree ON r.zone_id = ? AND r.parent_name = tree.name
            )
            """,
            [Array(roots).jsonArray.databaseValue, zoneRowID.databaseValue]
        )
    }
}

// MARK: - Reading shares

extension SQLiteRecordStore {
    static let shareColumns = """
        s.id, s.share_record_name, s.root_record_name, s.short_guid, s.public_permission, s.zone_id,
        z.zone_name, d.container_id, d.environment, d.owner_record_name
        """

    /// Reads a participant selected as `user_record_name, type, permission, status, email`.
    static func participant(_ row: Row) -> ShareParticipantState {
        ShareParticipantState(
            userRecordName: row[0], type: ParticipantType(rawValue: row[1]) ?? .user, permission: SharePermission(rawValue: row[2]) ?? .readOnly,
            status: ParticipantStatus(rawValue: row[3]) ?? .invited, email: row[4]
        )
    }

    /// Loads shares selected by a condition on `s` (shares), `z` (zones) and `d` (databases).
    static func loadShares(_ db: Database, where condition: String, arguments: StatementArguments) throws -> [(id: Int64, state: ShareState)] {
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT \(shareColumns) FROM shares s JOIN zones z ON z.id = s.zone_id JOIN databases d ON d.id = z.database_id
                    WHERE z.deleted = 0 AND \(condition) ORDER BY s.id
                    """),
            arguments: arguments
        )
        return try rows.map { row in
            let shareID: Int64 = row[0]
            let zoneRowID: Int64 = row[5]
            guard let environment = ContainerEnvironment(rawValue: row[8]) else { throw StoreError(.corrupt, "unknown environment") }
            let database = DatabaseRef(container: row[7], environment: environment, scope: .private, ownerRecordName: row[9])
            let zoneName: String = row[6]
            let participants = try participants(shareID: shareID, db)
            let shareRecordName: String = row[1]
            let record = try liveRecords(db, zoneRowID: zoneRowID, zoneID: database.zoneID(zoneName), names: [shareRecordName])[shareRecordName]
            let state = ShareState(
                database: database, zoneName: zoneName, zoneIncarnation: zoneRowID, shareRecordName: shareRecordName, rootRecordName: row[2],
                shortGUID: row[3], publicPermission: SharePermission(rawValue: row[4]) ?? .none, participants: participants, shareRecord: record
            )
            return (shareID, state)
        }
    }

    /// A share's participants, in order.
    static func participants(shareID: Int64, _ db: Database) throws -> [ShareParticipantState] {
        try Row.fetchAll(
            db.cachedStatement(
                sql: "SELECT user_record_name, type, permission, status, email FROM share_participants WHERE share_id = ? ORDER BY position"),
            arguments: [shareID]
        ).map(participant)
    }

    public func share(shortGUID: String, logger: Logger) async throws -> ShareState? {
        try await read { db in try Self.loadShares(db, where: "s.short_guid = ?", arguments: [shortGUID]).first?.state }
    }

    public func shares(named names: [String], zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState] {
        try await read { db in
            guard let databaseID = try Self.databaseID(db, database), let zone = try Self.zoneRow(db, databaseID: databaseID, zoneName: zoneName)
            else {
                return []
            }
            return try Self.loadShares(
                db, where: "s.zone_id = ? AND s.share_record_name IN (SELECT value FROM json_each(?))", arguments: [zone.id, names.jsonArray]
            ).map(\.state)
        }
    }

    public func shares(listing userRecordName: String, zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState] {
        try await read { db in
            guard let databaseID = try Self.databaseID(db, database), let zone = try Self.zoneRow(db, databaseID: databaseID, zoneName: zoneName)
            else {
                return []
            }
            return try Self.loadShares(
                db, where: "s.zone_id = ? AND s.id IN (SELECT share_id FROM share_participants WHERE user_record_name = ?)",
                arguments: [zone.id, userRecordName]
            ).map(\.state)
        }
    }
}

// MARK: - Shared database views

extension SQLiteRecordStore {
    /// Takes the next position of a user's shared database feed.
    static func takeSharedDatabaseSequence(_ db: Database, user: String) throws -> Int64 {
        try Int64.fetchOne(
            db.cachedStatement(
                sql: """
                    INSERT INTO shared_databases (user_record_name, change_seq) VALUES (?, 1)
                    ON CONFLICT (user_record_name) DO UPDATE SET change_seq = change_seq + 1 RETURNING change_seq
                    """),
            arguments: [user]
        )!
    }

    /// A user's access to a zone through the shares they accepted, or `nil` when they see nothing of it.
    static func viewAccess(_ db: Database, zoneRowID: Int64, user: String) throws -> SharedViewAccess? {
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT s.root_record_name, s.share_record_name FROM share_participants p JOIN shares s ON s.id = p.share_id
                    WHERE s.zone_id = ? AND p.user_record_name = ? AND p.status = 'ACCEPTED' AND p.type <> 'OWNER'
                    """),
            arguments: [zoneRowID, user]
        )
        return SharedViewAccess(acceptedShares: rows.map { (rootRecordName: $0[0], shareRecordName: $0[1]) })
    }

    static func json(_ access: SharedViewAccess) -> String {
        String(decoding: (try? JSONEncoder().encode(access)) ?? Data("null".utf8), as: UTF8.self)
    }

    /// Gives every record seen under exactly one of two accesses a new position in the user's zone feed, so the
    /// feed reports it: as its current state if the user sees it now, as a deletion if not. One statement; the zone's
    /// sequence advances past the positions taken.
    static func recordAccessChange(_ db: Database, zoneRowID: Int64, user: String, from old: SharedViewAccess, to new: SharedViewAccess)
        throws
    {
        let base = try Int64.fetchOne(db.cachedStatement(sql: "SELECT change_seq FROM zones WHERE id = ?"), arguments: [zoneRowID]) ?? 0
        try db.cachedStatement(
            sql: """
                WITH RECURSIVE
                old_tree(name) AS (
                    SELECT value FROM json_each(:oldRoots)
                    UNION SELECT r.record_name FROM records r JOIN old_tree t ON r.zone_id = :zone AND r.parent_name = t.name
                ),
                new_tree(name) AS (
                    SELECT value FROM json_each(:newRoots)
                    UNION SELECT r.record_name FROM records r JOIN new_tree t ON r.zone_id = :zone AND r.parent_name = t.name
                ),
                old_seen(name, deleted) AS (
                    SELECT record_name, deleted FROM records WHERE zone_id = :zone AND (:oldZoneWide
                        OR record_name IN (SELECT name FROM old_tree) OR record_name IN (SELECT value FROM json_each(:oldShares)))
                ),
                new_seen(name, deleted) AS (
                    SELECT record_name, deleted FROM records WHERE zone_id = :zone AND (:newZoneWide
                        OR record_name IN (SELECT name FROM new_tree) OR record_name IN (SELECT value FROM json_each(:newShares)))
                ),
                -- Everything no longer seen, tombstones included (a share record deleted with the share itself);
                -- of what is newly seen, only live records.
                changed(name) AS (
                    SELECT name FROM (SELECT name FROM old_seen EXCEPT SELECT name FROM new_seen)
                    UNION ALL SELECT name FROM (SELECT name FROM new_seen WHERE deleted = 0 EXCEPT SELECT name FROM old_seen)
                )
                INSERT INTO participant_changes (user_record_name, zone_id, record_name, change_seq)
                SELECT :user, :zone, name, :base + ROW_NUMBER() OVER (ORDER BY name) FROM changed WHERE true
                ON CONFLICT (user_record_name, zone_id, record_name) DO UPDATE SET change_seq = excluded.change_seq
                """
        ).execute(arguments: [
            "zone": zoneRowID, "user": user, "base": base,
            "oldRoots": old.roots.jsonArray, "oldZoneWide": old.zoneWide, "oldShares": old.shareRecordNames.jsonArray,
            "newRoots": new.roots.jsonArray, "newZoneWide": new.zoneWide, "newShares": new.shareRecordNames.jsonArray,
        ]
        )
        let taken = db.changesCount
        guard taken > 0 else { return }
        try db.cachedStatement(sql: "UPDATE zones SET change_seq = change_seq + ? WHERE id = ?").execute(arguments: [taken, zoneRowID])
    }

    /// Moves a zone to the head of every viewer's shared database feed, or (`ending`) reports it deleted there.
    static func advanceViews(_ db: Database, zoneRowID: Int64, ending: Bool) throws {
        // Users in name order and an ended view's access cleared, as PostgreSQL's one statement does.
        let users = try String.fetchAll(
            db.cachedStatement(sql: "SELECT user_record_name FROM shared_zone_views WHERE zone_id = ? AND deleted = 0 ORDER BY user_record_name"),
            arguments: [zoneRowID])
        let advance = try db.cachedStatement(
            sql: """
                UPDATE shared_zone_views SET view_seq = ?1, deleted = ?2, access = CASE WHEN ?2 THEN NULL ELSE access END
                WHERE user_record_name = ?3 AND zone_id = ?4
                """)
        for user in users {
            let sequence = try takeSharedDatabaseSequence(db, user: user)
            try advance.execute(arguments: [sequence, ending, user, zoneRowID])
        }
    }

    static let sharedZoneColumns = "v.view_seq, v.deleted, z.id, z.zone_name, z.change_seq, d.owner_record_name"

    static func sharedZone(_ row: Row) -> SharedZone {
        SharedZone(
            zoneID: ZoneID(zoneName: row[3], ownerRecordName: row[5]), incarnation: row[2], changeSequence: row[4], deleted: row[1]
        )
    }

    public func sharedZones(userRecordName: String, container: String, environment: ContainerEnvironment, logger: Logger) async throws -> [SharedZone]
    {
        try await read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.sharedZoneColumns) FROM shared_zone_views v JOIN zones z ON z.id = v.zone_id JOIN databases d ON d.id = z.database_id
                        WHERE v.user_record_name = ? AND v.deleted = 0 AND z.deleted = 0 AND d.container_id = ? AND d.environment = ?
                        ORDER BY d.owner_record_name, z.zone_name
                        """),
                arguments: [userRecordName, container, environment.rawValue]
            ).map(Self.sharedZone)
        }
    }

    public func sharedDatabaseChanges(
        userRecordName: String, container: String, environment: ContainerEnvironment, after start: SharedDatabasePosition, limit: Int, logger: Logger
    ) async throws -> SharedDatabasePage {
        let sequence = start[0]
        return try await read { db in
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.sharedZoneColumns) FROM shared_zone_views v JOIN zones z ON z.id = v.zone_id JOIN databases d ON d.id = z.database_id
                        WHERE v.user_record_name = ? AND v.view_seq > ? AND d.container_id = ? AND d.environment = ?
                        ORDER BY v.view_seq LIMIT ?
                        """),
                arguments: [userRecordName, sequence, container, environment.rawValue, limit + 1]
            )
            let moreComing = rows.count > limit
            let page = rows.prefix(limit)
            let position: Int64
            if moreComing, let last = page.last {
                position = last[0]
            } else {
                position =
                    try Int64.fetchOne(
                        db.cachedStatement(sql: "SELECT change_seq FROM shared_databases WHERE user_record_name = ?"), arguments: [userRecordName])
                    ?? 0
            }
            return SharedDatabasePage(
                zones: page.map(Self.sharedZone), position: SharedDatabasePosition(sequence: max(position, sequence)), moreComing: moreComing)
        }
    }
}

// MARK: - Accepting and leaving

extension SQLiteRecordStore {
    public func acceptShare(shortGUID: String, userRecordName: String, logger: Logger) async throws -> ShareState {
        try await write { db in try Self.run(ShareScripts.accept(shortGUID: shortGUID, userRecordName: userRecordName), db) }
    }
}
