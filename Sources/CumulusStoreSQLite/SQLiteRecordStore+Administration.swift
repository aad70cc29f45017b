import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging

/// What the `cumulus` command line lists and changes.
extension SQLiteRecordStore {
    public func listContainers(logger: Logger) async throws -> [ContainerRecord] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT id, created_at FROM containers ORDER BY id").map { ContainerRecord(id: $0[0], createdAt: $0[1]) }
        }
    }

    public func listAPITokens(container: String, logger: Logger) async throws -> [APITokenRecord] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT token_hash, environment, created_at, revoked FROM api_tokens WHERE container_id = ? ORDER BY created_at, token_hash",
                arguments: [container]
            ).map { row in
                guard let environment = ContainerEnvironment(rawValue: row[1]) else {
                    throw StoreError(.corrupt, "api token has an unknown environment")
                }
                return APITokenRecord(
                    tokenHash: Array(row[0] as Data), container: container, environment: environment, createdAt: row[2], revoked: row[3])
            }
        }
    }

    public func listUsers(container: String, logger: Logger) async throws -> [UserAccount] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT \(Self.userColumns) FROM users WHERE container_id = ? ORDER BY name", arguments: [container])
                .map(Self.user)
        }
    }

    public func listServerKeys(container: String, logger: Logger) async throws -> [ServerKeyRecord] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql:
                    "SELECT key_id, environment, public_key_pem, created_at, revoked FROM server_keys WHERE container_id = ? ORDER BY created_at, key_id",
                arguments: [container]
            ).map { row in
                guard let environment = ContainerEnvironment(rawValue: row[1]) else {
                    throw StoreError(.corrupt, "server key has an unknown environment")
                }
                return ServerKeyRecord(
                    keyID: row[0], container: container, environment: environment, publicKeyPEM: row[2], createdAt: row[3], revoked: row[4])
            }
        }
    }

    public func revokeServerKey(id: String, logger: Logger) async throws {
        try await write { db in
            try db.execute(sql: "UPDATE server_keys SET revoked = 1 WHERE key_id = ?", arguments: [id])
            if db.changesCount == 0 { throw StoreError(.notFound, "no such key \(id)") }
        }
    }

    public func updateUser(userRecordName: String, email: String?, passwordHash: String?, signOut: Bool, logger: Logger) async throws {
        do {
            try await write { db in
                try db.execute(
                    sql: "UPDATE users SET email = ?, password_hash = ? WHERE user_record_name = ?", arguments: [email, passwordHash, userRecordName])
                if db.changesCount == 0 { throw StoreError(.notFound, "no such user") }
                if signOut { try db.execute(sql: "DELETE FROM web_auth_tokens WHERE user_record_name = ?", arguments: [userRecordName]) }
            }
        } catch let error as StoreError where error.code == .duplicate {
            throw StoreError(.duplicate, "another user of the container has the email \(email ?? "")")
        }
    }
}
