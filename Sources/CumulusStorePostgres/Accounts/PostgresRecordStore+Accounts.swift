import CumulusModel
public import CumulusStore
import Foundation
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    public func createContainer(_ container: String, createdAt: Int64, logger: Logger) async throws {
        try await query(
            "INSERT INTO containers (id, created_at) VALUES (\(container), \(createdAt))", logger: logger,
            duplicate: "container \(container) already exists")
    }

    public func containerExists(_ container: String, logger: Logger) async throws -> Bool {
        try await first(query("SELECT EXISTS (SELECT 1 FROM containers WHERE id = \(container))", logger: logger).decode(Bool.self)) ?? false
    }

    public func saveAPIToken(_ token: StoredAPIToken, logger: Logger) async throws {
        try await query(
            """
            INSERT INTO api_tokens (token_hash, container_id, environment, created_at, revoked)
            VALUES (\(Data(token.tokenHash)), \(token.container), \(token.environment.rawValue), \(token.createdAt), \(token.revoked))
            """, logger: logger, duplicate: "this API token already exists", missingReference: "container \(token.container) does not exist")
    }

    public func apiToken(hash: [UInt8], logger: Logger) async throws -> StoredAPIToken? {
        let rows = try await query(
            "SELECT container_id, environment, created_at, revoked FROM api_tokens WHERE token_hash = \(Data(hash))", logger: logger)
        guard let (container, environment, createdAt, revoked) = try await first(rows.decode((String, String, Int64, Bool).self)) else {
            return nil
        }
        guard let environment = ContainerEnvironment(rawValue: environment) else {
            throw StoreError(.corrupt, "api token has an unknown environment")
        }
        return StoredAPIToken(tokenHash: hash, container: container, environment: environment, createdAt: createdAt, revoked: revoked)
    }

    public func revokeAPIToken(hash: [UInt8], logger: Logger) async throws {
        let revoked = try await first(
            query("UPDATE api_tokens SET revoked = true WHERE token_hash = \(Data(hash)) RETURNING 1", logger: logger).decode(Int.self))
        if revoked == nil { throw StoreError(.notFound, "no such API token") }
    }

    static let userColumns = "user_record_name, container_id, name, email, password_hash, discoverable, created_at"

    static func users(_ rows: PostgresRowSequence) async throws -> [UserAccount] {
        var users: [UserAccount] = []
        for try await (userRecordName, container, name, email, passwordHash, discoverable, createdAt) in rows.decode(
            (String, String, String, String?, String?, Bool, Int64).self)
        {
            users.append(
                UserAccount(
                    userRecordName: userRecordName, container: container, name: name, email: email, passwordHash: passwordHash,
                    discoverable: discoverable, createdAt: createdAt))
        }
        return users
    }

    public func createUser(_ user: UserAccount, logger: Logger) async throws {
        try await query(
            """
            INSERT INTO users (user_record_name, container_id, name, email, password_hash, discoverable, created_at)
            VALUES (\(user.userRecordName), \(user.container), \(user.name), \(user.email), \(user.passwordHash), \(user.discoverable), \(user.createdAt))
            """, logger: logger, duplicate: "a user with this name or email already exists in \(user.container)",
            missingReference: "container \(user.container) does not exist")
    }

    public func user(container: String, name: String, logger: Logger) async throws -> UserAccount? {
        try await Self.users(
            query(
                PostgresQuery(
                    unsafeSQL: "SELECT \(Self.userColumns) FROM users WHERE container_id = $1 AND lower(name) = lower($2)",
                    binds: try Self.binds(container, name)), logger: logger)
        ).first
    }

    public func user(userRecordName: String, logger: Logger) async throws -> UserAccount? {
        try await Self.users(
            query(
                PostgresQuery(unsafeSQL: "SELECT \(Self.userColumns) FROM users WHERE user_record_name = $1", binds: try Self.binds(userRecordName)),
                logger: logger)
        ).first
    }

    public func saveWebAuthToken(_ token: StoredWebAuthToken, logger: Logger) async throws {
        try await query(
            """
            INSERT INTO web_auth_tokens (token_hash, user_record_name, created_at, expires_at)
            VALUES (\(Data(token.tokenHash)), \(token.userRecordName), \(token.createdAt), \(token.expiresAt))
            """, logger: logger, missingReference: "no such user")
    }

    public func webAuthToken(hash: [UInt8], logger: Logger) async throws -> (StoredWebAuthToken, UserAccount)? {
        let rows = try await query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT t.created_at, t.expires_at, \(Self.userColumns.split(separator: ",").map { "u." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", "))
                    FROM web_auth_tokens t JOIN users u ON u.user_record_name = t.user_record_name WHERE t.token_hash = $1
                    """, binds: try Self.binds(Data(hash))), logger: logger)
        for try await (createdAt, expiresAt, userRecordName, container, name, email, passwordHash, discoverable, userCreatedAt) in rows.decode(
            (Int64, Int64, String, String, String, String?, String?, Bool, Int64).self)
        {
            let user = UserAccount(
                userRecordName: userRecordName, container: container, name: name, email: email, passwordHash: passwordHash,
                discoverable: discoverable, createdAt: userCreatedAt)
            return (StoredWebAuthToken(tokenHash: hash, userRecordName: userRecordName, createdAt: createdAt, expiresAt: expiresAt), user)
        }
        return nil
    }

    public func deleteWebAuthToken(hash: [UInt8], logger: Logger) async throws {
        try await query("DELETE FROM web_auth_tokens WHERE token_hash = \(Data(hash))", logger: logger)
    }

    public func saveServerKey(_ key: StoredServerKey, logger: Logger) async throws {
        try await query(
            """
            INSERT INTO server_keys (key_id, container_id, environment, public_key_pem, created_at, revoked)
            VALUES (\(key.keyID), \(key.container), \(key.environment.rawValue), \(key.publicKeyPEM), \(key.createdAt), \(key.revoked))
            """, logger: logger, duplicate: "key \(key.keyID) already exists", missingReference: "container \(key.container) does not exist")
    }

    public func useSignature(digest: [UInt8], expiresAt: Int64, now: Int64, logger: Logger) async throws -> Bool {
        try await query("DELETE FROM used_signatures WHERE expires_at < \(now)", logger: logger)
        let rows = try await query(
            """
            INSERT INTO used_signatures (digest, expires_at) VALUES (\(Data(digest)), \(expiresAt))
            ON CONFLICT (digest) DO NOTHING RETURNING expires_at
            """, logger: logger)
        return try await first(rows.decode(Int64.self)) != nil
    }

    public func countAttempts(keys: [String], windowStart: Int64, forgetBefore: Int64, logger: Logger) async throws -> [Int] {
        try await query("DELETE FROM attempt_counts WHERE window_start < \(forgetBefore)", logger: logger)
        // One statement for all keys; the answer comes back in `keys` order.
        let rows = try await query(
            """
            INSERT INTO attempt_counts (key, window_start, count)
            SELECT key, \(windowStart), 1 FROM unnest(\(keys)::text[]) AS key
            ON CONFLICT (key, window_start) DO UPDATE SET count = attempt_counts.count + 1
            RETURNING key, count
            """, logger: logger)
        var counts: [String: Int] = [:]
        for try await (key, count) in rows.decode((String, Int32).self) { counts[key] = Int(count) }
        return keys.map { counts[$0] ?? 0 }
    }

    public func serverKey(id: String, logger: Logger) async throws -> StoredServerKey? {
        let rows = try await query(
            "SELECT container_id, environment, public_key_pem, created_at, revoked FROM server_keys WHERE key_id = \(id)", logger: logger)
        guard let (container, environment, pem, createdAt, revoked) = try await first(rows.decode((String, String, String, Int64, Bool).self)) else {
            return nil
        }
        guard let environment = ContainerEnvironment(rawValue: environment) else {
            throw StoreError(.corrupt, "server key has an unknown environment")
        }
        return StoredServerKey(keyID: id, container: container, environment: environment, publicKeyPEM: pem, createdAt: createdAt, revoked: revoked)
    }

    public func users(container: String, emails: [String], userRecordNames: [String], logger: Logger) async throws -> [UserAccount] {
        guard !emails.isEmpty || !userRecordNames.isEmpty else { return [] }
        return try await Self.users(
            query(
                PostgresQuery(
                    unsafeSQL: """
                        SELECT \(Self.userColumns) FROM users
                        WHERE container_id = $1 AND (lower(email) = ANY($2) OR user_record_name = ANY($3)) ORDER BY user_record_name
                        """, binds: try Self.binds(container, emails.map { $0.lowercased() }, userRecordNames)), logger: logger))
    }

    public func setDiscoverable(userRecordName: String, _ discoverable: Bool, logger: Logger) async throws {
        let updated = try await first(
            query(
                "UPDATE users SET discoverable = \(discoverable) WHERE user_record_name = \(userRecordName) RETURNING 1", logger: logger
            ).decode(Int.self))
        if updated == nil { throw StoreError(.notFound, "no such user") }
    }

    public func serverSecret(logger: Logger) async throws -> [UInt8] {
        // The first writer's secret wins; every later call, from any instance, reads the same one.
        try await query(
            "INSERT INTO server_secrets (name, value) VALUES ('tokens', \(Data(ServerSecret.makeCandidate()))) ON CONFLICT (name) DO NOTHING",
            logger: logger)
        guard let value = try await first(query("SELECT value FROM server_secrets WHERE name = 'tokens'", logger: logger).decode(Data.self)) else {
            throw StoreError(.corrupt, "the token secret is missing")
        }
        return Array(value)
    }

    // MARK: - Helpers

    /// The first element of a row sequence, if any; the rest are not read.
    func first<S: AsyncSequence>(_ sequence: S) async throws -> S.Element? {
        for try await element in sequence { return element }
        return nil
    }

    static func binds(_ values: any PostgresEncodable...) throws -> PostgresBindings {
        var bindings = PostgresBindings()
        for value in values { try bindings.append(value, context: .default) }
        return bindings
    }
}
