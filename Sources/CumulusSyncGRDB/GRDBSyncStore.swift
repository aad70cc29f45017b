public import CumulusClient
public import CumulusModel
import Foundation
public import GRDB

/// A ``SyncStateStore`` in the app's own SQLite database (GRDB): change tokens, pending changes, and each synced
/// row's last known change tag.
///
/// Because it lives in the app's database, an app enqueues the pending change in the same transaction as the edit:
///
/// ```swift
/// try await dbQueue.write { db in
///     try drive.save(db)
///     try syncStore.enqueue([.saveRecord(drive.recordID)], in: db)
/// }
/// ```
///
/// A crash can then never separate an edit from its pending change (CKSyncEngine coalesces state updates for about
/// 100 ms, and loses pending changes in that window).
public final class GRDBSyncStore: SyncStateStore {
    public let writer: any DatabaseWriter
    /// Separates engines sharing a database file (one per database scope).
    public let scope: String

    /// Opens the store in a database, creating its tables.
    public init(writer: any DatabaseWriter, scope: String) throws {
        self.writer = writer
        self.scope = scope
        var migrator = DatabaseMigrator()
        migrator.registerMigration("cumulus sync v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE IF NOT EXISTS cumulus_sync_tokens (
                        scope TEXT NOT NULL, key TEXT NOT NULL, token TEXT NOT NULL, PRIMARY KEY (scope, key)
                    );
                    CREATE TABLE IF NOT EXISTS cumulus_sync_pending (
                        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                        scope TEXT NOT NULL,
                        kind TEXT NOT NULL CHECK (kind IN ('save', 'delete', 'saveZone', 'deleteZone')),
                        zone_name TEXT NOT NULL, owner TEXT NOT NULL, record_name TEXT NOT NULL
                    );
                    CREATE INDEX IF NOT EXISTS cumulus_sync_pending_record ON cumulus_sync_pending(scope, zone_name, owner, record_name);
                    CREATE TABLE IF NOT EXISTS cumulus_sync_metadata (
                        scope TEXT NOT NULL, zone_name TEXT NOT NULL, owner TEXT NOT NULL, record_name TEXT NOT NULL,
                        record_type TEXT NOT NULL, change_tag TEXT,
                        PRIMARY KEY (scope, zone_name, owner, record_name)
                    );
                    """
            )
        }
        migrator.registerMigration("cumulus sync v2: refused changes and last server fields") { db in
            try db.execute(
                sql: """
                    ALTER TABLE cumulus_sync_pending ADD COLUMN failure_code TEXT;
                    ALTER TABLE cumulus_sync_pending ADD COLUMN failure_reason TEXT;
                    ALTER TABLE cumulus_sync_metadata ADD COLUMN server_fields BLOB;
                    """
            )
        }
        try migrator.migrate(writer)
    }

    static func owner(_ zoneID: ZoneID) -> String { zoneID.ownerRecordName ?? "" }

    // MARK: - In the app's transaction

    /// Enqueues record changes inside the caller's transaction. A later change to a record replaces an earlier one.
    public func enqueue(_ changes: [PendingRecordZoneChange], in db: Database) throws {
        for change in changes {
            let id = change.recordID
            try db.execute(
                sql:
                    "DELETE FROM cumulus_sync_pending WHERE scope = ? AND zone_name = ? AND owner = ? AND record_name = ? AND kind IN ('save', 'delete')",
                arguments: [scope, id.zoneID.zoneName, Self.owner(id.zoneID), id.recordName]
            )
            let kind: String
            switch change {
            case .saveRecord: kind = "save"
            case .deleteRecord: kind = "delete"
            }
            try db.execute(
                sql: "INSERT INTO cumulus_sync_pending (scope, kind, zone_name, owner, record_name) VALUES (?, ?, ?, ?, ?)",
                arguments: [scope, kind, id.zoneID.zoneName, Self.owner(id.zoneID), id.recordName]
            )
        }
    }

    /// The change tag the server last gave a record, for conflict detection.
    public func changeTag(for recordID: RecordID, in db: Database) throws -> String? {
        try String.fetchOne(
            db, sql: "SELECT change_tag FROM cumulus_sync_metadata WHERE scope = ? AND zone_name = ? AND owner = ? AND record_name = ?",
            arguments: [scope, recordID.zoneID.zoneName, Self.owner(recordID.zoneID), recordID.recordName]
        )
    }

    /// Remembers a record's system fields after a save or fetch.
    public func setChangeTag(_ tag: String?, recordType: String, for recordID: RecordID, in db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO cumulus_sync_metadata (scope, zone_name, owner, record_name, record_type, change_tag) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (scope, zone_name, owner, record_name) DO UPDATE SET change_tag = excluded.change_tag, record_type = excluded.record_type
                """
        ).execute(arguments: [scope, recordID.zoneID.zoneName, Self.owner(recordID.zoneID), recordID.recordName, recordType, tag])
    }

    /// Remembers the server's version of a record (its change tag and fields) after a save or fetch: the fields are the
    /// common ancestor when a later local edit meets a newer server version.
    public func setServerRecord(_ record: CloudRecord, for recordID: RecordID, in db: Database) throws {
        var keyed = record
        keyed.recordID = recordID
        try setServerRecords([keyed], in: db)
    }

    /// ``setServerRecord(_:for:in:)`` for a page of records, each kept under its own record ID: one multi-row statement.
    public func setServerRecords(_ records: [CloudRecord], in db: Database) throws {
        let rowsPerStatement = 32_000 / 7
        var start = 0
        while start < records.count {
            let chunk = records[start..<min(start + rowsPerStatement, records.count)]
            start += chunk.count
            var values: [DatabaseValue] = []
            values.reserveCapacity(chunk.count * 7)
            for record in chunk {
                let id = record.recordID
                values += [
                    scope.databaseValue, id.zoneID.zoneName.databaseValue, Self.owner(id.zoneID).databaseValue, id.recordName.databaseValue,
                    record.recordType.databaseValue, record.recordChangeTag.databaseValue,
                    Data(ServerFieldsCoding.encode(record.fields)).databaseValue,
                ]
            }
            try db.cachedStatement(
                sql: """
                    INSERT INTO cumulus_sync_metadata (scope, zone_name, owner, record_name, record_type, change_tag, server_fields)
                    VALUES \(Array(repeating: "(?, ?, ?, ?, ?, ?, ?)", count: chunk.count).joined(separator: ", "))
                    ON CONFLICT (scope, zone_name, owner, record_name) DO UPDATE SET change_tag = excluded.change_tag,
                        record_type = excluded.record_type, server_fields = excluded.server_fields
                    """
            ).execute(arguments: StatementArguments(values))
        }
    }

    /// The fields of the server's version this device last saw, if any: the ancestor of a merge.
    public func lastServerFields(for recordID: RecordID, in db: Database) throws -> ServerFields? {
        guard
            let data = try Data.fetchOne(
                db.cachedStatement(
                    sql: "SELECT server_fields FROM cumulus_sync_metadata WHERE scope = ? AND zone_name = ? AND owner = ? AND record_name = ?"),
                arguments: [scope, recordID.zoneID.zoneName, Self.owner(recordID.zoneID), recordID.recordName])
        else { return nil }
        return ServerFieldsCoding.decode(Array(data))
    }

    /// Forgets a record's system fields (it was deleted).
    public func forget(_ recordID: RecordID, in db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM cumulus_sync_metadata WHERE scope = ? AND zone_name = ? AND owner = ? AND record_name = ?")
            .execute(arguments: [scope, recordID.zoneID.zoneName, Self.owner(recordID.zoneID), recordID.recordName])
    }

    /// Drops a record's pending save or deletion (it is settled otherwise), inside the caller's transaction.
    public func clearPending(_ recordID: RecordID, in db: Database) throws {
        try db.execute(
            sql:
                "DELETE FROM cumulus_sync_pending WHERE scope = ? AND zone_name = ? AND owner = ? AND record_name = ? AND kind IN ('save', 'delete')",
            arguments: [scope, recordID.zoneID.zoneName, Self.owner(recordID.zoneID), recordID.recordName]
        )
    }

    /// Whether a record has a pending save.
    public func hasPendingSave(_ recordID: RecordID, in db: Database) throws -> Bool {
        try Bool.fetchOne(
            db.cachedStatement(
                sql:
                    "SELECT EXISTS (SELECT 1 FROM cumulus_sync_pending WHERE scope = ? AND zone_name = ? AND owner = ? AND record_name = ? AND kind = 'save')"
            ),
            arguments: [scope, recordID.zoneID.zoneName, Self.owner(recordID.zoneID), recordID.recordName]
        ) ?? false
    }

    /// Which of these records have a pending save: one statement for a page of fetched records.
    public func pendingSaves(among recordIDs: [RecordID], in db: Database) throws -> Set<RecordID> {
        guard !recordIDs.isEmpty else { return [] }
        var names = JSONWriter()
        names.beginArray()
        for name in Set(recordIDs.map(\.recordName)) { names.string(name) }
        names.endArray()
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT zone_name, owner, record_name FROM cumulus_sync_pending
                    WHERE scope = ? AND kind = 'save' AND record_name IN (SELECT value FROM json_each(?))
                    """),
            arguments: [scope, String(decoding: names.bytes, as: UTF8.self)]
        )
        let candidates = Set(recordIDs)
        var found = Set<RecordID>()
        for row in rows {
            let owner: String = row[1]
            let id = RecordID(recordName: row[2], zoneID: ZoneID(zoneName: row[0], ownerRecordName: owner.isEmpty ? nil : owner))
            if candidates.contains(id) { found.insert(id) }
        }
        return found
    }

    /// Forgets everything of a zone (it was deleted, or a share was lost).
    public func forgetZone(_ zoneID: ZoneID, in db: Database) throws {
        let arguments: StatementArguments = [scope, zoneID.zoneName, Self.owner(zoneID)]
        try db.execute(sql: "DELETE FROM cumulus_sync_metadata WHERE scope = ? AND zone_name = ? AND owner = ?", arguments: arguments)
        try db.execute(sql: "DELETE FROM cumulus_sync_pending WHERE scope = ? AND zone_name = ? AND owner = ?", arguments: arguments)
    }

    // MARK: - SyncStateStore

    public func pendingRecordZoneChanges() async throws -> [PendingEntry<PendingRecordZoneChange>] {
        let scope = self.scope
        return try await writer.read { db in
            try Row.fetchAll(
                db,
                sql:
                    """
                    SELECT sequence, kind, zone_name, owner, record_name, failure_code, failure_reason FROM cumulus_sync_pending
                    WHERE scope = ? AND kind IN ('save', 'delete') ORDER BY sequence
                    """,
                arguments: [scope]
            ).map { row in
                let owner: String = row[3]
                let id = RecordID(recordName: row[4], zoneID: ZoneID(zoneName: row[2], ownerRecordName: owner.isEmpty ? nil : owner))
                let failure = (row[5] as String?).flatMap(ServerErrorCode.init(rawValue:)).map { SyncFailure(code: $0, reason: row[6] ?? "") }
                return PendingEntry(sequence: row[0], change: (row[1] as String) == "save" ? .saveRecord(id) : .deleteRecord(id), failure: failure)
            }
        }
    }

    public func pendingDatabaseChanges() async throws -> [PendingEntry<PendingDatabaseChange>] {
        let scope = self.scope
        return try await writer.read { db in
            try Row.fetchAll(
                db,
                sql:
                    "SELECT sequence, kind, zone_name, owner FROM cumulus_sync_pending WHERE scope = ? AND kind IN ('saveZone', 'deleteZone') ORDER BY sequence",
                arguments: [scope]
            ).map { row in
                let owner: String = row[3]
                let zoneID = ZoneID(zoneName: row[2], ownerRecordName: owner.isEmpty ? nil : owner)
                return PendingEntry(sequence: row[0], change: (row[1] as String) == "saveZone" ? .saveZone(zoneID) : .deleteZone(zoneID))
            }
        }
    }

    public func add(_ changes: [PendingRecordZoneChange]) async throws {
        try await writer.write { db in try self.enqueue(changes, in: db) }
    }

    public func add(_ changes: [PendingDatabaseChange]) async throws {
        let scope = self.scope
        try await writer.write { db in
            for change in changes {
                let (kind, zoneID): (String, ZoneID) =
                    switch change {
                    case .saveZone(let zoneID): ("saveZone", zoneID)
                    case .deleteZone(let zoneID): ("deleteZone", zoneID)
                    }
                try db.execute(
                    sql: "DELETE FROM cumulus_sync_pending WHERE scope = ? AND zone_name = ? AND owner = ? AND kind IN ('saveZone', 'deleteZone')",
                    arguments: [scope, zoneID.zoneName, Self.owner(zoneID)]
                )
                try db.execute(
                    sql: "INSERT INTO cumulus_sync_pending (scope, kind, zone_name, owner, record_name) VALUES (?, ?, ?, ?, '')",
                    arguments: [scope, kind, zoneID.zoneName, Self.owner(zoneID)]
                )
            }
        }
    }

    public func removeRecordZoneChanges(_ entries: [PendingEntry<PendingRecordZoneChange>]) async throws {
        try await remove(entries.map(\.sequence))
    }

    public func markFailed(_ failures: [(entry: PendingEntry<PendingRecordZoneChange>, failure: SyncFailure)]) async throws {
        guard !failures.isEmpty else { return }
        try await writer.write { db in
            for (entry, failure) in failures {
                try db.cachedStatement(sql: "UPDATE cumulus_sync_pending SET failure_code = ?, failure_reason = ? WHERE sequence = ?")
                    .execute(arguments: [failure.code.rawValue, failure.reason, entry.sequence])
            }
        }
    }

    public func removeDatabaseChanges(_ entries: [PendingEntry<PendingDatabaseChange>]) async throws {
        try await remove(entries.map(\.sequence))
    }

    /// Removes exactly the entries a send covered: a change enqueued meanwhile has a higher sequence and stays.
    private func remove(_ sequences: [Int64]) async throws {
        guard !sequences.isEmpty else { return }
        let list = "[" + sequences.map(String.init).joined(separator: ",") + "]"
        try await writer.write { db in
            try db.execute(sql: "DELETE FROM cumulus_sync_pending WHERE sequence IN (SELECT value FROM json_each(?))", arguments: [list])
        }
    }

    public func databaseToken() async throws -> String? { try await token("database") }
    public func setDatabaseToken(_ token: String?) async throws { try await setToken(token, key: "database") }
    public func zoneToken(for zoneID: ZoneID) async throws -> String? { try await token("zone:\(zoneID)") }
    public func setZoneToken(_ token: String?, for zoneID: ZoneID) async throws { try await setToken(token, key: "zone:\(zoneID)") }

    public func accountUserRecordName() async throws -> String? { try await token("account") }
    public func setAccountUserRecordName(_ userRecordName: String?) async throws { try await setToken(userRecordName, key: "account") }

    public func reset() async throws {
        let scope = self.scope
        try await writer.write { db in
            for table in ["cumulus_sync_tokens", "cumulus_sync_pending", "cumulus_sync_metadata"] {
                try db.execute(sql: "DELETE FROM \(table) WHERE scope = ?", arguments: [scope])
            }
        }
    }

    /// Forgets every per-record state of this scope inside the caller's transaction (the rows are gone).
    func forgetAllRecords(in db: Database) throws {
        try db.execute(sql: "DELETE FROM cumulus_sync_metadata WHERE scope = ?", arguments: [scope])
    }

    private func token(_ key: String) async throws -> String? {
        let scope = self.scope
        return try await writer.read { db in
            try String.fetchOne(db, sql: "SELECT token FROM cumulus_sync_tokens WHERE scope = ? AND key = ?", arguments: [scope, key])
        }
    }

    private func setToken(_ token: String?, key: String) async throws {
        let scope = self.scope
        try await writer.write { db in
            if let token {
                try db.execute(
                    sql:
                        "INSERT INTO cumulus_sync_tokens (scope, key, token) VALUES (?, ?, ?) ON CONFLICT (scope, key) DO UPDATE SET token = excluded.token",
                    arguments: [scope, key, token]
                )
            } else {
                try db.execute(sql: "DELETE FROM cumulus_sync_tokens WHERE scope = ? AND key = ?", arguments: [scope, key])
            }
        }
    }
}
