public import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    public func subscriptions(of owner: SubscriptionOwner, ids: [String]?, logger: Logger) async throws -> [StoredSubscription] {
        try await transaction(snapshot: true, logger: logger) { connection in
            let rows = try await connection.query(
                """
                SELECT subscription_id, body, created_at FROM subscriptions
                WHERE container_id = \(owner.container) AND environment = \(owner.environment.rawValue)
                AND database_scope = \(owner.scope.rawValue) AND user_record_name = \(owner.userRecordName)
                AND (\(ids == nil) OR subscription_id = ANY(\(ids ?? [])))
                ORDER BY created_at, subscription_id
                """, logger: logger)
            var found: [StoredSubscription] = []
            for try await row in rows {
                let reader = RowReader(row)
                found.append(StoredSubscription(subscriptionID: try reader[0], json: reader.bytes(1) ?? [], createdAt: try reader[2]))
            }
            return found
        }
    }

    public func modifySubscriptions(of owner: SubscriptionOwner, saving: [StoredSubscription], deleting: [String], logger: Logger) async throws {
        try await transaction(logger: logger) { connection in
            if !deleting.isEmpty {
                try await connection.query(
                    """
                    DELETE FROM subscriptions WHERE container_id = \(owner.container) AND environment = \(owner.environment.rawValue)
                    AND database_scope = \(owner.scope.rawValue) AND user_record_name = \(owner.userRecordName)
                    AND subscription_id = ANY(\(deleting))
                    """, logger: logger)
            }
            guard !saving.isEmpty else { return }
            try await connection.query(
                """
                INSERT INTO subscriptions (container_id, environment, database_scope, user_record_name, subscription_id, body, created_at)
                SELECT \(owner.container), \(owner.environment.rawValue), \(owner.scope.rawValue), \(owner.userRecordName), u.id, u.body, u.created
                FROM UNNEST(\(saving.map(\.subscriptionID)), \(saving.map { String(decoding: $0.json, as: UTF8.self) }),
                    \(saving.map(\.createdAt))) AS u(id, body, created)
                ON CONFLICT (container_id, environment, database_scope, user_record_name, subscription_id) DO UPDATE SET body = excluded.body
                """, logger: logger)
        }
    }
}

extension PostgresRecordStore {
    public func savePushToken(_ token: StoredPushToken, logger: Logger) async throws {
        var bindings = PostgresBindings()
        for text in [
            token.token, token.container, token.environment.rawValue, token.userRecordName, String(decoding: token.positions, as: UTF8.self),
        ] {
            bindings.append(text)
        }
        bindings.append(token.createdAt)
        try await run(SavePushToken.self, bindings, logger: logger, missingReference: "the container does not exist")
    }

    /// ``savePushToken(_:logger:)``'s statement: after a delivery, a look saves the positions it answered.
    private enum SavePushToken: PostgresPreparedText {
        static let name = "cumulus_save_push_token"
        static let sql = """
            INSERT INTO push_tokens (token, container_id, environment, user_record_name, positions, created_at)
            VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (token) DO UPDATE SET user_record_name = excluded.user_record_name, positions = excluded.positions,
                created_at = excluded.created_at
            """
    }

    public func pushToken(_ token: String, logger: Logger) async throws -> StoredPushToken? {
        let rows = try await query(
            "SELECT container_id, environment, user_record_name, positions, created_at FROM push_tokens WHERE token = \(token)", logger: logger)
        for try await row in rows {
            let reader = RowReader(row)
            guard let environment = ContainerEnvironment(rawValue: try reader[1]) else { throw StoreError(.corrupt, "unknown environment") }
            return StoredPushToken(
                token: token, container: try reader[0], environment: environment, userRecordName: try reader[2], positions: reader.bytes(3) ?? [],
                createdAt: try reader[4])
        }
        return nil
    }

    /// ``pushTokenFeeds(_:logger:)``'s statement, on the path of every delivered notification: the token (kind 0), its
    /// user's subscriptions (1), the zones of the private and public databases that have subscriptions (2; a database
    /// that has no zone row gives one row without a zone), and the zones shared with the user when they subscribe in
    /// their shared database (3). Parameters: the token, the public database's owner name.
    private enum PushTokenFeedsRead: PostgresPreparedText {
        static let name = "cumulus_push_token_feeds"
        static let sql = """
            WITH t AS (
                SELECT container_id, environment, user_record_name, positions, created_at FROM push_tokens WHERE token = $1
            ), s AS (
                SELECT s.database_scope, s.subscription_id, s.body, s.created_at FROM subscriptions s
                JOIN t ON s.container_id = t.container_id AND s.environment = t.environment AND s.user_record_name = t.user_record_name
                WHERE s.database_scope IN ('private', 'shared', 'public')
            )
            SELECT 0 AS kind, t.container_id AS name, t.environment AS scope, t.user_record_name AS owner, t.positions AS body,
                t.created_at AS number, 0::bigint AS id FROM t
            UNION ALL
            SELECT 1, s.subscription_id, s.database_scope, NULL, s.body, s.created_at, 0 FROM s
            UNION ALL
            SELECT 2, z.zone_name, d.scope, NULL, NULL, z.change_seq, z.id
            FROM t JOIN databases d ON d.container_id = t.container_id AND d.environment = t.environment
                AND ((d.scope = 'private' AND d.owner_record_name = t.user_record_name)
                    OR (d.scope = 'public' AND d.owner_record_name = $2))
                AND EXISTS (SELECT 1 FROM s WHERE s.database_scope = d.scope)
            LEFT JOIN zones z ON z.database_id = d.id AND NOT z.deleted
            UNION ALL
            SELECT 3, z.zone_name, 'shared', d.owner_record_name, NULL, z.change_seq, z.id
            FROM t JOIN shared_zone_views v ON v.user_record_name = t.user_record_name AND NOT v.deleted
                AND EXISTS (SELECT 1 FROM s WHERE s.database_scope = 'shared')
            JOIN zones z ON z.id = v.zone_id AND NOT z.deleted
            JOIN databases d ON d.id = z.database_id AND d.container_id = t.container_id AND d.environment = t.environment
            """
    }

