public import CumulusModel
public import CumulusStore
import Foundation
public import Logging
import PostgresNIO

/// What the `cumulus` command line lists and changes.
extension PostgresRecordStore {
    public func listContainers(logger: Logger) async throws -> [StoredContainer] {
        var containers: [StoredContainer] = []
        for try await (id, createdAt) in try await query("SELECT id, created_at FROM containers ORDER BY id", logger: logger).decode(
            (String, Int64).self)
        {
            containers.append(StoredContainer(id: id, createdAt: createdAt))
        }
        return containers
    }

    public func listAPITokens(container: String, logger: Logger) async throws -> [StoredAPIToken] {
        let rows = try await query(
            "SELECT token_hash, environment, created_at, revoked FROM api_tokens WHERE container_id = \(container) ORDER BY created_at, token_hash",
            logger: logger)
        var tokens: [StoredAPIToken] = []
        for try await (hash, environment, createdAt, revoked) in rows.decode((Data, String, Int64, Bool).self) {
            guard let environment = ContainerEnvironment(rawValue: environment) else {
                throw StoreError(.corrupt, "api token has an unknown environment")
            }
            tokens.append(
                StoredAPIToken(tokenHash: Array(hash), container: container, environment: environment, createdAt: createdAt, revoked: revoked))
        }
        return tokens
    }

    public func listUsers(container: String, logger: Logger) async throws -> [UserAccount] {
        try await Self.users(
            query(
                PostgresQuery(
                    unsafeSQL: "SELECT \(Self.userColumns) FROM users WHERE container_id = $1 ORDER BY lower(name)", binds: try Self.binds(container)),
                logger: logger))
    }

    public func listServerKeys(container: String, logger: Logger) async throws -> [StoredServerKey] {
        let rows = try await query(
            """
            SELECT key_id, environment, public_key_pem, created_at, revoked FROM server_keys
            WHERE container_id = \(container) ORDER BY created_at, key_id
            """, logger: logger)
        var keys: [StoredServerKey] = []
        for try await (keyID, environment, pem, createdAt, revoked) in rows.decode((String, String, String, Int64, Bool).self) {
            guard let environment = ContainerEnvironment(rawValue: environment) else {
                throw StoreError(.corrupt, "server key has an unknown environment")
            }
            keys.append(
                StoredServerKey(
                    keyID: keyID, container: container, environment: environment, publicKeyPEM: pem, createdAt: createdAt, revoked: revoked))
        }
        return keys
    }

    public func revokeServerKey(id: String, logger: Logger) async throws {
        let revoked = try await first(
            query("UPDATE server_keys SET revoked = true WHERE key_id = \(id) RETURNING 1", logger: logger).decode(Int.self))
        if revoked == nil { throw StoreError(.notFound, "no such key \(id)") }
    }

    public func updateUser(userRecordName: String, email: String?, passwordHash: String?, signOut: Bool, logger: Logger) async throws {
        do {
            try await transaction(logger: logger) { connection in
                let updated = try await connection.query(
                    "UPDATE users SET email = \(email), password_hash = \(passwordHash) WHERE user_record_name = \(userRecordName) RETURNING 1",
                    logger: logger
                ).collect()
                if updated.isEmpty { throw StoreError(.notFound, "no such user") }
                if signOut {
                    try await connection.query("DELETE FROM web_auth_tokens WHERE user_record_name = \(userRecordName)", logger: logger)
                }
            }
        } catch let error as StoreError where error.code == .duplicate {
            throw StoreError(.duplicate, "another user of the container has the email \(email ?? "")")
        }
    }

    public func deleteContainer(_ container: String, logger: Logger) async throws {
        try await transaction(logger: logger) { connection in
            // Views and counters of the container's users have no foreign key to cascade from; everything else goes
            // with the container's row.
            let users = "SELECT user_record_name FROM users WHERE container_id = $1"
            for statement in [
                "DELETE FROM shared_zone_views WHERE zone_id IN (SELECT z.id FROM zones z JOIN databases d ON d.id = z.database_id WHERE d.container_id = $1)",
                "DELETE FROM shared_zone_views WHERE user_record_name IN (\(users))",
                "DELETE FROM shared_databases WHERE user_record_name IN (\(users))",
                "DELETE FROM participant_changes WHERE user_record_name IN (\(users))",
                "DELETE FROM link_uploads WHERE container_id = $1",
            ] {
                try await connection.query(PostgresQuery(unsafeSQL: statement, binds: try Self.binds(container)), logger: logger)
            }
            let deleted = try await connection.query("DELETE FROM containers WHERE id = \(container) RETURNING 1", logger: logger).collect()
            if deleted.isEmpty { throw StoreError(.notFound, "no such container \(container)") }
        }
    }

