import CumulusModel
import CumulusStore
import Foundation
import Logging
import PostgresNIO

// MARK: - Running scripts

extension PostgresRecordStore {
    /// Runs a script to its end inside the transaction `connection` is in: each action is SQL on this connection,
    /// set-based (one statement for all the rows an action names).
    static func run<Output>(_ script: TransactionScript<Output>, _ connection: PostgresConnection, logger: Logger) async throws -> Output {
        var script = script
        // Records read with their zone, for the script's next action if it reads them.
        var prefetched: (zone: Int64, names: Set<String>, records: [String: StoredRecord])?
        while true {
            switch script {
            case .done(let output): return output
            case .run(.readRecords(let zone, _, let names), let then)
            where prefetched.map { $0.zone == zone && $0.names.isSuperset(of: names) } ?? false:
                let records = prefetched?.records ?? [:]
                prefetched = nil
                script = try then(.records(records.filter { names.contains($0.key) }))
            case .run(.findZone(let database, let zoneName, true, let reading), let then) where !reading.isEmpty:
                let found = try await zoneRowReading(reading, connection, database, zoneName: zoneName, logger: logger)
                prefetched = found.records.map { (found.zone?.id ?? 0, Set(reading), $0) }
                script = try then(.zone(found.zone))
            case .run(let action, let then):
                prefetched = nil
                script = try then(try await perform(action, connection, logger: logger))
            }
        }
    }

    /// A zone locked, with the records a write reads next, in one round trip. The records come from the statement's
    /// snapshot, taken before the lock: when a writer of the zone committed in between (the zone's sequence as locked is
    /// not the one the snapshot saw), they are dropped, and the script's own read runs after the lock as always.
    private static func zoneRowReading(
        _ names: [String], _ connection: PostgresConnection, _ database: DatabaseRef, zoneName: String, logger: Logger
    ) async throws -> (zone: ZoneRow?, records: [String: StoredRecord]?) {
        var bindings = zoneBindings(database, zoneName: zoneName)
        bindings.append(names)
        let rows = try await connection.run(ZoneLockedWithRecords.self, bindings, logger: logger)
        let zoneID = database.zoneID(zoneName)
        var zone: ZoneRow?
        var consistent = true
        var records: [String: StoredRecord] = [:]
        for try await row in rows {
            let reader = RowReader(row)
            let (id, sequence, databaseID, deleted, seen): (Int64, Int64, Int64, Bool, Int64) = (
                try reader[0], try reader[1], try reader[2], try reader[3], try reader[4]
            )
            zone = ZoneRow(id: id, databaseID: databaseID, changeSequence: sequence)
            consistent = consistent && !deleted && sequence == seen
            if consistent, try reader[5, as: String?.self] != nil {
                let record = try storedRecord(reader, zoneID: zoneID, offset: 5)
                records[record.header.recordName] = record
            }
        }
        guard let zone else { return (nil, nil) }
        guard consistent else {
            // Changed or deleted since the snapshot: the zone read again, now that it is locked.
            let again = try await zoneRow(connection, database, zoneName: zoneName, forUpdate: true, logger: logger)
            return (again.map { ZoneRow(id: $0.id, databaseID: $0.databaseID, changeSequence: $0.changeSequence) }, nil)
        }
        return (zone, records)
    }

    /// ``zoneRowReading(_:_:_:zoneName:logger:)``'s statement: ``zoneBindings(_:zoneName:)``, then the records' names.
    private enum ZoneLockedWithRecords: PostgresPreparedText {
        static let name = "cumulus_zone_locked_with_records"
        static let sql = """
            WITH seen AS (
                SELECT z.id, z.change_seq FROM zones z JOIN databases d ON d.id = z.database_id
                WHERE d.container_id = $1 AND d.environment = $2 AND d.scope = $3 AND d.owner_record_name = $4
                AND z.zone_name = $5 AND NOT z.deleted
            ),
            locked AS (SELECT z.id, z.change_seq, z.database_id, z.deleted FROM zones z WHERE z.id IN (SELECT id FROM seen) FOR UPDATE)
            SELECT l.id, l.change_seq, l.database_id, l.deleted, s.change_seq, \(recordColumns("r"))
            FROM locked l JOIN seen s ON s.id = l.id
            LEFT JOIN LATERAL (SELECT named.* FROM \(recordsNamed("$6", inZone: "l.id", as: "named")) WHERE NOT named.deleted) r ON true
            """
    }

