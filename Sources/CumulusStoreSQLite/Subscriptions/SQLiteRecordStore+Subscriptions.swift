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
        try await read { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: "SELECT container_id, environment, user_record_name, positions, created_at FROM push_tokens WHERE token = ?"),
                    arguments: [token])
            else { return nil }
            guard let environment = ContainerEnvironment(rawValue: row[1]) else { throw StoreError(.corrupt, "unknown environment") }
            return StoredPushToken(
                token: token, container: row[0], environment: environment, userRecordName: row[2], positions: Array((row[3] as String).utf8),
                createdAt: row[4])
        }
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
