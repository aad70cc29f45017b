import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging

extension SQLiteRecordStore {
    public func createContainer(_ container: String, createdAt: Int64, logger: Logger) async throws {
        do {
            try await write { db in
                try db.cachedStatement(sql: "INSERT INTO containers (id, created_at) VALUES (?, ?)").execute(arguments: [container, createdAt])
            }
        } catch let error as StoreError where error.code == .duplicate {
            throw StoreError(.duplicate, "container \(container) already exists")
        }
    }

    public func containerExists(_ container: String, logger: Logger) async throws -> Bool {
        try await read { db in
            try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM containers WHERE id = ?)"), arguments: [container]) ?? false
        }
    }

    public func saveAPIToken(_ token: StoredAPIToken, logger: Logger) async throws {
        try await write { db in
            try db.cachedStatement(sql: "INSERT INTO api_tokens (token_hash, container_id, environment, created_at, revoked) VALUES (?, ?, ?, ?, ?)")
                .execute(arguments: [Data(token.tokenHash), token.container, token.environment.rawValue, token.createdAt, token.revoked]
                )
        }
    }

    public func apiToken(hash: [UInt8], logger: Logger) async throws -> StoredAPIToken? {
        try await read { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT container_id, environment, created_at, revoked FROM api_tokens WHERE token_hash = ?"),
                    arguments: [Data(hash)]
                )
            else { return nil }
            guard let environment = ContainerEnvironment(rawValue: row["environment"]) else {
                throw StoreError(.corrupt, "api token has an unknown environment")
            }
            return StoredAPIToken(
                tokenHash: hash, container: row["container_id"], environment: environment, createdAt: row["created_at"], revoked: row["revoked"])
        }
    }

    public func revokeAPIToken(hash: [UInt8], logger: Logger) async throws {
        try await write { db in
            try db.cachedStatement(sql: "UPDATE api_tokens SET revoked = 1 WHERE token_hash = ?").execute(arguments: [Data(hash)])
            if db.changesCount == 0 { throw StoreError(.notFound, "no such API token") }
        }
    }

    public func createUser(_ user: UserAccount, logger: Logger) async throws {
        do {
            try await write { db in
                try db.cachedStatement(
                    sql: """
                        INSERT INTO users (user_record_name, container_id, name, email, password_hash, discoverable, created_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """
                ).execute(arguments: [
                    user.userRecordName, user.container, user.name, user.email, user.passwordHash, user.discoverable, user.createdAt,
                ]
                )
            }
        } catch let error as StoreError where error.code == .duplicate {
            throw StoreError(.duplicate, "a user with this name or email already exists in \(user.container)")
        } catch let error as StoreError where error.code == .invalidState {
            throw StoreError(.notFound, "container \(user.container) does not exist")
        }
    }

    static let userColumns = "user_record_name, container_id, name, email, password_hash, discoverable, created_at"

    /// A web auth token with its user, in one statement.
    static let webAuthTokenLookup = """
        SELECT t.created_at AS token_created_at, t.expires_at, \(userColumns.split(separator: ",").map { "u.\($0.trimmingCharacters(in: .whitespaces))" }.joined(separator: ", "))
        FROM web_auth_tokens t JOIN users u ON u.user_record_name = t.user_record_name
        WHERE t.token_hash = ?
        """

    static func user(_ row: Row) -> UserAccount {
        UserAccount(
            userRecordName: row["user_record_name"], container: row["container_id"], name: row["name"], email: row["email"],
            passwordHash: row["password_hash"], discoverable: row["discoverable"], createdAt: row["created_at"]
        )
    }

    public func user(container: String, name: String, logger: Logger) async throws -> UserAccount? {
        try await read { db in
            try Row.fetchOne(
                db.cachedStatement(sql: "SELECT \(Self.userColumns) FROM users WHERE container_id = ? AND name = ?"), arguments: [container, name]
            ).map(Self.user)
        }
    }

    public func user(userRecordName: String, logger: Logger) async throws -> UserAccount? {
        try await read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.userColumns) FROM users WHERE user_record_name = ?"), arguments: [userRecordName])
                .map(Self.user)
        }
    }

    public func saveWebAuthToken(_ token: StoredWebAuthToken, logger: Logger) async throws {
        try await write { db in
            try db.cachedStatement(sql: "INSERT INTO web_auth_tokens (token_hash, user_record_name, created_at, expires_at) VALUES (?, ?, ?, ?)")
                .execute(arguments: [Data(token.tokenHash), token.userRecordName, token.createdAt, token.expiresAt]
                )
        }
    }

    public func webAuthToken(hash: [UInt8], logger: Logger) async throws -> (StoredWebAuthToken, UserAccount)? {
        try await read { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: Self.webAuthTokenLookup),
                    arguments: [Data(hash)]
                )
            else { return nil }
            let user = Self.user(row)
            let token = StoredWebAuthToken(
                tokenHash: hash, userRecordName: user.userRecordName, createdAt: row["token_created_at"], expiresAt: row["expires_at"]
            )
            return (token, user)
        }
    }

    public func deleteWebAuthToken(hash: [UInt8], logger: Logger) async throws {
        try await write { db in
            try db.cachedStatement(sql: "DELETE FROM web_auth_tokens WHERE token_hash = ?").execute(arguments: [Data(hash)])
        }
    }

    public func saveServerKey(_ key: StoredServerKey, logger: Logger) async throws {
        try await write { db in
            try db.cachedStatement(
                sql: "INSERT INTO server_keys (key_id, container_id, environment, public_key_pem, created_at, revoked) VALUES (?, ?, ?, ?, ?, ?)"
            ).execute(arguments: [key.keyID, key.container, key.environment.rawValue, key.publicKeyPEM, key.createdAt, key.revoked]
            )
        }
    }

    public func useSignature(digest: [UInt8], expiresAt: Int64, now: Int64, logger: Logger) async throws -> Bool {
        try await write { db in
            try db.cachedStatement(sql: "DELETE FROM used_signatures WHERE expires_at < ?").execute(arguments: [now])
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO used_signatures (digest, expires_at) VALUES (?, ?)").execute(arguments: [
                Data(digest), expiresAt,
            ])
            return db.changesCount == 1
        }
    }

    public func countAttempts(keys: [String], windowStart: Int64, forgetBefore: Int64, logger: Logger) async throws -> [Int] {
        try await write { db in
            try db.cachedStatement(sql: "DELETE FROM attempt_counts WHERE window_start < ?").execute(arguments: [forgetBefore])
            let statement = try db.cachedStatement(
                sql: """
                    INSERT INTO attempt_counts (key, window_start, count) VALUES (?, ?, 1)
                    ON CONFLICT (key, window_start) DO UPDATE SET count = count + 1 RETURNING count
                    """)
            return try keys.map { key in try Int.fetchOne(statement, arguments: [key, windowStart]) ?? 0 }
        }
    }

    public func serverKey(id: String, logger: Logger) async throws -> StoredServerKey? {
        try await read { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: "SELECT container_id, environment, public_key_pem, created_at, revoked FROM server_keys WHERE key_id = ?"),
                    arguments: [id]
                )
            else { return nil }
            guard let environment = ContainerEnvironment(rawValue: row["environment"]) else {
                throw StoreError(.corrupt, "server key has an unknown environment")
            }
            return StoredServerKey(
                keyID: id, container: row["container_id"], environment: environment, publicKeyPEM: row["public_key_pem"],
                createdAt: row["created_at"], revoked: row["revoked"]
            )
        }
    }
}