    // The actions, each the SQL that does it; none decides anything.
    static func perform(_ action: StoreAction, _ connection: PostgresConnection, logger: Logger) async throws -> StoreAnswer {
        switch action {
        case .findZone(let database, let zoneName, let lock, _):
            let zone = try await zoneRow(connection, database, zoneName: zoneName, forUpdate: lock, logger: logger)
            return .zone(zone.map { ZoneRow(id: $0.id, databaseID: $0.databaseID, changeSequence: $0.changeSequence) })
        case .createDatabase(let database, let timestamp):
            return .sequence(try await ensureDatabase(connection, database, timestamp: timestamp, logger: logger))
        case .createZone(let databaseID, let name, let timestamp):
            // Instances creating the same zone at once meet on the live-name index: one inserts, the others read.
            let inserted = try await connection.query(
                """
                INSERT INTO zones (database_id, zone_name, created_at) VALUES (\(databaseID), \(name), \(timestamp))
                ON CONFLICT (database_id, zone_name) WHERE NOT deleted DO NOTHING RETURNING id
                """, logger: logger)
            for try await id in inserted.decode(Int64.self) {
                return .createdZone(ZoneRow(id: id, databaseID: databaseID, changeSequence: 0), created: true)
            }
            guard let existing = try await zoneRow(connection, databaseID: databaseID, zoneName: name, logger: logger) else {
                throw StoreError(.unavailable, "zone \(name) was deleted while it was created; retry")
            }
            return .createdZone(ZoneRow(id: existing.id, databaseID: databaseID, changeSequence: existing.changeSequence), created: false)
        case .countZones(let databaseID):
            // Counters of one database's zones take turns on a transaction lock that only they take, so two instances
            // creating zones at once cannot both find room for the last one, and no record writer waits for it. The count
            // is a statement of its own, so that its snapshot is taken once the lock is held.
            try await connection.query(
                "SELECT pg_advisory_xact_lock(hashtext('cumulus.zones'), (\(databaseID) % 2147483647)::integer)", logger: logger)
            for try await count in try await connection.query(
                "SELECT count(*) FROM zones WHERE database_id = \(databaseID) AND NOT deleted", logger: logger
            ).decode(Int64.self) {
                return .count(Int(count))
            }
            return .count(0)
        case .deleteZone(let zone):
            try await connection.query(
                PostgresQuery(
                    unsafeSQL:
                        "UPDATE zones SET deleted = true, \(emptyDigest) WHERE id = $1",
                    binds: try binds(zone)), logger: logger)
            for table in ["shares", "record_references", "records"] {
                try await connection.query(
                    PostgresQuery(unsafeSQL: "DELETE FROM \(table) WHERE zone_id = $1", binds: try binds(zone)), logger: logger)
            }
        case .touchZone(let zone, let databaseID, let sequence):
            try await connection.query(
                """
                WITH d AS (UPDATE databases SET change_seq = change_seq + 1 WHERE id = \(databaseID) RETURNING change_seq)
                UPDATE zones SET database_change_seq = d.change_seq, change_seq = COALESCE(\(sequence), zones.change_seq)
                FROM d WHERE zones.id = \(zone)
                """, logger: logger)
        case .finishZoneWrite(let zone, let databaseID, let sequence, let digest):
            var bindings = PostgresBindings()
            appendZoneWriteEnd(&bindings, zone: zone, databaseID: databaseID, sequence: sequence, digest: digest)
            try await connection.run(FinishZoneWrite.self, bindings, logger: logger)
        case .adjustZoneDigest(let zone, let change):
            try await adjustZoneDigest(connection, zone: zone, by: change, logger: logger)
        case .advanceViews(let zone, let ending):
            // Viewers' rows are locked in name order, as everywhere, so concurrent writers never wait in a circle.
            try await connection.query(
                """
                WITH viewers AS (
                    SELECT user_record_name FROM shared_zone_views WHERE zone_id = \(zone) AND NOT deleted ORDER BY user_record_name
                ),
                bumped AS (
                    INSERT INTO shared_databases (user_record_name, change_seq) SELECT user_record_name, 1 FROM viewers
                    ON CONFLICT (user_record_name) DO UPDATE SET change_seq = shared_databases.change_seq + 1
                    RETURNING user_record_name, change_seq
                )
                UPDATE shared_zone_views v SET view_seq = b.change_seq, deleted = \(ending),
                    access = CASE WHEN \(ending) THEN NULL ELSE v.access END
                FROM bumped b WHERE v.user_record_name = b.user_record_name AND v.zone_id = \(zone)
                """, logger: logger)
        case .setZoneSequence(let zone, let sequence):
            try await connection.query("UPDATE zones SET change_seq = \(sequence) WHERE id = \(zone)", logger: logger)
        case .takeZoneSequence(let zone):
            return .sequence(
                try await single(
                    connection.query("UPDATE zones SET change_seq = change_seq + 1 WHERE id = \(zone) RETURNING change_seq", logger: logger)))
        case .readZoneSequence(let zone):
            return .sequence(try await single(connection.query("SELECT change_seq FROM zones WHERE id = \(zone)", logger: logger)))

        case .readRecords(let zone, let zoneID, let names):
            return .records(try await liveRecords(connection, zoneRowID: zone, zoneID: zoneID, names: names, logger: logger))
        case .readRoots(let zone, let names, let among):
            return .names(try await roots(of: names, zoneRowID: zone, among: among, connection, logger: logger))
        case .readRootsBelow(let zone, let candidates, let among):
            let rows = try await connection.query(
                """
                WITH RECURSIVE down(start, name) AS (
                    SELECT c COLLATE "C", c COLLATE "C" FROM unnest(\(candidates)::text[]) AS c
                    UNION SELECT d.start, r.record_name FROM records r JOIN down d ON r.zone_id = \(zone) AND r.parent_name = d.name
                )
                SELECT DISTINCT ON (start) start, name FROM down
                WHERE name <> start AND name = ANY(\(Array(among))) ORDER BY start, name
                """, logger: logger)
            var below: [String: String] = [:]
            for try await (candidate, root) in rows.decode((String, String).self) { below[candidate] = root }
            return .names(below)
        case .readSubtree(let zone, let roots):
            return .list(try await subtree(of: roots, zoneRowID: zone, connection, logger: logger))
        case .saveRecords(let zone, let writes, let sequences):
            return .liveSequences(try await saveRecords(writes, sequences: sequences, zone: zone, connection, logger: logger))
        case .saveRecordsFinishingZone(let zone, let writes, let sequences, let names, let replacedAt, let digest):
            let end = ZoneWriteEnd(
                databaseID: zone.databaseID, sequence: sequences.last ?? zone.changeSequence, digest: digest, versionsToKeep: names,
                replacedAt: replacedAt)
            _ = try await saveRecords(writes, sequences: sequences, zone: zone.id, end: end, connection, logger: logger)
        case .readReferrers(let zone, let targets):
            let rows = try await connection.query(
                """
                SELECT DISTINCT r.source_name FROM record_references r
                CROSS JOIN \(unescaped: recordNamed("r.source_name", inZone: "r.zone_id")) AS s
                WHERE r.zone_id = \(zone) AND r.target_name = ANY(\(targets)) AND NOT s.deleted
                """, logger: logger)
            var sources: [String] = []
            for try await source in rows.decode(String.self) { sources.append(source) }
            return .list(sources)
        case .deleteRecords(let zone, let names, let sequences, let modified):
            // The live rows' sequences before the update, from the statement's snapshot, and their references dropped, in the
            // same round trip. The rows are found by name once (``recordsNamed(_:inZone:as:)``) and updated by their IDs.
            let replaced = try await liveSequences(
                connection.query(
                    PostgresQuery(
                        unsafeSQL: """
                            WITH old AS (SELECT r.id, r.record_name, r.change_seq FROM \(recordsNamed("$2", inZone: "$1", as: "r")) WHERE NOT r.deleted),
                            done AS (
                                UPDATE records r SET deleted = true, fields = NULL, change_seq = u.seq, share_name = NULL,
                                    modified_at = $4, modified_by = $5, modified_device = $6
                                FROM old JOIN UNNEST($2::text[], $3::bigint[]) AS u(name, seq) ON u.name = old.record_name
                                WHERE r.id = old.id
                            ),
                            gone AS (DELETE FROM record_references WHERE zone_id = $1 AND source_name = ANY($2))
                            SELECT record_name, change_seq FROM old
                            """,
                        binds: try binds(zone, names, sequences, modified.timestamp, modified.userRecordName, modified.deviceID)),
                    logger: logger))
            return .liveSequences(replaced)
        case .renumberRecords(let zone, let names, let sequences):
            // Tombstones are renumbered too; the sequences returned are the live rows'.
            return .liveSequences(
                try await liveSequences(
                    connection.query(
                        PostgresQuery(
                            unsafeSQL: """
                                WITH named AS (SELECT r.id, r.record_name, r.change_seq, r.deleted FROM \(recordsNamed("$2", inZone: "$1", as: "r"))),
                                done AS (
                                    UPDATE records r SET change_seq = u.seq
                                    FROM named JOIN UNNEST($2::text[], $3::bigint[]) AS u(name, seq) ON u.name = named.record_name
                                    WHERE r.id = named.id
                                )
                                SELECT record_name, change_seq FROM named WHERE NOT deleted
                                """,
                            binds: try binds(zone, names, sequences)),
                        logger: logger)))
        case .recordExits(let zone, let root, let names, let sequences):
            try await connection.query(
                """
                INSERT INTO share_exits (zone_id, root_record_name, record_name, change_seq)
                SELECT \(zone), \(root), u.name, u.seq FROM UNNEST(\(names), \(sequences)) AS u(name, seq)
                ON CONFLICT (zone_id, root_record_name, record_name) DO UPDATE SET change_seq = excluded.change_seq
                """, logger: logger)
        case .scanRecordNames(let zone, let after, let limit):
            return .modifiedTimes(try await scanRecordNames(connection, zone: zone, after: after, limit: limit, logger: logger))
        case .readNamesReplaced(let zone, let after, let upper, let time):
            return .list(try await namesReplaced(connection, zone: zone, after: after, through: upper, since: time, logger: logger))
        case .readVersions(let zone, let zoneID, let names, let time):
            return .records(try await versions(connection, zone: zone, zoneID: zoneID, names: names, at: time, logger: logger))
        case .keepVersions(let zone, let names, let replacedAt):
            try await keepVersions(connection, zone: zone, names: names, replacedAt: replacedAt, logger: logger)
        case .attachAssets(let attachments):
            try await attachAssets(attachments, connection, logger: logger)

        case .readShareFacts(let zone):
            var shares: [String: ExistingShare] = [:]
            let rows = try await connection.query(
                """
                SELECT s.share_record_name, s.root_record_name, s.public_permission,
                    ARRAY(SELECT user_record_name FROM share_participants WHERE share_id = s.id AND status <> 'REMOVED')
                FROM shares s WHERE s.zone_id = \(zone)
                """, logger: logger)
            for try await (name, root, permission, users) in rows.decode((String, String?, String, [String]).self) {
                shares[name] = ExistingShare(
                    rootRecordName: root, publicPermission: SharePermission(rawValue: permission) ?? .none, activeUsers: Set(users))
            }
            return .shares(shares)
        case .readShareRows(let zone, let names):
            let rows =
                if let names {
                    try await connection.query(
                        """
                        SELECT id, share_record_name, root_record_name, public_permission FROM shares WHERE zone_id = \(zone)
                        AND (share_record_name = ANY(\(names)) OR root_record_name = ANY(\(names))) ORDER BY id
                        """, logger: logger)
                } else {
                    try await connection.query(
                        "SELECT id, share_record_name, root_record_name, public_permission FROM shares WHERE zone_id = \(zone) ORDER BY id",
                        logger: logger)
                }
            var shares: [ShareRow] = []
            for try await (id, name, root, permission) in rows.decode((Int64, String, String?, String).self) {
                shares.append(
                    ShareRow(id: id, shareRecordName: name, rootRecordName: root, publicPermission: SharePermission(rawValue: permission) ?? .none))
            }
            return .shareRows(shares)
        case .readShare(let key):
            let condition: PostgresQuery =
                switch key {
                case .shortGUID(let shortGUID): "s.short_guid = \(shortGUID)"
                case .id(let id): "s.id = \(id)"
                case .record(let zone, let name): "s.zone_id = \(zone) AND s.share_record_name = \(name)"
                }
            return .share(try await loadShares(connection, where: condition, logger: logger).first)
        case .readParticipants(let shareID):
            var participants: [ShareParticipantState] = []
            let rows = try await connection.query(
                "SELECT user_record_name, type, permission, status, email FROM share_participants WHERE share_id = \(shareID) ORDER BY position",
                logger: logger)
            for try await (user, type, permission, status, email) in rows.decode((String, String, String, String, String?).self) {
                participants.append(participant(user, type, permission, status, email))
            }
            return .participants(participants)
        case .readShortGUID(let zone, let recordName):
            let rows =
                if let recordName {
                    try await connection.query(
                        "SELECT short_guid FROM records WHERE zone_id = \(zone) AND record_name = \(recordName)", logger: logger)
                } else {
                    try await connection.query("SELECT short_guid FROM zones WHERE id = \(zone)", logger: logger)
                }
            var shortGUID: String?
            for try await guid in rows.decode(String?.self) { shortGUID = guid }
            return .text(shortGUID)
        case .pointRootAtShare(let zone, let root, let share, let shortGUID, let sequence):
            return .liveSequences(
                try await liveSequences(
                    connection.query(
                        """
                        WITH old AS (SELECT record_name, change_seq FROM records WHERE zone_id = \(zone) AND record_name = \(root) AND NOT deleted),
                        done AS (
                            UPDATE records SET share_name = \(share), short_guid = \(shortGUID), change_seq = \(sequence)
                            WHERE zone_id = \(zone) AND record_name = \(root)
                        )
                        SELECT record_name, change_seq FROM old
                        """, logger: logger)))
        case .setZoneShortGUID(let zone, let shortGUID):
            try await connection.query("UPDATE zones SET short_guid = \(shortGUID) WHERE id = \(zone)", logger: logger)
        case .insertShare(let zone, let name, let root, let shortGUID, let publicPermission):
            return .sequence(
                try await single(
                    connection.query(
                        """
                        INSERT INTO shares (zone_id, share_record_name, root_record_name, short_guid, public_permission)
                        VALUES (\(zone), \(name), \(root), \(shortGUID), \(publicPermission.rawValue)) RETURNING id
                        """, logger: logger)))
        case .setPublicPermission(let shareID, let permission):
            try await connection.query("UPDATE shares SET public_permission = \(permission.rawValue) WHERE id = \(shareID)", logger: logger)
        case .replaceParticipants(let shareID, let participants):
            try await connection.query("DELETE FROM share_participants WHERE share_id = \(shareID)", logger: logger)
            try await connection.query(
                """
                INSERT INTO share_participants (share_id, user_record_name, type, permission, status, email, position)
                SELECT \(shareID), u.name, u.type, u.permission, u.status, u.email, u.position
                FROM UNNEST(\(participants.map(\.userRecordName)), \(participants.map(\.type.rawValue)),
                    \(participants.map(\.permission.rawValue)), \(participants.map(\.status.rawValue)), \(NullableTextArray(participants.map(\.email))),
                    \(participants.indices.map(Int64.init))) AS u(name, type, permission, status, email, position)
                """, logger: logger)
        case .setParticipantStatus(let shareID, let user, let status):
            try await connection.query(
                """
                UPDATE share_participants SET status = \(status.rawValue)
                WHERE share_id = \(shareID) AND user_record_name = \(user) AND type <> 'OWNER'
                """, logger: logger)
        case .addPublicParticipant(let shareID, let user, let permission):
            try await connection.query(
                """
                INSERT INTO share_participants (share_id, user_record_name, type, permission, status, position)
                VALUES (\(shareID), \(user), 'PUBLIC_USER', \(permission.rawValue), 'ACCEPTED',
                    (SELECT COALESCE(MAX(position), 0) + 1 FROM share_participants WHERE share_id = \(shareID)))
                """, logger: logger)
        case .deleteShare(let shareID):
            try await connection.query("DELETE FROM shares WHERE id = \(shareID)", logger: logger)
        case .clearShareReference(let zone, let root, let sequence):
            return .liveSequences(
                try await liveSequences(
                    connection.query(
                        """
                        WITH old AS (SELECT record_name, change_seq FROM records WHERE zone_id = \(zone) AND record_name = \(root) AND NOT deleted),
                        done AS (
                            UPDATE records SET share_name = NULL, change_seq = \(sequence)
                            WHERE zone_id = \(zone) AND record_name = \(root) AND NOT deleted
                        )
                        SELECT record_name, change_seq FROM old
                        """, logger: logger)))

        case .readViewAccess(let zone, let user):
            return .viewAccess(try await viewAccess(connection, zoneRowID: zone, user: user, logger: logger))
        case .readView(let zone, let user):
            let rows = try await connection.query(
                "SELECT deleted, access::text FROM shared_zone_views WHERE user_record_name = \(user) AND zone_id = \(zone)", logger: logger)
            var stored: StoredView?
            for try await (ended, json) in rows.decode((Bool, String?).self) {
                stored = StoredView(ended: ended, access: json.flatMap { try? JSONDecoder().decode(SharedViewAccess.self, from: Data($0.utf8)) })
            }
            return .view(stored)
        case .takeSharedDatabaseSequence(let user):
            // The row stays locked until commit, so positions of one user's feed commit in order.
            return .sequence(
                try await single(
                    connection.query(
                        """
                        INSERT INTO shared_databases (user_record_name, change_seq) VALUES (\(user), 1)
                        ON CONFLICT (user_record_name) DO UPDATE SET change_seq = shared_databases.change_seq + 1 RETURNING change_seq
                        """, logger: logger)))
        case .beginView(let zone, let user, let position, let access):
            try await connection.query("DELETE FROM participant_changes WHERE user_record_name = \(user) AND zone_id = \(zone)", logger: logger)
            try await connection.query(
                """
                INSERT INTO shared_zone_views (user_record_name, zone_id, view_seq, deleted, access)
                VALUES (\(user), \(zone), \(position), false, \(json(access))::jsonb)
                ON CONFLICT (user_record_name, zone_id) DO UPDATE SET view_seq = excluded.view_seq, deleted = false, access = excluded.access
                """, logger: logger)
        case .endView(let zone, let user, let position):
            try await connection.query(
                """
                UPDATE shared_zone_views SET view_seq = \(position), deleted = true, access = NULL
                WHERE user_record_name = \(user) AND zone_id = \(zone)
                """, logger: logger)
            try await connection.query("DELETE FROM participant_changes WHERE user_record_name = \(user) AND zone_id = \(zone)", logger: logger)
        case .changeView(let zone, let user, let position, let access):
            try await connection.query(
                """
                UPDATE shared_zone_views SET view_seq = \(position), access = \(json(access))::jsonb
                WHERE user_record_name = \(user) AND zone_id = \(zone)
                """, logger: logger)
        case .recordAccessChange(let zone, let user, let old, let new):
            try await recordAccessChange(connection, zoneRowID: zone, user: user, from: old, to: new, logger: logger)

        case .readUserContainer, .readRecordsCreated, .readUserZones, .countZoneContents, .deleteHistory, .readParticipations,
            .removeParticipant, .deleteAssetReceipts, .anonymizeAuthor, .deleteUserRows:
            return try await performUserAction(action, connection, logger: logger)
        }
        return .none
    }

