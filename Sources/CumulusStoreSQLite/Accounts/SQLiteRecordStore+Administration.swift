public import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging

/// What the `cumulus` command line lists and changes.
extension SQLiteRecordStore {
    public func listContainers(logger: Logger) async throws -> [StoredContainer] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT id, created_at FROM containers ORDER BY id").map { StoredContainer(id: $0[0], createdAt: $0[1]) }
        }
    }

    public func listAPITokens(container: String, logger: Logger) async throws -> [StoredAPIToken] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT token_hash, environment, created_at, revoked FROM api_tokens WHERE container_id = ? ORDER BY created_at, token_hash",
                arguments: [container]
            ).map { row in
                guard let environment = ContainerEnvironment(rawValue: row[1]) else {
                    throw StoreError(.corrupt, "api token has an unknown environment")
                }
                return StoredAPIToken(
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

    public func listServerKeys(container: String, logger: Logger) async throws -> [StoredServerKey] {
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
                return StoredServerKey(
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

    public func deleteContainer(_ container: String, logger: Logger) async throws {
        try await write { db in
            // Views and counters of the container's users have no foreign key to cascade from; everything else goes
            // with the container's row.
            let users = "SELECT user_record_name FROM users WHERE container_id = ?"
            for statement in [
                "DELETE FROM shared_zone_views WHERE zone_id IN (SELECT z.id FROM zones z JOIN databases d ON d.id = z.database_id WHERE d.container_id = ?)",
                "DELETE FROM shared_zone_views WHERE user_record_name IN (\(users))",
                "DELETE FROM shared_databases WHERE user_record_name IN (\(users))",
                "DELETE FROM participant_changes WHERE user_record_name IN (\(users))",
                "DELETE FROM link_uploads WHERE container_id = ?",
            ] {
                try db.execute(sql: statement, arguments: [container])
            }
            try db.execute(sql: "DELETE FROM containers WHERE id = ?", arguments: [container])
            if db.changesCount == 0 { throw StoreError(.notFound, "no such container \(container)") }
        }
    }

    public func eraseUser(userRecordName: String, attemptKeyPrefixes: [String], timestamp: Int64, logger: Logger) async throws -> UserErasure {
        let planner = self.planner
        var erasure = try await write { db in
            try Self.run(
                UserScripts.erase(userRecordName: userRecordName, attemptKeyPrefixes: attemptKeyPrefixes, timestamp: timestamp, planner: planner), db)
        }
        // The deleted rows' bytes stay in free pages and in the log until overwritten: the database is rewritten
        // without them and the log emptied, so they are gone from the files.
        erasure.filesScrubbed = try await scrubFiles()
        return erasure
    }

    /// The SQL of the ``UserScripts/erase(userRecordName:attemptKeyPrefixes:timestamp:planner:)`` actions.
    static func performUserAction(_ action: StoreAction, _ db: Database) throws -> StoreAnswer {
        // Zone row IDs as a JSON array of numbers, for `json_each`.
        func ids(_ zones: [Int64]) -> String { "[" + zones.map(String.init).joined(separator: ",") + "]" }
        switch action {
        case .readUserContainer(let user):
            return .text(try String.fetchOne(db, sql: "SELECT container_id FROM users WHERE user_record_name = ?", arguments: [user]))
        case .readRecordsCreated(let zone, let user):
            return .list(
                try String.fetchAll(
                    db, sql: "SELECT record_name FROM records WHERE zone_id = ? AND created_by = ? AND deleted = 0", arguments: [zone, user]))
        case .readUserZones(let user, let container):
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT z.id, z.database_id, z.change_seq FROM zones z JOIN databases d ON d.id = z.database_id
                    WHERE d.scope = 'private' AND d.owner_record_name = ? AND d.container_id = ? AND z.deleted = 0 ORDER BY z.id
                    """, arguments: [user, container])
            return .zones(rows.map { ZoneRow(id: $0[0], databaseID: $0[1], changeSequence: $0[2]) })
        case .countZoneContents(let zones):
            let ids = ids(zones)
            let records = try Int.fetchOne(
                db, sql: "SELECT COUNT(*) FROM records WHERE deleted = 0 AND zone_id IN (SELECT value FROM json_each(?))", arguments: [ids])
            let shares = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM shares WHERE zone_id IN (SELECT value FROM json_each(?))", arguments: [ids])
            return .counts(["records": records ?? 0, "shares": shares ?? 0])
        case .deleteHistory(let zones, let createdBy):
            try db.execute(
                sql: "DELETE FROM record_history WHERE zone_id IN (SELECT value FROM json_each(?)) AND (?2 IS NULL OR created_by = ?2)",
                arguments: [ids(zones), createdBy])
            return .count(db.changesCount)
        case .readParticipations(let user):
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT s.zone_id, z.database_id, s.share_record_name FROM share_participants p JOIN shares s ON s.id = p.share_id
                    JOIN zones z ON z.id = s.zone_id
                    WHERE p.user_record_name = ? AND p.type <> 'OWNER' ORDER BY s.zone_id, s.id
                    """, arguments: [user])
            return .participations(rows.map { Participation(zone: ZoneRow(id: $0[0], databaseID: $0[1], changeSequence: 0), shareRecordName: $0[2]) })
        case .removeParticipant(let user):
            try db.execute(sql: "DELETE FROM share_participants WHERE user_record_name = ?", arguments: [user])
        case .deleteAssetReceipts(let user, let container):
            let files = try String.fetchSet(
                db,
                sql: """
                    DELETE FROM asset_uploads WHERE container_id = ?2
                    AND ((database_scope = 'private' AND owner_record_name = ?1) OR (database_scope = 'public' AND uploader = ?1))
                    RETURNING file_id
                    """, arguments: [user, container])
            let receipts = db.changesCount
            let stillNamed = try String.fetchSet(
                db, sql: "SELECT DISTINCT file_id FROM asset_uploads WHERE file_id IN (SELECT value FROM json_each(?))",
                arguments: [Array(files).jsonArray])
            return .removed(receipts, files: files.subtracting(stillNamed).sorted())
        case .anonymizeAuthor(let user, let erased):
            var records = 0
            for table in ["records", "record_history"] {
                // The device the user wrote from goes with their name (`records/lookup` showed it to the zone's owner).
                for (author, device) in [("created_by", "created_device"), ("modified_by", "modified_device")] {
                    try db.execute(
                        sql: "UPDATE \(table) SET \(author) = ?, \(device) = ? WHERE \(author) = ?",
                        arguments: [erased, UserErasure.erasureDeviceID, user])
                    if table == "records" { records += db.changesCount }
                }
            }
            try db.execute(sql: "UPDATE asset_uploads SET uploader = ? WHERE uploader = ?", arguments: [erased, user])
            return .count(records)
        case .deleteUserRows(let user, let prefixes):
            for prefix in prefixes {
                try db.execute(sql: "DELETE FROM attempt_counts WHERE substr(key, 1, length(?1)) = ?1", arguments: [prefix])
            }
            let databases = "SELECT id FROM databases WHERE scope = 'private' AND owner_record_name = ?"
            var counts: [String: Int] = [:]
            for (statement, counted) in [
                ("DELETE FROM shared_zone_views WHERE user_record_name = ?", nil),
                ("DELETE FROM shared_databases WHERE user_record_name = ?", nil),
                ("DELETE FROM participant_changes WHERE user_record_name = ?", nil),
                ("DELETE FROM subscriptions WHERE user_record_name = ?", "subscriptions"),
                ("DELETE FROM push_tokens WHERE user_record_name = ?", "pushTokens"),
                ("DELETE FROM devices WHERE user_record_name = ?", "devices"),
                ("DELETE FROM web_auth_tokens WHERE user_record_name = ?", "webAuthTokens"),
                // Zone rows other users' ended views still point at stay as tombstones; the rest go.
                ("DELETE FROM zones WHERE database_id IN (\(databases)) AND id NOT IN (SELECT zone_id FROM shared_zone_views)", nil),
                (
                    """
                    DELETE FROM databases WHERE scope = 'private' AND owner_record_name = ?
                    AND NOT EXISTS (SELECT 1 FROM zones WHERE zones.database_id = databases.id)
                    """, nil
                ),
                ("DELETE FROM users WHERE user_record_name = ?", nil),
            ] as [(String, String?)] {
                try db.execute(sql: statement, arguments: [user])
                if let counted { counts[counted] = db.changesCount }
            }
            return .counts(counts)
        default:
            throw StoreError(.unexpected, "\(action) is not a user action")
        }
        return .none
    }

    /// Rewrites the database file (`VACUUM`) and truncates the write-ahead log; answers whether the log could be
    /// truncated (a reader holding an old snapshot keeps it, and its bytes, until it ends).
    func scrubFiles() async throws -> Bool {
        try await translatingErrors("could not rewrite the database") {
            try await writer.barrierWriteWithoutTransaction { db in try db.execute(sql: "VACUUM") }
            // A request reading at that moment keeps the log; reads are short, so a few tries a tenth of a second
            // apart find a moment with none (each try holds the writer only for the checkpoint).
            for _ in 0..<50 {
                let truncated = try await writer.barrierWriteWithoutTransaction { db in
                    (try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")?[0] as Int?) == 0
                }
                if truncated { return true }
                try await Task.sleep(for: .milliseconds(100))
            }
            return false
        }
    }

    public func saveConsoleCredential(_ credential: ConsoleCredential, now: Int64, logger: Logger) async throws {
        try await write { db in
            try db.execute(sql: "DELETE FROM console_credentials WHERE expires_at <= ?", arguments: [now])
            try db.execute(
                sql: "INSERT INTO console_credentials (token_hash, container_id, kind, expires_at) VALUES (?, ?, ?, ?)",
                arguments: [Data(credential.tokenHash), credential.container, credential.kind.rawValue, credential.expiresAt])
        }
    }

    public func takeConsoleCredential(hash: [UInt8], kind: ConsoleCredential.Kind, now: Int64, logger: Logger) async throws
        -> ConsoleCredential?
    {
        try await write { db in
            try Row.fetchOne(
                db,
                sql: "DELETE FROM console_credentials WHERE token_hash = ? AND kind = ? AND expires_at > ? RETURNING container_id, expires_at",
                arguments: [Data(hash), kind.rawValue, now]
            ).map { ConsoleCredential(tokenHash: hash, container: $0[0], kind: kind, expiresAt: $0[1]) }
        }
    }

    public func consoleCredential(hash: [UInt8], now: Int64, logger: Logger) async throws -> ConsoleCredential? {
        try await read { db in
            try Row.fetchOne(
                db, sql: "SELECT container_id, kind, expires_at FROM console_credentials WHERE token_hash = ? AND expires_at > ?",
                arguments: [Data(hash), now]
            ).flatMap { row in
                ConsoleCredential.Kind(rawValue: row[1]).map { ConsoleCredential(tokenHash: hash, container: row[0], kind: $0, expiresAt: row[2]) }
            }
        }
    }

    public func listLinkSnapshots(container: String, environment: ContainerEnvironment, now: Int64, limit: Int, logger: Logger) async throws
        -> [LinkSnapshot]
    {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, kind, payload, created_at, expires_at FROM link_snapshots
                    WHERE container_id = ? AND environment = ? AND expires_at > ? ORDER BY created_at DESC, id LIMIT ?
                    """, arguments: [container, environment.rawValue, now, limit]
            ).map { row in
                let payload: Data = row[2]
                return LinkSnapshot(
                    id: row[0], container: container, environment: environment, kind: row[1], payload: Array(payload), createdAt: row[3],
                    expiresAt: row[4])
            }
        }
    }
}
