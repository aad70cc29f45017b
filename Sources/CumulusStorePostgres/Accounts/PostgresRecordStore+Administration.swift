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

    public func eraseUser(userRecordName: String, attemptKeyPrefixes: [String], timestamp: Int64, logger: Logger) async throws -> UserErasure {
        try await eraseUser(
            userRecordName: userRecordName, container: nil, attemptKeyPrefixes: attemptKeyPrefixes, timestamp: timestamp, logger: logger)
    }

    /// Erases what this database holds of a user; `container` when it may not hold their account (a shard).
    func eraseUser(userRecordName: String, container: String?, attemptKeyPrefixes: [String], timestamp: Int64, logger: Logger) async throws
        -> UserErasure
    {
        let planner = self.planner
        // Deleted rows stay in the tables' files until VACUUM reclaims their space and later writes reuse it
        // (`filesScrubbed` stays false): docs/OPERATIONS.md says what an operator runs for the bytes to be gone.
        return try await transaction(logger: logger) { connection in
            try await Self.run(
                UserScripts.erase(
                    userRecordName: userRecordName, attemptKeyPrefixes: attemptKeyPrefixes, timestamp: timestamp, planner: planner,
                    container: container),
                connection, logger: logger)
        }
    }

    /// The SQL of the ``UserScripts/erase(userRecordName:attemptKeyPrefixes:timestamp:planner:)`` actions.
    static func performUserAction(_ action: StoreAction, _ connection: PostgresConnection, logger: Logger) async throws -> StoreAnswer {
        /// Runs a statement; answers the rows it changed.
        func changed(_ query: PostgresQuery) async throws -> Int {
            var count = 0
            for try await _ in try await connection.query(query, logger: logger) { count += 1 }
            return count
        }
        switch action {
        case .readUserContainer(let user):
            for try await container in try await connection.query(
                "SELECT container_id FROM users WHERE user_record_name = \(user) FOR UPDATE", logger: logger
            ).decode(String.self) {
                return .text(container)
            }
            return .text(nil)
        case .readRecordsCreated(let zone, let user):
            var names: [String] = []
            for try await name in try await connection.query(
                "SELECT record_name FROM records WHERE zone_id = \(zone) AND created_by = \(user) AND NOT deleted", logger: logger
            ).decode(String.self) {
                names.append(name)
            }
            return .list(names)
        case .readUserZones(let user, let container):
            var zones: [ZoneRow] = []
            for try await (id, databaseID, sequence) in try await connection.query(
                """
                SELECT z.id, z.database_id, z.change_seq FROM zones z JOIN databases d ON d.id = z.database_id
                WHERE d.scope = 'private' AND d.owner_record_name = \(user) AND d.container_id = \(container) AND NOT z.deleted
                ORDER BY z.id FOR UPDATE OF z
                """, logger: logger
            ).decode((Int64, Int64, Int64).self) {
                zones.append(ZoneRow(id: id, databaseID: databaseID, changeSequence: sequence))
            }
            return .zones(zones)
        case .countZoneContents(let zones):
            for try await (records, shares) in try await connection.query(
                """
                SELECT (SELECT count(*) FROM records WHERE NOT deleted AND zone_id = ANY(\(zones)))::bigint,
                    (SELECT count(*) FROM shares WHERE zone_id = ANY(\(zones)))::bigint
                """, logger: logger
            ).decode((Int64, Int64).self) {
                return .counts(["records": Int(records), "shares": Int(shares)])
            }
            return .counts([:])
        case .deleteHistory(let zones, let createdBy):
            return .count(
                try await changed(
                    """
                    DELETE FROM record_history WHERE zone_id = ANY(\(zones)) AND (\(createdBy)::text IS NULL OR created_by = \(createdBy))
                    RETURNING 1
                    """))
        case .readParticipations(let user):
            var participations: [Participation] = []
            for try await (zone, databaseID, name) in try await connection.query(
                """
                SELECT s.zone_id, z.database_id, s.share_record_name FROM share_participants p JOIN shares s ON s.id = p.share_id
                JOIN zones z ON z.id = s.zone_id
                WHERE p.user_record_name = \(user) AND p.type <> 'OWNER' ORDER BY s.zone_id, s.id
                """, logger: logger
            ).decode((Int64, Int64, String).self) {
                participations.append(Participation(zone: ZoneRow(id: zone, databaseID: databaseID, changeSequence: 0), shareRecordName: name))
            }
            return .participations(participations)
        case .removeParticipant(let user):
            try await connection.query("DELETE FROM share_participants WHERE user_record_name = \(user)", logger: logger)
        case .deleteAssetReceipts(let user, let container):
            var receipts = 0
            var files = Set<String>()
            for try await file in try await connection.query(
                """
                DELETE FROM asset_uploads WHERE container_id = \(container)
                AND ((database_scope = 'private' AND owner_record_name = \(user)) OR (database_scope = 'public' AND uploader = \(user)))
                RETURNING file_id
                """, logger: logger
            ).decode(String?.self) {
                receipts += 1
                if let file { files.insert(file) }
            }
            for try await file in try await connection.query(
                "SELECT DISTINCT file_id FROM asset_uploads WHERE file_id = ANY(\(Array(files)))", logger: logger
            ).decode(String.self) {
                files.remove(file)
            }
            return .removed(receipts, files: files.sorted())
        case .anonymizeAuthor(let user, let erased):
            var records = 0
            for table in ["records", "record_history"] {
                // The device the user wrote from goes with their name (`records/lookup` showed it to the zone's owner).
                for (author, device) in [("created_by", "created_device"), ("modified_by", "modified_device")] {
                    let count = try await changed(
                        PostgresQuery(
                            unsafeSQL: "UPDATE \(table) SET \(author) = $1, \(device) = $3 WHERE \(author) = $2 RETURNING 1",
                            binds: try Self.binds(erased, user, UserErasure.erasureDeviceID)))
                    if table == "records" { records += count }
                }
            }
            try await connection.query("UPDATE asset_uploads SET uploader = \(erased) WHERE uploader = \(user)", logger: logger)
            return .count(records)
        case .deleteUserRows(let user, let prefixes):
            for prefix in prefixes {
                try await connection.query("DELETE FROM attempt_counts WHERE starts_with(key, \(prefix))", logger: logger)
            }
            let databases = "SELECT id FROM databases WHERE scope = 'private' AND owner_record_name = $1"
            var counts: [String: Int] = [:]
            for (statement, counted) in [
                ("DELETE FROM shared_zone_views WHERE user_record_name = $1", nil),
                ("DELETE FROM shared_databases WHERE user_record_name = $1", nil),
                ("DELETE FROM participant_changes WHERE user_record_name = $1", nil),
                ("DELETE FROM subscriptions WHERE user_record_name = $1", "subscriptions"),
                ("DELETE FROM push_tokens WHERE user_record_name = $1", "pushTokens"),
                ("DELETE FROM devices WHERE user_record_name = $1", "devices"),
                ("DELETE FROM web_auth_tokens WHERE user_record_name = $1", "webAuthTokens"),
                // Zone rows other users' ended views still point at stay as tombstones; the rest go.
                ("DELETE FROM zones WHERE database_id IN (\(databases)) AND id NOT IN (SELECT zone_id FROM shared_zone_views)", nil),
                (
                    """
                    DELETE FROM databases WHERE scope = 'private' AND owner_record_name = $1
                    AND NOT EXISTS (SELECT 1 FROM zones WHERE zones.database_id = databases.id)
                    """, nil
                ),
                ("DELETE FROM users WHERE user_record_name = $1", nil),
            ] as [(String, String?)] {
                let count = try await changed(PostgresQuery(unsafeSQL: statement + " RETURNING 1", binds: try Self.binds(user)))
                if let counted { counts[counted] = count }
            }
            return .counts(counts)
        default:
            throw StoreError(.unexpected, "\(action) is not a user action")
        }
        return .none
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