    /// The `(name, sequence)` rows a statement returns, by name.
    private static func liveSequences(_ rows: PostgresRowSequence) async throws -> [String: Int64] {
        var sequences: [String: Int64] = [:]
        for try await (name, sequence) in rows.decode((String, Int64).self) { sequences[name] = sequence }
        return sequences
    }

    /// The one `Int64` a statement returns.
    private static func single(_ rows: PostgresRowSequence) async throws -> Int64 {
        for try await value in rows.decode(Int64.self) { return value }
        throw StoreError(.unexpected, "a statement returned no row")
    }

    /// The rest of a batch that only writes (``StoreAction/saveRecordsFinishingZone(_:writes:sequences:keepingVersionsOf:replacedAt:digest:)``),
    /// for the statement that saves its records.
    private struct ZoneWriteEnd {
        var databaseID: Int64
        var sequence: Int64
        var digest: ZoneDigest
        /// Records whose live versions go to the history first, replaced at `replacedAt`.
        var versionsToKeep: [String]
        var replacedAt: Int64
    }

    /// The `WITH` items that end a zone's write: the zone takes its sequence and digest change and moves to the head of
    /// its database's feed and of every viewer's. Rows in the order every writer takes them: the zone (already held),
    /// its database, then shared databases by user. Parameters from `$first`, as ``appendZoneWriteEnd(_:zone:databaseID:sequence:digest:)``
    /// appends them.
    static func zoneWriteEnd(from first: Int) -> String {
        """
        d AS (UPDATE databases SET change_seq = change_seq + 1 WHERE id = $\(first + 1) RETURNING change_seq),
        z AS (
            UPDATE zones SET change_seq = $\(first + 2), database_change_seq = (SELECT change_seq FROM d), \(digestAdjustment(from: first + 3))
            WHERE id = $\(first) RETURNING id
        ),
        viewers AS (
            SELECT user_record_name FROM shared_zone_views WHERE zone_id = (SELECT id FROM z) AND NOT deleted
            ORDER BY user_record_name
        ),
        bumped AS (
            UPDATE shared_databases s SET change_seq = s.change_seq + 1 FROM viewers v
            WHERE s.user_record_name = v.user_record_name RETURNING s.user_record_name, s.change_seq
        ),
        viewed AS (
            UPDATE shared_zone_views v SET view_seq = b.change_seq FROM bumped b
            WHERE v.user_record_name = b.user_record_name AND v.zone_id = $\(first)
        )
        """
    }

