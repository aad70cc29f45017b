public import CumulusModel
public import CumulusStore
import Foundation
public import Logging
import PostgresNIO

// MARK: - Hierarchy membership

extension PostgresRecordStore {
    /// For each name, its nearest ancestor (or itself) among `roots`, following `parent` links; tombstones keep their
    /// parent, so a deleted record is still placed in its hierarchy. One recursive statement for all names.
    static func roots(of names: [String], zoneRowID: Int64, among roots: Set<String>, _ connection: PostgresConnection, logger: Logger)
        async throws -> [String: String]
    {
        guard !names.isEmpty, !roots.isEmpty else { return [:] }
        let roots = Array(roots)
        // Each step up is one probe of the key (``recordNamed(_:inZone:)``), whatever the statistics say of the zone.
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    WITH RECURSIVE up(start, name, parent, depth) AS (
                        SELECT r.record_name, r.record_name, r.parent_name, 0 FROM \(recordsNamed("$2", inZone: "$1", as: "r"))
                        UNION ALL
                        SELECT up.start, r.record_name, r.parent_name, up.depth + 1 FROM up CROSS JOIN \(recordNamed("up.parent", inZone: "$1")) AS r
                        WHERE up.depth < 1000 AND NOT (up.name = ANY($3))
                    )
                    SELECT start, name FROM up WHERE name = ANY($3)
                    """,
                binds: try binds(zoneRowID, names, roots)),
            logger: logger)
        var result: [String: String] = [:]
        for try await (start, root) in rows.decode((String, String).self) { result[start] = root }
        return result
    }

    /// The records of `roots` and everything below them (tombstones included), one recursive statement.
    static func subtree(of roots: [String], zoneRowID: Int64, _ connection: PostgresConnection, logger: Logger) async throws -> [String] {
        let rows = try await connection.query(
            """
            WITH RECURSIVE tree(name) AS (
                SELECT unnest(\(roots)::text[]) COLLATE "C"
                UNION SELECT r.record_name FROM records r JOIN tree ON r.zone_id = \(zoneRowID) AND r.parent_name = tree.name
            )
            SELECT name FROM tree
            """, logger: logger)
        var names: [String] = []
        for try await name in rows.decode(String.self) { names.append(name) }
        return names
    }
}

// MARK: - Reading shares

extension PostgresRecordStore {
    /// Loads the shares a condition on `s` (shares), `z` (zones) and `d` (databases) selects, with their participants
    /// and share records: three statements however many shares.
    static func loadShares(_ connection: PostgresConnection, where condition: PostgresQuery, logger: Logger) async throws
        -> [(id: Int64, state: ShareState)]
    {
        let query = PostgresQuery(
            unsafeSQL: """
                SELECT s.id, s.share_record_name, s.root_record_name, s.short_guid, s.public_permission, s.zone_id,
                    z.zone_name, d.container_id, d.environment, d.owner_record_name
                FROM shares s JOIN zones z ON z.id = s.zone_id JOIN databases d ON d.id = z.database_id
                WHERE NOT z.deleted AND (\(condition.sql)) ORDER BY s.id
                """, binds: condition.binds)
        var shares: [(id: Int64, state: ShareState)] = []
        for try await row in try await connection.query(query, logger: logger) {
            let (id, shareRecordName, root, shortGUID, permission, zoneRowID, zoneName, container, environmentName, owner) = try row.decode(
                (Int64, String, String?, String, String, Int64, String, String, String, String).self)
            guard let environment = ContainerEnvironment(rawValue: environmentName) else { throw StoreError(.corrupt, "unknown environment") }
            let database = DatabaseRef(container: container, environment: environment, scope: .private, ownerRecordName: owner)
            shares.append(
                (
                    id,
                    ShareState(
                        database: database, zoneName: zoneName, zoneIncarnation: zoneRowID, shareRecordName: shareRecordName, rootRecordName: root,
                        shortGUID: shortGUID, publicPermission: SharePermission(rawValue: permission) ?? .none, participants: [], shareRecord: nil)
                ))
        }
        guard !shares.isEmpty else { return [] }
        let ids = shares.map(\.id)
        var participants: [Int64: [ShareParticipantState]] = [:]
        let participantRows = try await connection.query(
            """
            SELECT share_id, user_record_name, type, permission, status, email FROM share_participants
            WHERE share_id = ANY(\(ids)) ORDER BY share_id, position
            """, logger: logger)
        for try await (shareID, user, type, permission, status, email) in participantRows.decode(
            (Int64, String, String, String, String, String?).self)
        {
            participants[shareID, default: []].append(participant(user, type, permission, status, email))
        }
        var records: [Int64: StoredRecord] = [:]
        let recordRows = try await connection.query(
            """
            SELECT s.id, \(unescaped: recordColumns("r")) FROM shares s
            JOIN records r ON r.zone_id = s.zone_id AND r.record_name = s.share_record_name AND NOT r.deleted
            WHERE s.id = ANY(\(ids))
            """, logger: logger)
        let zoneIDs = Dictionary(shares.map { ($0.id, $0.state.database.zoneID($0.state.zoneName)) }, uniquingKeysWith: { first, _ in first })
        for try await row in recordRows {
            let reader = RowReader(row)
            let shareID: Int64 = try reader[0]
            records[shareID] = try storedRecord(reader, zoneID: zoneIDs[shareID]!, offset: 1)
        }
        return shares.map { id, state in
            var state = state
            state.participants = participants[id] ?? []
            state.shareRecord = records[id]
            return (id, state)
        }
    }

    static func participant(_ user: String, _ type: String, _ permission: String, _ status: String, _ email: String?) -> ShareParticipantState {
        ShareParticipantState(
            userRecordName: user, type: ParticipantType(rawValue: type) ?? .user, permission: SharePermission(rawValue: permission) ?? .readOnly,
            status: ParticipantStatus(rawValue: status) ?? .invited, email: email)
    }

    public func share(shortGUID: String, logger: Logger) async throws -> ShareState? {
        try await transaction(snapshot: true, logger: logger) { connection in
            try await Self.loadShares(connection, where: "s.short_guid = \(shortGUID)", logger: logger).first?.state
        }
    }

    public func shares(named names: [String], zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState] {
        try await transaction(snapshot: true, logger: logger) { connection in
            guard let databaseID = try await Self.databaseID(connection, database, logger: logger),
                let zone = try await Self.zoneRow(connection, databaseID: databaseID, zoneName: zoneName, logger: logger)
            else {
                return []
            }
            return try await Self.loadShares(connection, where: "s.zone_id = \(zone.id) AND s.share_record_name = ANY(\(names))", logger: logger)
                .map(\.state)
        }
    }

    public func shares(listing userRecordName: String, zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState] {
        try await transaction(snapshot: true, logger: logger) { connection in
            guard let databaseID = try await Self.databaseID(connection, database, logger: logger),
                let zone = try await Self.zoneRow(connection, databaseID: databaseID, zoneName: zoneName, logger: logger)
            else {
                return []
            }
            return try await Self.loadShares(
                connection,
                where: "s.zone_id = \(zone.id) AND s.id IN (SELECT share_id FROM share_participants WHERE user_record_name = \(userRecordName))",
                logger: logger
            ).map(\.state)
        }
    }
}

// MARK: - Shared database views

extension PostgresRecordStore {
    /// A user's access to a zone through the shares they accepted, or `nil` when they see nothing of it.
    static func viewAccess(_ connection: PostgresConnection, zoneRowID: Int64, user: String, logger: Logger) async throws -> SharedViewAccess? {
        let rows = try await connection.query(
            """
            SELECT s.root_record_name, s.share_record_name FROM share_participants p JOIN shares s ON s.id = p.share_id
            WHERE s.zone_id = \(zoneRowID) AND p.user_record_name = \(user) AND p.status = 'ACCEPTED' AND p.type <> 'OWNER'
            """, logger: logger)
        var accepted: [(rootRecordName: String?, shareRecordName: String)] = []
        for try await (root, share) in rows.decode((String?, String).self) { accepted.append((root, share)) }
        return SharedViewAccess(acceptedShares: accepted)
    }

    static func json(_ access: SharedViewAccess) -> String {
        String(decoding: (try? JSONEncoder().encode(access)) ?? Data("null".utf8), as: UTF8.self)
    }

    /// Gives every record seen under exactly one of two accesses a new position in the user's zone feed, so the feed
    /// reports it as it is now or as deleted; the zone's sequence advances past the positions taken. Two statements.
    static func recordAccessChange(
        _ connection: PostgresConnection, zoneRowID: Int64, user: String, from old: SharedViewAccess, to new: SharedViewAccess, logger: Logger
    ) async throws {
        try await connection.query(
            """
            WITH RECURSIVE
            old_tree(name) AS (
                SELECT unnest(\(old.roots)::text[]) COLLATE "C"
                UNION SELECT r.record_name FROM records r JOIN old_tree t ON r.zone_id = \(zoneRowID) AND r.parent_name = t.name
            ),
            new_tree(name) AS (
                SELECT unnest(\(new.roots)::text[]) COLLATE "C"
                UNION SELECT r.record_name FROM records r JOIN new_tree t ON r.zone_id = \(zoneRowID) AND r.parent_name = t.name
            ),
            old_seen AS (
                SELECT record_name AS name, deleted FROM records WHERE zone_id = \(zoneRowID) AND (\(old.zoneWide)
                    OR record_name IN (SELECT name FROM old_tree) OR record_name = ANY(\(old.shareRecordNames)))
            ),
            new_seen AS (
                SELECT record_name AS name, deleted FROM records WHERE zone_id = \(zoneRowID) AND (\(new.zoneWide)
                    OR record_name IN (SELECT name FROM new_tree) OR record_name = ANY(\(new.shareRecordNames)))
            ),
            -- Everything no longer seen, tombstones included; of what is newly seen, only live records.
            changed(name) AS (
                (SELECT name FROM old_seen EXCEPT SELECT name FROM new_seen)
                UNION ALL (SELECT name FROM new_seen WHERE NOT deleted EXCEPT SELECT name FROM old_seen)
            ),
            base AS (SELECT change_seq FROM zones WHERE id = \(zoneRowID)),
            taken AS (
                INSERT INTO participant_changes (user_record_name, zone_id, record_name, change_seq)
                SELECT \(user), \(zoneRowID), name, (SELECT change_seq FROM base) + ROW_NUMBER() OVER (ORDER BY name COLLATE "C") FROM changed
                ON CONFLICT (user_record_name, zone_id, record_name) DO UPDATE SET change_seq = excluded.change_seq
                RETURNING 1
            )
            UPDATE zones SET change_seq = change_seq + (SELECT count(*) FROM taken) WHERE id = \(zoneRowID)
            """, logger: logger)
    }

    static func sharedZone(_ row: PostgresRow) throws -> SharedZone {
        let (_, deleted, zoneRowID, zoneName, changeSequence, owner) = try row.decode((Int64, Bool, Int64, String, Int64, String).self)
        return SharedZone(
            zoneID: ZoneID(zoneName: zoneName, ownerRecordName: owner), incarnation: zoneRowID, changeSequence: changeSequence, deleted: deleted)
    }

    public func sharedZones(userRecordName: String, container: String, environment: ContainerEnvironment, logger: Logger) async throws -> [SharedZone]
    {
        try await transaction(snapshot: true, logger: logger) { connection in
            let rows = try await connection.query(
                """
                SELECT v.view_seq, v.deleted, z.id, z.zone_name, z.change_seq, d.owner_record_name
                FROM shared_zone_views v JOIN zones z ON z.id = v.zone_id JOIN databases d ON d.id = z.database_id
                WHERE v.user_record_name = \(userRecordName) AND NOT v.deleted AND NOT z.deleted AND d.container_id = \(container)
                AND d.environment = \(environment.rawValue)
                ORDER BY d.owner_record_name COLLATE "C", z.zone_name COLLATE "C"
                """, logger: logger)
            var zones: [SharedZone] = []
            for try await row in rows { zones.append(try Self.sharedZone(row)) }
            return zones
        }
    }

    public func sharedDatabaseChanges(
        userRecordName: String, container: String, environment: ContainerEnvironment, after start: SharedDatabasePosition, limit: Int, logger: Logger
    ) async throws -> SharedDatabasePage {
        let sequence = start[0]
        return try await read(logger: logger) { connection in
            let rows = try await connection.query(
                """
                SELECT v.view_seq, v.deleted, z.id, z.zone_name, z.change_seq, d.owner_record_name
                FROM shared_zone_views v JOIN zones z ON z.id = v.zone_id JOIN databases d ON d.id = z.database_id
                WHERE v.user_record_name = \(userRecordName) AND v.view_seq > \(sequence) AND d.container_id = \(container)
                AND d.environment = \(environment.rawValue)
                ORDER BY v.view_seq LIMIT \(limit + 1)
                """, logger: logger)
            var zones: [SharedZone] = []
            var lastPosition = sequence
            var moreComing = false
            for try await row in rows {
                if zones.count == limit {
                    moreComing = true
                    break
                }
                zones.append(try Self.sharedZone(row))
                lastPosition = try row.decode(Int64.self)
            }
            if moreComing { return SharedDatabasePage(zones: zones, position: SharedDatabasePosition(sequence: lastPosition), moreComing: true) }
            var position: Int64 = 0
            let current = try await connection.query(
                "SELECT change_seq FROM shared_databases WHERE user_record_name = \(userRecordName)", logger: logger)
            for try await value in current.decode(Int64.self) { position = value }
            return SharedDatabasePage(zones: zones, position: SharedDatabasePosition(sequence: max(position, sequence)), moreComing: false)
        }
    }
}

// MARK: - Accepting and leaving

extension PostgresRecordStore {
    public func acceptShare(shortGUID: String, userRecordName: String, logger: Logger) async throws -> ShareState {
        try await transaction(logger: logger) { connection in
            try await Self.run(ShareScripts.accept(shortGUID: shortGUID, userRecordName: userRecordName), connection, logger: logger)
        }
    }
}
