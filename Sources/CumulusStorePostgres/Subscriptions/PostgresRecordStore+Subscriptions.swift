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
        try await query(
            """
            INSERT INTO push_tokens (token, container_id, environment, user_record_name, positions, created_at)
            VALUES (\(token.token), \(token.container), \(token.environment.rawValue), \(token.userRecordName),
                \(String(decoding: token.positions, as: UTF8.self)), \(token.createdAt))
            ON CONFLICT (token) DO UPDATE SET user_record_name = excluded.user_record_name, positions = excluded.positions,
                created_at = excluded.created_at
            """, logger: logger, missingReference: "the container does not exist")
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
