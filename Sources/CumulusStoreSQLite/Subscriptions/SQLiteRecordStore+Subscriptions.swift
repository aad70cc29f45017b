public import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging

extension SQLiteRecordStore {
    public func subscriptions(of owner: SubscriptionOwner, ids: [String]?, logger: Logger) async throws -> [StoredSubscription] {
        try await read { db in
            var sql = """
                SELECT subscription_id, body, created_at FROM subscriptions
                WHERE container_id = ? AND environment = ? AND database_scope = ? AND user_record_name = ?
                """
            var arguments: StatementArguments = [owner.container, owner.environment.rawValue, owner.scope.rawValue, owner.userRecordName]
            if let ids {
                sql += " AND subscription_id IN (SELECT value FROM json_each(?))"
                _ = arguments.append(contentsOf: [ids.jsonArray])
            }
            sql += " ORDER BY created_at, subscription_id"
            return try Row.fetchAll(db.cachedStatement(sql: sql), arguments: arguments).map { row in
                StoredSubscription(subscriptionID: row[0], json: Array((row[1] as String).utf8), createdAt: row[2])
            }
        }
    }

    public func modifySubscriptions(of owner: SubscriptionOwner, saving: [StoredSubscription], deleting: [String], logger: Logger) async throws {
        try await write { db in
            let key: StatementArguments = [owner.container, owner.environment.rawValue, owner.scope.rawValue, owner.userRecordName]
            if !deleting.isEmpty {
                try db.cachedStatement(
                    sql: """
                        DELETE FROM subscriptions WHERE container_id = ? AND environment = ? AND database_scope = ? AND user_record_name = ?
                        AND subscription_id IN (SELECT value FROM json_each(?))
                        """
                ).execute(arguments: key + [deleting.jsonArray])
            }
            let upsert = try db.cachedStatement(
                sql: """
                    INSERT INTO subscriptions (container_id, environment, database_scope, user_record_name, subscription_id, body, created_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (container_id, environment, database_scope, user_record_name, subscription_id) DO UPDATE SET body = excluded.body
                    """)
            for subscription in saving {
                try upsert.execute(
                    arguments: key + [subscription.subscriptionID, String(decoding: subscription.json, as: UTF8.self), subscription.createdAt])
            }
        }
    }
}

extension SQLiteRecordStore {
    public func savePushToken(_ token: StoredPushToken, logger: Logger) async throws {
        try await write { db in
            try db.cachedStatement(
                sql: """
                    INSERT INTO push_tokens (token, container_id, environment, user_record_name, positions, created_at) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (token) DO UPDATE SET user_record_name = excluded.user_record_name, positions = excluded.positions,
                        created_at = excluded.created_at
                    """
            ).execute(arguments: [
                token.token, token.container, token.environment.rawValue, token.userRecordName, String(decoding: token.positions, as: UTF8.self),
                token.createdAt,
            ])
        }
    }

    public func pushToken(_ token: String, logger: Logger) async throws -> StoredPushToken? {
        try await read { db in try Self.pushToken(db, token) }
    }

    static func pushToken(_ db: Database, _ token: String) throws -> StoredPushToken? {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT container_id, environment, user_record_name, positions, created_at FROM push_tokens WHERE token = ?"),
                arguments: [token])
        else { return nil }
        guard let environment = ContainerEnvironment(rawValue: row[1]) else { throw StoreError(.corrupt, "unknown environment") }
        return StoredPushToken(
            token: token, container: row[0], environment: environment, userRecordName: row[2], positions: Array((row[3] as String).utf8),
            createdAt: row[4])
    }

    public func pushTokenFeeds(_ token: String, logger: Logger) async throws -> PushTokenFeeds? {
        try await read { db in try Self.pushTokenFeeds(db, token) }
    }

    public func advancePushToken<Result: Sendable>(
        _ token: String, logger: Logger, _ look: @escaping @Sendable (PushTokenFeeds?) throws -> (positions: [UInt8]?, result: Result)
    ) async throws -> Result {
        try await write { db in
            let (positions, result) = try look(try Self.pushTokenFeeds(db, token))
            if let positions {
                // Only the positions: the upsert of `savePushToken` would also rewrite the user index's entry.
                try db.cachedStatement(sql: "UPDATE push_tokens SET positions = ? WHERE token = ?").execute(arguments: [
                    String(decoding: positions, as: UTF8.self), token,
                ])
            }
            return result
        }
    }

    static func pushTokenFeeds(_ db: Database, _ token: String) throws -> PushTokenFeeds? {
        guard let stored = try Self.pushToken(db, token) else { return nil }
        let environment = stored.environment
        var feeds = PushTokenFeeds(token: stored, subscriptions: [:])
        guard let user = stored.userRecordName else { return feeds }
        for row in try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT database_scope, subscription_id, body, created_at FROM subscriptions
                    WHERE container_id = ? AND environment = ? AND database_scope IN ('private', 'shared', 'public') AND user_record_name = ?
                    ORDER BY created_at, subscription_id
                    """),
            arguments: [stored.container, environment.rawValue, user])
        {
            guard let scope = DatabaseScope(rawValue: row[0]) else { continue }
            feeds.subscriptions[scope, default: []].append(
                StoredSubscription(subscriptionID: row[1], json: Array((row[2] as String).utf8), createdAt: row[3]))
        }
        func zones(_ database: DatabaseRef) throws -> [ZoneState] {
            guard let databaseID = try Self.databaseID(db, database) else { return [ZoneState.unwrittenDefaultZone(of: database)] }
            return try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT id, zone_name, change_seq FROM zones WHERE database_id = ? AND deleted = 0
                        ORDER BY zone_name <> '_defaultZone', zone_name
                        """),
                arguments: [databaseID]
            ).map { ZoneState(zoneID: database.zoneID($0[1]), changeSequence: $0[2], incarnation: $0[0]) }
        }
        if feeds.subscriptions[.private] != nil {
            feeds.privateZones = try zones(
                DatabaseRef(container: stored.container, environment: environment, scope: .private, ownerRecordName: user))
        }
        if feeds.subscriptions[.public] != nil {
            feeds.publicZones = try zones(DatabaseRef.publicDatabase(container: stored.container, environment: environment))
        }
        if feeds.subscriptions[.shared] != nil {
            feeds.sharedZones = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.sharedZoneColumns) FROM shared_zone_views v JOIN zones z ON z.id = v.zone_id
                        JOIN databases d ON d.id = z.database_id
                        WHERE v.user_record_name = ? AND v.deleted = 0 AND z.deleted = 0 AND d.container_id = ? AND d.environment = ?
                        ORDER BY d.owner_record_name, z.zone_name
                        """),
                arguments: [user, stored.container, environment.rawValue]
            ).map(Self.sharedZone)
        }
        return feeds
    }

    public func trimPushTokens(of userRecordName: String, container: String, environment: ContainerEnvironment, keeping: Int, logger: Logger)
        async throws -> Int
    {
        try await write { db in
            try db.cachedStatement(
                sql: """
                    DELETE FROM push_tokens WHERE token IN (
                        SELECT token FROM push_tokens WHERE container_id = ? AND environment = ? AND user_record_name = ?
                        ORDER BY created_at DESC, token LIMIT -1 OFFSET ?)
                    """
            ).execute(arguments: [container, environment.rawValue, userRecordName, keeping])
            return db.changesCount
        }
    }
}