extension SQLiteRecordStore {
    public func users(container: String, emails: [String], userRecordNames: [String], logger: Logger) async throws -> [UserAccount] {
        try await read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.userColumns) FROM users WHERE container_id = ?
                        AND (email IN (SELECT value FROM json_each(?)) OR user_record_name IN (SELECT value FROM json_each(?)))
                        """),
                arguments: [container, emails.jsonArray, userRecordNames.jsonArray]
            ).map(Self.user)
        }
    }

    public func setDiscoverable(userRecordName: String, _ discoverable: Bool, logger: Logger) async throws {
        try await write { db in
            try db.cachedStatement(sql: "UPDATE users SET discoverable = ? WHERE user_record_name = ?").execute(arguments: [
                discoverable, userRecordName,
            ])
            if db.changesCount == 0 { throw StoreError(.notFound, "no such user") }
        }
    }

    public func serverSecret(logger: Logger) async throws -> [UInt8] {
        let candidate = Data(ServerSecret.makeCandidate())
        return try await write { db in
            // The first writer's secret wins; every later call, from any process, reads the same one.
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO server_secrets (name, value) VALUES ('tokens', ?)").execute(arguments: [candidate])
            let value = try Data.fetchOne(db.cachedStatement(sql: "SELECT value FROM server_secrets WHERE name = 'tokens'"))!
            return Array(value)
        }
    }
}