    public func pushTokenFeeds(_ token: String, logger: Logger) async throws -> PushTokenFeeds? {
        // One statement, so one snapshot and one round trip.
        var bindings = PostgresBindings()
        bindings.append(token)
        bindings.append(ZoneID.publicOwnerName)
        let rows = try await run(PushTokenFeedsRead.self, bindings, logger: logger)
        // A UNION ALL promises no order: the rows are gathered, then put in the order the other reads give.
        var stored: StoredPushToken?
        var subscriptions: [DatabaseScope: [StoredSubscription]] = [:]
        var zones: [DatabaseScope: [ZoneState]] = [:]
        var sharedZones: [SharedZone] = []
        for row in rows {
            let reader = RowReader(row)
            switch try reader[0, as: Int32.self] {
            case 0:
                guard let environment = ContainerEnvironment(rawValue: try reader[2]) else { throw StoreError(.corrupt, "unknown environment") }
                stored = StoredPushToken(
                    token: token, container: try reader[1], environment: environment, userRecordName: try reader[3, as: String?.self],
                    positions: reader.bytes(4) ?? [], createdAt: try reader[5])
            case 1:
                guard let scope = DatabaseScope(rawValue: try reader[2]) else { continue }
                subscriptions[scope, default: []].append(
                    StoredSubscription(subscriptionID: try reader[1], json: reader.bytes(4) ?? [], createdAt: try reader[5]))
            case 2:
                guard let scope = DatabaseScope(rawValue: try reader[2]) else { continue }
                // A database with no zone row still says it was written: it has no unwritten default zone.
                zones[scope, default: []] +=
                    try reader[1, as: String?.self].map { name in
                        [ZoneState(zoneID: ZoneID(zoneName: name), changeSequence: try reader[5], incarnation: try reader[6])]
                    } ?? []
            default:
                sharedZones.append(
                    SharedZone(
                        zoneID: ZoneID(zoneName: try reader[1], ownerRecordName: try reader[3]), incarnation: try reader[6],
                        changeSequence: try reader[5], deleted: false))
            }
        }
        guard let stored else { return nil }
        var feeds = PushTokenFeeds(
            token: stored,
            subscriptions: subscriptions.mapValues { list in
                list.sorted {
                    $0.createdAt == $1.createdAt
                        ? $0.subscriptionID.utf8.lexicographicallyPrecedes($1.subscriptionID.utf8) : $0.createdAt < $1.createdAt
                }
            })
        guard let user = stored.userRecordName else { return PushTokenFeeds(token: stored, subscriptions: [:]) }
        func ordered(_ found: [ZoneState]?, _ database: DatabaseRef) -> [ZoneState] {
            guard let found else { return [ZoneState.unwrittenDefaultZone(of: database)] }
            return found.map {
                ZoneState(zoneID: database.zoneID($0.zoneID.zoneName), changeSequence: $0.changeSequence, incarnation: $0.incarnation)
            }
            .sorted { Self.zoneOrder($0.zoneID.zoneName, $1.zoneID.zoneName) }
        }
        if feeds.subscriptions[.private] != nil {
            feeds.privateZones = ordered(
                zones[.private], DatabaseRef(container: stored.container, environment: stored.environment, scope: .private, ownerRecordName: user))
        }
        if feeds.subscriptions[.public] != nil {
            feeds.publicZones = ordered(zones[.public], DatabaseRef.publicDatabase(container: stored.container, environment: stored.environment))
        }
        feeds.sharedZones = sharedZones.sorted(by: SharedZone.listedBefore)
        return feeds
    }

    /// `zones(in:)`'s order: the default zone first, then by name, byte by byte (`COLLATE "C"`).
    static func zoneOrder(_ left: String, _ right: String) -> Bool {
        let (leftDefault, rightDefault) = (left == ZoneID.defaultZoneName, right == ZoneID.defaultZoneName)
        if leftDefault != rightDefault { return leftDefault }
        return left.utf8.lexicographicallyPrecedes(right.utf8)
    }

    public func trimPushTokens(of userRecordName: String, container: String, environment: ContainerEnvironment, keeping: Int, logger: Logger)
        async throws -> Int
    {
        let rows = try await query(
            """
            WITH deleted AS (
                DELETE FROM push_tokens WHERE token IN (
                    SELECT token FROM push_tokens
                    WHERE container_id = \(container) AND environment = \(environment.rawValue) AND user_record_name = \(userRecordName)
                    ORDER BY created_at DESC, token OFFSET \(keeping))
                RETURNING 1)
            SELECT count(*) FROM deleted
            """, logger: logger)
        for try await row in rows { return Int(try RowReader(row)[0, as: Int64.self]) }
        return 0
    }
}
