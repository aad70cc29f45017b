import CumulusModel
public import CumulusStore
import Foundation
public import Logging
import PostgresNIO

/// What the `cumulus` command line lists and changes.
extension PostgresRecordStore {
    public func listContainers(logger: Logger) async throws -> [ContainerRecord] {
        var containers: [ContainerRecord] = []
        for try await (id, createdAt) in try await query("SELECT id, created_at FROM containers ORDER BY id", logger: logger).decode(
            (String, Int64).self)
        {
            containers.append(ContainerRecord(id: id, createdAt: createdAt))
        }
        return containers
    }

    public func listAPITokens(container: String, logger: Logger) async throws -> [APITokenRecord] {
        let rows = try await query(
            "SELECT token_hash, environment, created_at, revoked FROM api_tokens WHERE container_id = \(container) ORDER BY created_at, token_hash",
            logger: logger)
        var tokens: [APITokenRecord] = []
        for try await (hash, environment, createdAt, revoked) in rows.decode((Data, String, Int64, Bool).self) {
            guard let environment = ContainerEnvironment(rawValue: environment) else {
                throw StoreError(.corrupt, "api token has an unknown environment")
            }
            tokens.append(
                APITokenRecord(tokenHash: Array(hash), container: container, environment: environment, createdAt: createdAt, revoked: revoked))
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

    public func listServerKeys(container: String, logger: Logger) async throws -> [ServerKeyRecord] {
        let rows = try await query(
            """
            SELECT key_id, environment, public_key_pem, created_at, revoked FROM server_keys
            WHERE container_id = \(container) ORDER BY created_at, key_id
            """, logger: logger)
        var keys: [ServerKeyRecord] = []
        for try await (keyID, environment, pem, createdAt, revoked) in rows.decode((String, String, String, Int64, Bool).self) {
            guard let environment = ContainerEnvironment(rawValue: environment) else {
                throw StoreError(.corrupt, "server key has an unknown environment")
            }
            keys.append(
                ServerKeyRecord(
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
}
