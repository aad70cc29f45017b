public import CumulusClient
public import CumulusModel
import Foundation
public import GRDB

/// A ready-made ``SyncEngineDelegate`` for GRDB apps: it sends rows of ``SyncedTable``s as records, and applies fetched
/// records, deletions, deleted zones and conflicts to the rows, each in one transaction with the sync metadata.
///
/// Conflicts resolve by the table's `modificationColumn`: the later edit wins, on every device alike, so devices
/// converge; without that column the server's version wins.
public final class GRDBSyncAdapter: SyncEngineDelegate {
    public let writer: any DatabaseWriter
    public let store: GRDBSyncStore
    public let tables: [SyncedTable]

    public init(writer: any DatabaseWriter, store: GRDBSyncStore, tables: [SyncedTable]) {
        self.writer = writer
        self.store = store
        self.tables = tables
    }

    private func table(recordType: String) -> SyncedTable? { tables.first { $0.recordType == recordType } }

    /// The server names zones with their owner; the tables may name the caller's own zones without one. Rows and
    /// metadata are keyed the way the tables name their zones.
    private func normalized(_ id: RecordID) -> RecordID {
        guard let table = tables.first(where: { $0.zoneID.zoneName == id.zoneID.zoneName }) else { return id }
        return table.recordID(id.recordName)
    }

    private func normalized(_ record: CloudRecord) -> CloudRecord {
        var copy = record
        copy.recordID = normalized(record.recordID)
        return copy
    }

    // MARK: - Sending

    public func nextRecordZoneChangeBatch(_ pending: [PendingRecordZoneChange], syncEngine: SyncEngine) async throws -> RecordZoneChangeBatch? {
        let store = self.store
        let tables = self.tables
        // Read every pending record in one read transaction.
        let records: [RecordID: CloudRecord] = try await writer.read { db in
            var records: [RecordID: CloudRecord] = [:]
            for case .saveRecord(let id) in pending {
                for table in tables where table.zoneID.zoneName == id.zoneID.zoneName {
                    if var record = try table.record(primaryKey: id.recordName, in: db) {
                        record.recordID = id
                        record.recordChangeTag = try store.changeTag(for: id, in: db)
                        records[id] = record
                        break
                    }
                }
            }
            return records
        }
        let batch = await RecordZoneChangeBatch(pendingChanges: pending) { records[$0] }
        return batch.recordsToSave.isEmpty && batch.recordIDsToDelete.isEmpty && batch.skipped.isEmpty ? nil : batch
    }

    // MARK: - Events

    public func handleEvent(_ event: SyncEngine.Event, syncEngine: SyncEngine) async throws {
        switch event {
        case .fetchedRecordZoneChanges(_, let modified, let deleted):
            try await applyFetched(modified: modified, deleted: deleted)
        case .fetchedDatabaseChanges(_, let deleted):
            for zoneID in deleted { try await dropZone(zoneID) }
        case .reconciledZone(let zoneID, let present):
            try await reconcile(zoneID, present: present)
        case .sentRecordZoneChanges(let result):
            try await applySent(result, syncEngine: syncEngine)
        default:
            break
        }
    }

    private func applyFetched(modified: [CloudRecord], deleted: [RecordID]) async throws {
        let store = self.store
        try await writer.write { db in
            for record in modified.map(self.normalized) {
                guard let table = self.table(recordType: record.recordType) else { continue }
                if try store.hasPendingSave(record.recordID, in: db), let local = try table.record(primaryKey: record.recordID.recordName, in: db),
                    Self.localWins(local, over: record, table: table)
                {
                    // A local edit newer than the server's: keep it, and send it on top of the server's tag.
                    try store.setChangeTag(record.recordChangeTag, recordType: record.recordType, for: record.recordID, in: db)
                    continue
                }
                try table.upsert(record, in: db)
                try store.setChangeTag(record.recordChangeTag, recordType: record.recordType, for: record.recordID, in: db)
            }
            for recordID in deleted.map(self.normalized) {
                for table in self.tables where table.zoneID.zoneName == recordID.zoneID.zoneName {
                    try table.delete(primaryKey: recordID.recordName, in: db)
                }
                try store.forget(recordID, in: db)
            }
        }
    }

