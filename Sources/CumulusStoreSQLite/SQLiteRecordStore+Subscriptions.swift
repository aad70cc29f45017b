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
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map { row in
                StoredSubscription(subscriptionID: row[0], json: Array((row[1] as String).utf8), createdAt: row[2])
            }
        }
    }

    public func modifySubscriptions(of owner: SubscriptionOwner, saving: [StoredSubscription], deleting: [String], logger: Logger) async throws {
        try await write { db in
            let key: StatementArguments = [owner.container, owner.environment.rawValue, owner.scope.rawValue, owner.userRecordName]
            if !deleting.isEmpty {
                try db.execute(
                    sql: """
                        DELETE FROM subscriptions WHERE container_id = ? AND environment = ? AND database_scope = ? AND user_record_name = ?
                        AND subscription_id IN (SELECT value FROM json_each(?))
                        """,
                    arguments: key + [deleting.jsonArray])
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
