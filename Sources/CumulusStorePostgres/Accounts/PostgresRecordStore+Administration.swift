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
        let planner = self.planner
        return try await transaction(logger: logger) { connection in
            var container: String?
            for try await id in try await connection.query(
                "SELECT container_id FROM users WHERE user_record_name = \(userRecordName) FOR UPDATE", logger: logger
            ).decode(String.self) {
                container = id
            }
            guard let container else { throw StoreError(.notFound, "no such user") }
            var erasure = UserErasure()
            /// Runs a statement over `$1` (the user) and `$2` (their container); answers the rows it changed (or counted).
            func run(_ sql: String) async throws -> Int {
                var count = 0
                for try await value in try await connection.query(
                    PostgresQuery(
                        unsafeSQL: "WITH done AS (\(sql) RETURNING 1) SELECT count(*)::bigint FROM done",
                        binds: try Self.binds(userRecordName, container)),
                    logger: logger
                ).decode(Int64.self) {
                    count = Int(value)
                }
                return count
            }
            func value(_ sql: String) async throws -> Int {
                var count = 0
                for try await value in try await connection.query(
                    PostgresQuery(unsafeSQL: sql, binds: try Self.binds(userRecordName, container)), logger: logger
                ).decode(Int64.self) {
                    count = Int(value)
                }
                return count
            }
            let theirZones = """
                SELECT z.id FROM zones z JOIN databases d ON d.id = z.database_id
                WHERE d.scope = 'private' AND d.owner_record_name = $1 AND d.container_id = $2
                """
            // The records they created in the public database are deleted as a batch deletes them (feeds, digests, the
            // deletions they cascade to), by no one.
            for environment in ContainerEnvironment.allCases {
                let publicDatabase = DatabaseRef.publicDatabase(container: container, environment: environment)
                guard let zone = try await Self.zoneRow(connection, publicDatabase, zoneName: ZoneID.defaultZoneName, forUpdate: true, logger: logger)
                else { continue }
                var names: [String] = []
                for try await name in try await connection.query(
                    "SELECT record_name FROM records WHERE zone_id = \(zone.id) AND created_by = \(userRecordName) AND NOT deleted", logger: logger
                ).decode(String.self) {
                    names.append(name)
                }
                guard !names.isEmpty else { continue }
                let batch = RecordBatch(
                    database: publicDatabase, zoneName: ZoneID.defaultZoneName, atomic: false,
                    operations: names.map { RecordModification(operationType: .forceDelete, recordName: $0) },
                    author: UserErasure.erasedUserRecordName, deviceID: UserErasure.erasureDeviceID, timestamp: timestamp)
                _ = try await Self.run(ModifyRecordsScript.script(batch, planner: planner), connection, logger: logger)
                erasure.publicRecords += names.count
                erasure.historyVersions += try await run("DELETE FROM record_history WHERE zone_id = \(zone.id) AND created_by = $1")
            }
            erasure.records = try await value("SELECT count(*)::bigint FROM records WHERE NOT deleted AND zone_id IN (\(theirZones))")
            erasure.sharesStopped = try await value("SELECT count(*)::bigint FROM shares WHERE zone_id IN (\(theirZones) AND NOT z.deleted)")
            erasure.historyVersions += try await run("DELETE FROM record_history WHERE zone_id IN (\(theirZones))")
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
            erasure.zones = zones.count
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
            erasure.participations = shares.count
            // Their assets: the receipts of their zones and of their public records; files no other receipt names.
            var files = Set<String>()
            for try await file in try await connection.query(
                """
                DELETE FROM asset_uploads WHERE container_id = \(container)
                AND ((database_scope = 'private' AND owner_record_name = \(userRecordName)) OR (database_scope = 'public' AND uploader = \(userRecordName)))
                RETURNING file_id
                """, logger: logger
            ).decode(String?.self) {
                erasure.assetReceipts += 1
                if let file { files.insert(file) }
            }
            for try await file in try await connection.query(
                "SELECT DISTINCT file_id FROM asset_uploads WHERE file_id = ANY(\(Array(files)))", logger: logger
            ).decode(String.self) {
                files.remove(file)
            }
            erasure.assetFiles = files.sorted()
            // What they wrote in other users' zones stays, by no one.
            let erased = UserErasure.erasedUserRecordName
            for table in ["records", "record_history"] {
                for column in ["created_by", "modified_by"] {
                    let changed = try await run("UPDATE \(table) SET \(column) = '\(erased)' WHERE \(column) = $1 AND $2 = $2")
                    if table == "records" { erasure.recordsAnonymized += changed }
                }
            }
            _ = try await run("UPDATE asset_uploads SET uploader = '\(erased)' WHERE uploader = $1 AND $2 = $2")
            for prefix in attemptKeyPrefixes {
                try await connection.query("DELETE FROM attempt_counts WHERE starts_with(key, \(prefix))", logger: logger)
            }
            let databases = "SELECT id FROM databases WHERE scope = 'private' AND owner_record_name = $1"
            for (statement, counted) in [
                ("DELETE FROM shared_zone_views WHERE user_record_name = $1", nil),
                ("DELETE FROM shared_databases WHERE user_record_name = $1", nil),
                ("DELETE FROM participant_changes WHERE user_record_name = $1", nil),
                ("DELETE FROM subscriptions WHERE user_record_name = $1", \UserErasure.subscriptions),
                ("DELETE FROM push_tokens WHERE user_record_name = $1", \UserErasure.pushTokens),
                ("DELETE FROM devices WHERE user_record_name = $1", \UserErasure.devices),
                ("DELETE FROM web_auth_tokens WHERE user_record_name = $1", \UserErasure.webAuthTokens),
                // Zone rows other users' ended views still point at stay as tombstones; the rest go.
                ("DELETE FROM zones WHERE database_id IN (\(databases)) AND id NOT IN (SELECT zone_id FROM shared_zone_views)", nil),
                (
                    """
                    DELETE FROM databases WHERE scope = 'private' AND owner_record_name = $1
                    AND NOT EXISTS (SELECT 1 FROM zones WHERE zones.database_id = databases.id)
                    """, nil
                ),
                ("DELETE FROM users WHERE user_record_name = $1", nil),
            ] as [(String, WritableKeyPath<UserErasure, Int>?)] {
                let changed = try await run(statement + " AND $2 = $2")
                if let counted { erasure[keyPath: counted] = changed }
            }
            // Deleted rows stay in the tables' files until VACUUM reclaims their space and later writes reuse it:
            // docs/OPERATIONS.md says what an operator runs for the bytes to be gone.
            erasure.filesScrubbed = false
            return erasure
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