    /// A zone was deleted on the server, or a share was lost: all its rows go, as CloudKit's guidance for a deleted zone
    /// says, with their pending changes.
    private func dropZone(_ zoneID: ZoneID) async throws {
        let store = self.store
        let normalizedZone = normalized(RecordID(recordName: "", zoneID: zoneID)).zoneID
        try await writer.write { db in
            for table in self.tables
            where table.zoneID.zoneName == normalizedZone.zoneName && table.zoneID.ownerRecordName == normalizedZone.ownerRecordName {
                try db.execute(sql: "DELETE FROM \"\(table.tableName)\"")
            }
            try store.forgetZone(normalizedZone, in: db)
        }
    }

    /// After a full re-fetch: rows the server no longer has go, unless they wait to be sent.
    private func reconcile(_ zoneID: ZoneID, present: Set<String>) async throws {
        let store = self.store
        try await writer.write { db in
            for table in self.tables where table.zoneID.zoneName == zoneID.zoneName {
                for key in try table.primaryKeys(in: db) where !present.contains(key) {
                    let id = table.recordID(key)
                    if try store.hasPendingSave(id, in: db) { continue }
                    try table.delete(primaryKey: key, in: db)
                    try store.forget(id, in: db)
                }
            }
        }
    }

    private func applySent(_ result: ModifyRecordsResult, syncEngine: SyncEngine) async throws {
        let store = self.store
        let recreateZones: [ZoneID] = try await writer.write { db in
            var resend: [PendingRecordZoneChange] = []
            var recreateZones: [ZoneID] = []
            for record in result.saved.map(self.normalized) {
                try store.setChangeTag(record.recordChangeTag, recordType: record.recordType, for: record.recordID, in: db)
            }
            for recordID in result.deleted.map(self.normalized) { try store.forget(recordID, in: db) }
            for failure in result.failedSaves {
                let id = self.normalized(failure.record.recordID)
                switch failure.error.code {
                case .server(.conflict), .server(.exists):
                    guard let server = failure.error.serverRecord.map(self.normalized), let table = self.table(recordType: failure.record.recordType)
                    else {
                        continue
                    }
                    if Self.localWins(failure.record, over: server, table: table) {
                        try store.setChangeTag(server.recordChangeTag, recordType: server.recordType, for: id, in: db)
                        resend.append(.saveRecord(id))
                    } else {
                        try table.upsert(server, in: db)
                        try store.setChangeTag(server.recordChangeTag, recordType: server.recordType, for: id, in: db)
                    }
                case .server(.zoneNotFound):
                    recreateZones.append(id.zoneID)
                    try store.setChangeTag(nil, recordType: failure.record.recordType, for: id, in: db)
                    resend.append(.saveRecord(id))
                case .server(.notFound):
                    try store.setChangeTag(nil, recordType: failure.record.recordType, for: id, in: db)
                    resend.append(.saveRecord(id))
                default:
                    continue
                }
            }
            try store.enqueue(resend, in: db)
            return recreateZones
        }
        if !recreateZones.isEmpty { try await syncEngine.add(pendingDatabaseChanges: Set(recreateZones).map { .saveZone($0) }) }
    }

    /// Whether a local version beats the server's: the later `modificationColumn` wins; without it the server does.
    static func localWins(_ local: CloudRecord, over server: CloudRecord, table: SyncedTable) -> Bool {
        guard let column = table.modificationColumn else { return false }
        guard case .int64(let localTime)? = local.fields[column] else { return false }
        guard case .int64(let serverTime)? = server.fields[column] else { return true }
        return localTime > serverTime
    }
}