    /// ``zoneWriteEnd(from:)`` as a statement of its own: it is on the path of every write that deletes.
    private enum FinishZoneWrite: PostgresPreparedText {
        static let name = "cumulus_finish_zone_write"
        static let sql = "WITH \(zoneWriteEnd(from: 1)) SELECT 1"
    }

    /// The parameters of ``zoneWriteEnd(from:)``.
    private static func appendZoneWriteEnd(
        _ bindings: inout PostgresBindings, zone: Int64, databaseID: Int64, sequence: Int64, digest: ZoneDigest
    ) {
        for value in [zone, databaseID, sequence] { bindings.append(value, context: .default) }
        for lane in digest.lanes { bindings.append(Int64(lane), context: .default) }
        bindings.append(digest.recordCount, context: .default)
    }

    /// The statement that saves a batch's records: one upsert of every row, from column arrays; the rows it replaces
    /// that were live, read in the statement's snapshot before the upsert; and the saved records' references dropped
    /// (the ones they keep are inserted after). One round trip. Parameters: the zone, then the columns' arrays, names
    /// first; ending its zone's write, ``zoneWriteEnd(from:)``'s from `$15`; keeping versions, the names and the time
    /// after those.
    private static func saveRecordsText(endingWrite: Bool, keepingVersions: Bool) -> String {
        var sql = """
            WITH old AS (
                    SELECT r.record_name, r.change_seq FROM \(recordsNamed("$2", inZone: "$1", as: "r")) WHERE NOT r.deleted
                ),
                done AS (
                    INSERT INTO records (zone_id, record_name, record_type, change_seq, deleted, fields, parent_name, share_name, short_guid,
                        created_at, created_by, created_device, modified_at, modified_by, modified_device)
                    SELECT $1, u.name, u.type, u.seq, false, u.fields, u.parent, u.share, u.guid, u.ca, u.cb, u.cd, u.ma, u.mb, u.md
                    FROM UNNEST($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                        AS u(name, type, seq, fields, parent, share, guid, ca, cb, cd, ma, mb, md)
                    ON CONFLICT (zone_id, record_name) DO UPDATE SET
                        record_type = excluded.record_type, change_seq = excluded.change_seq, deleted = false, fields = excluded.fields,
                        parent_name = excluded.parent_name, share_name = excluded.share_name, short_guid = excluded.short_guid,
                        created_at = excluded.created_at, created_by = excluded.created_by, created_device = excluded.created_device,
                        modified_at = excluded.modified_at, modified_by = excluded.modified_by, modified_device = excluded.modified_device
                ),
                gone AS (DELETE FROM record_references WHERE zone_id = $1 AND source_name = ANY($2))
            """
        guard endingWrite else { return sql + "\nSELECT record_name, change_seq FROM old" }
        sql += ",\n" + zoneWriteEnd(from: 15)
        if keepingVersions {
            // Reads the statement's snapshot, as `old` does: the versions before the upsert.
            sql += ",\nkept AS (\(keptVersions(zone: "$1", names: "$27", replacedAt: "$28")))"
        }
        // `old` is not read: a batch that ends its zone's write knows what it replaced.
        return sql + "\nSELECT NULL::text, NULL::bigint WHERE false"
    }