    public func deleteUser(userRecordName: String, logger: Logger) async throws {
        try await transaction(logger: logger) { connection in
            let exists = try await connection.query("SELECT 1 FROM users WHERE user_record_name = \(userRecordName) FOR UPDATE", logger: logger)
                .collect()
            if exists.isEmpty { throw StoreError(.notFound, "no such user") }
            // The user's zones go as a zone deletion goes: participants' devices drop them through their feeds.
            var zones: [(Int64, Int64)] = []
            for try await zone in try await connection.query(
                """
                SELECT z.id, z.database_id FROM zones z JOIN databases d ON d.id = z.database_id
                WHERE d.scope = 'private' AND d.owner_record_name = \(userRecordName) AND NOT z.deleted ORDER BY z.id FOR UPDATE OF z
                """, logger: logger
            ).decode((Int64, Int64).self) {
                zones.append(zone)
            }
            for (zoneRowID, databaseID) in zones {
                try await Self.run(ZoneScripts.delete(ZoneRow(id: zoneRowID, databaseID: databaseID, changeSequence: 0)), connection, logger: logger)
            }
            // Shares of other users list the user no more: each share takes a new change tag, and the user's views end.
            var shares: [(Int64, String, Int64)] = []
            for try await share in try await connection.query(
                """
                SELECT s.zone_id, s.share_record_name, z.database_id FROM share_participants p JOIN shares s ON s.id = p.share_id
                JOIN zones z ON z.id = s.zone_id
                WHERE p.user_record_name = \(userRecordName) AND p.type <> 'OWNER' ORDER BY s.zone_id, s.id
                """, logger: logger
            ).decode((Int64, String, Int64).self) {
                shares.append(share)
            }
            try await connection.query("DELETE FROM share_participants WHERE user_record_name = \(userRecordName)", logger: logger)
            for (zoneRowID, shareRecordName, databaseID) in shares {
                try await Self.run(
                    ShareScripts.touchShareRecord(shareRecordName, zone: ZoneRow(id: zoneRowID, databaseID: databaseID, changeSequence: 0)),
                    connection,
                    logger: logger)
            }
            let databases = "SELECT id FROM databases WHERE scope = 'private' AND owner_record_name = $1"
            for statement in [
                "DELETE FROM shared_zone_views WHERE user_record_name = $1",
                "DELETE FROM shared_databases WHERE user_record_name = $1",
                "DELETE FROM participant_changes WHERE user_record_name = $1",
                "DELETE FROM subscriptions WHERE user_record_name = $1",
                "DELETE FROM push_tokens WHERE user_record_name = $1",
                // Zone rows other users' ended views still point at stay as tombstones; the rest go.
                "DELETE FROM zones WHERE database_id IN (\(databases)) AND id NOT IN (SELECT zone_id FROM shared_zone_views)",
                """
                DELETE FROM databases WHERE scope = 'private' AND owner_record_name = $1
                AND NOT EXISTS (SELECT 1 FROM zones WHERE zones.database_id = databases.id)
                """,
                "DELETE FROM users WHERE user_record_name = $1",
            ] {
                try await connection.query(PostgresQuery(unsafeSQL: statement, binds: try Self.binds(userRecordName)), logger: logger)
            }
        }
    }

    public func saveConsoleCredential(_ credential: ConsoleCredential, now: Int64, logger: Logger) async throws {
        try await transaction(logger: logger) { connection in
            try await connection.query("DELETE FROM console_credentials WHERE expires_at <= \(now)", logger: logger)
            try await connection.query(
                """
                INSERT INTO console_credentials (token_hash, container_id, kind, expires_at)
                VALUES (\(Data(credential.tokenHash)), \(credential.container), \(credential.kind.rawValue), \(credential.expiresAt))
                """, logger: logger)
        }
    }

    public func takeConsoleCredential(hash: [UInt8], kind: ConsoleCredential.Kind, now: Int64, logger: Logger) async throws
        -> ConsoleCredential?
    {
        let rows = try await query(
            """
            DELETE FROM console_credentials WHERE token_hash = \(Data(hash)) AND kind = \(kind.rawValue) AND expires_at > \(now)
            RETURNING container_id, expires_at
            """, logger: logger)
        return try await first(rows.decode((String, Int64).self)).map {
            ConsoleCredential(tokenHash: hash, container: $0.0, kind: kind, expiresAt: $0.1)
        }
    }

    public func consoleCredential(hash: [UInt8], now: Int64, logger: Logger) async throws -> ConsoleCredential? {
        let rows = try await query(
            "SELECT container_id, kind, expires_at FROM console_credentials WHERE token_hash = \(Data(hash)) AND expires_at > \(now)",
            logger: logger)
        guard let (container, kind, expiresAt) = try await first(rows.decode((String, String, Int64).self)),
            let kind = ConsoleCredential.Kind(rawValue: kind)
        else { return nil }
        return ConsoleCredential(tokenHash: hash, container: container, kind: kind, expiresAt: expiresAt)
    }

    public func listLinkSnapshots(container: String, environment: ContainerEnvironment, now: Int64, limit: Int, logger: Logger) async throws
        -> [LinkSnapshot]
    {
        let rows = try await query(
            """
            SELECT id, kind, payload, created_at, expires_at FROM link_snapshots
            WHERE container_id = \(container) AND environment = \(environment.rawValue) AND expires_at > \(now)
            ORDER BY created_at DESC, id LIMIT \(limit)
            """, logger: logger)
        var snapshots: [LinkSnapshot] = []
        for try await (id, kind, payload, createdAt, expiresAt) in rows.decode((String, String, String, Int64, Int64).self) {
            snapshots.append(
                LinkSnapshot(
                    id: id, container: container, environment: environment, kind: kind, payload: Array(payload.utf8), createdAt: createdAt,
                    expiresAt: expiresAt))
        }
        return snapshots
    }
}