    private enum SaveRecords: PostgresPreparedText {
        static let name = "cumulus_save_records"
        static let sql = saveRecordsText(endingWrite: false, keepingVersions: false)
    }

    private enum SaveRecordsEndingWrite: PostgresPreparedText {
        static let name = "cumulus_save_records_ending_write"
        static let sql = saveRecordsText(endingWrite: true, keepingVersions: false)
    }

    private enum SaveRecordsEndingWriteKeepingVersions: PostgresPreparedText {
        static let name = "cumulus_save_records_ending_write_keeping"
        static let sql = saveRecordsText(endingWrite: true, keepingVersions: true)
    }

    /// Writes records with one upsert of every row (`UNNEST` of column arrays; a record written twice in one batch
    /// keeps its last write, as one upsert may not touch a row twice), then their `DELETE_SELF` references. With `end`,
    /// the zone's write ends in the same statement.
    private static func saveRecords(
        _ writes: [PlannedWrite], sequences: [Int64], zone: Int64, end: ZoneWriteEnd? = nil, _ connection: PostgresConnection,
        logger: Logger
    ) async throws -> [String: Int64] {
        var lastWrite: [String: Int] = [:]
        for (index, write) in writes.enumerated() { lastWrite[write.recordName] = index }
        let rows = writes.indices.filter { lastWrite[writes[$0].recordName] == $0 }
        let last = rows.map { writes[$0] }
        var bindings = PostgresBindings()
        bindings.append(zone)
        bindings.append(last.map(\.recordName))
        bindings.append(last.map(\.recordType))
        bindings.append(rows.map { sequences[$0] })
        bindings.append(last.map { String(decoding: $0.fieldsJSON, as: UTF8.self) })
        bindings.append(NullableTextArray(last.map(\.parent)))
        bindings.append(NullableTextArray(last.map { $0.share?.recordName }))
        bindings.append(NullableTextArray(last.map(\.shortGUID)))
        bindings.append(last.map(\.created.timestamp))
        bindings.append(last.map(\.created.userRecordName))
        bindings.append(last.map(\.created.deviceID))
        bindings.append(last.map(\.modified.timestamp))
        bindings.append(last.map(\.modified.userRecordName))
        bindings.append(last.map(\.modified.deviceID))
        var replaced: [String: Int64] = [:]
        if let end {
            appendZoneWriteEnd(&bindings, zone: zone, databaseID: end.databaseID, sequence: end.sequence, digest: end.digest)
            // A batch that ends its zone's write knows what it replaced: the statement returns no rows.
            if end.versionsToKeep.isEmpty {
                try await connection.run(SaveRecordsEndingWrite.self, bindings, logger: logger)
            } else {
                bindings.append(end.versionsToKeep)
                bindings.append(end.replacedAt)
                try await connection.run(SaveRecordsEndingWriteKeepingVersions.self, bindings, logger: logger)
            }
        } else {
            for try await row in try await connection.run(SaveRecords.self, bindings, logger: logger) {
                let (name, sequence) = try row.decode((String, Int64).self)
                replaced[name] = sequence
            }
        }
        // In a statement of their own: one that also deleted would not see its own deletions, and would keep none.
        let references = last.flatMap { write in write.deleteSelfTargets.map { (target: $0, source: write.recordName) } }
        if !references.isEmpty {
            try await connection.query(
                """
                INSERT INTO record_references (zone_id, target_name, source_name)
                SELECT \(zone), t, s FROM UNNEST(\(references.map(\.target)), \(references.map(\.source))) AS u(t, s)
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
        return replaced
    }
}
