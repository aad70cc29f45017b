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
    /// Settles a field both this device and the server changed since the device last saw the record; `nil` uses the
    /// default: the later `modificationColumn` wins, and without that column the server's value does.
    public let merge: MergeHook?
    /// Tells the app what it could not do quietly: a refused change, a local value discarded in a merge.
    public let onReport: (@Sendable (Report) -> Void)?
    /// Whether a sign-out or a switch of account deletes every row of the synced tables (the previous user's data),
    /// as CloudKit's guidance asks. Off, the app handles ``SyncEngine/Event/accountChange(_:)`` itself.
    public let deletesRowsOnAccountChange: Bool

    /// Settles one field both sides changed: the table, the record, the field, the local and the server value.
    public typealias MergeHook = @Sendable (SyncedTable, RecordID, String, FieldValue?, FieldValue?) -> RecordMerge.Side

    /// What the adapter reports to the app.
    public enum Report: Sendable, Hashable {
        /// The server refused a change for good. With `rolledBack`, the row shows the server's version again (a
        /// read-only participant's edit, say) and nothing waits; otherwise the change waits, counted in the engine's
        /// status, until the row is edited again or the app discards it.
        case refused(recordID: RecordID, error: CloudError, rolledBack: Bool)
        /// A merge kept the server's value of these fields over this device's own edit.
        case discardedLocalValues(recordID: RecordID, fields: Set<String>)
        /// A fetched record that no table holds (none has its record type for its zone and owner): it was not
        /// written anywhere. Share records (`cloudkit.share`) are never rows and never reported.
        case unplaced(recordID: RecordID, recordType: String)
        /// The server deleted a record (another device, a restore, the zone's owner) while this device had an edit of
        /// it waiting to be sent: the edit wins, and the record is sent again as a new one. The same whether the device
        /// fetched the deletion first or sent the edit first. An app may show it, or delete the row to let the
        /// deletion stand.
        case recreatedDeletedRecord(recordID: RecordID)
    }

    public init(
        writer: any DatabaseWriter, store: GRDBSyncStore, tables: [SyncedTable], merge: MergeHook? = nil,
        onReport: (@Sendable (Report) -> Void)? = nil, deletesRowsOnAccountChange: Bool = true
    ) throws {
        // A model CloudKit sync cannot keep is an error now, listing every problem, not quietly lost edits later.
        try writer.read { db in try ModelLinter.validate(tables, in: db) }
        self.writer = writer
        self.store = store
        self.tables = tables
        self.merge = merge
        self.onReport = onReport
        self.deletesRowsOnAccountChange = deletesRowsOnAccountChange
    }

    /// The table that holds a record: its record type, for its zone and owner. Fetching, merging and sending all pick
    /// tables by this one rule, so two tables of one record type for two owners' same-named zones stay apart.
    private func table(for recordType: String, in zone: ZoneID) -> SyncedTable? {
        tables.first { $0.recordType == recordType && $0.holds(zone) }
    }

    /// The server names zones with their owner; a table may name the caller's own zone without one. Rows and metadata
    /// are keyed the way the tables name their zones. In the shared database a table that keeps an owner column keeps
    /// each record's owner; in the private database every record is the user's own, and its row's owner stays empty, so
    /// a table can hold the user's rows and shared rows side by side.
    private func normalized(_ id: RecordID, shared: Bool) -> RecordID {
        guard let table = tables.first(where: { $0.holds(id.zoneID) }) else { return id }
        return shared ? table.recordID(id.recordName, owner: id.zoneID.ownerRecordName) : table.recordID(id.recordName)
    }

    /// A zone as the tables and metadata name it.
    func normalizedZone(_ zoneID: ZoneID, shared: Bool) -> ZoneID {
        normalized(RecordID(recordName: "", zoneID: zoneID), shared: shared).zoneID
    }

    private func normalized(_ record: CloudRecord, shared: Bool) -> CloudRecord {
        var copy = record
        copy.recordID = normalized(record.recordID, shared: shared)
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
                for table in tables where table.holds(id.zoneID) {
                    if var record = try table.record(id, ancestor: try store.lastServerFields(for: id, in: db), in: db) {
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
        let shared = syncEngine.configuration.database.scope == .shared
        switch event {
        case .accountChange(.signOut), .accountChange(.switchAccounts):
            if deletesRowsOnAccountChange { try await deleteAllRows() }
        case .fetchedRecordZoneChanges(_, let modified, let deleted):
            try await applyFetched(modified: modified, deleted: deleted, shared: shared)
        case .fetchedDatabaseChanges(_, let deleted):
            for zoneID in deleted { try await dropZone(zoneID, shared: shared) }
        case .reconciledZone(let zoneID, let present):
            try await reconcile(zoneID, present: present, shared: shared)
        case .sentRecordZoneChanges(let result):
            try await applySent(result, syncEngine: syncEngine)
        case .failedToSaveRecord(let recordID, let error):
            try await applyRefusal(recordID, error: error, deletion: false, syncEngine: syncEngine)
        case .failedToDeleteRecord(let recordID, let error):
            try await applyRefusal(recordID, error: error, deletion: true, syncEngine: syncEngine)
        default:
            break
        }
    }

    private func applyFetched(modified: [CloudRecord], deleted: [RecordID], shared: Bool) async throws {
        let store = self.store
        let reports: [Report] = try await writer.write { db in
            var reports: [Report] = []
            // Normalized in place: a copy of each record (a dozen references) cost a first sync more than the names.
            var records = modified
            for index in records.indices {
                records[index].recordID = self.normalized(records[index].recordID, shared: shared)
            }
            // One statement for the page: most fetched records have no local edit waiting.
            let pendingSaves = try store.pendingSaves(among: records.map(\.recordID), in: db)
            // The common page (a first sync, or edits from other devices): no local edit waiting, every record of one
            // type in one zone, so of one table. It is written as it came, without sorting records into groups.
            if pendingSaves.isEmpty, let first = records.first,
                let table = self.table(for: first.recordType, in: first.recordID.zoneID),
                records.allSatisfy({ $0.recordType == first.recordType && $0.recordID.zoneID == first.recordID.zoneID })
            {
                try table.upsert(records, in: db)
                try store.setServerRecords(records, in: db)
                records = []
            }
            // Rows without a local edit are written in bulk, per table; the others are merged one by one.
            var plain: [String: [CloudRecord]] = [:]
            var stored: [CloudRecord] = []
            stored.reserveCapacity(records.count)
            for record in records {
                guard let table = self.table(for: record.recordType, in: record.recordID.zoneID) else {
                    // Share records are the engine's to read, not rows. Their version is kept, so a verification
                    // counts them as held.
                    if record.recordType != ShareRecord.recordType {
                        reports.append(.unplaced(recordID: record.recordID, recordType: record.recordType))
                    }
                    stored.append(record)
                    continue
                }
                if pendingSaves.contains(record.recordID),
                    let local = try table.record(record.recordID, ancestor: try store.lastServerFields(for: record.recordID, in: db), in: db)
                {
                    // A local edit not sent yet meets a newer server version: merge them, and send the merge if it differs.
                    reports += try self.settle(local: local, server: record, table: table, existsConflict: false, in: db)
                    continue
                }
                plain[table.tableName, default: []].append(record)
                stored.append(record)
            }
            for table in self.tables {
                if let rows = plain[table.tableName] { try table.upsert(rows, in: db) }
            }
            if !stored.isEmpty { try store.setServerRecords(stored, in: db) }
            for recordID in deleted.map({ self.normalized($0, shared: shared) }) {
                // An edit not sent yet outlives a deletion from elsewhere, as it does when it is sent first and meets
                // NOT_FOUND: the row stays, and goes as a new record.
                if try store.hasPendingSave(recordID, in: db),
                    let table = try self.tables.first(where: { table in
                        guard table.holds(recordID.zoneID) else { return false }
                        return try table.record(recordID, in: db) != nil
                    })
                {
                    try store.setChangeTag(nil, recordType: table.recordType, for: recordID, in: db)
                    reports.append(.recreatedDeletedRecord(recordID: recordID))
                    continue
                }
                for table in self.tables where table.holds(recordID.zoneID) { try table.delete(recordID, in: db) }
                try store.forget(recordID, in: db)
            }
            return reports
        }
        for report in reports { onReport?(report) }
    }

    /// Merges a local version with the server's, writes the merge into the row and the server's version into the
    /// metadata, and enqueues the merge when it differs from the server's. Runs in the caller's transaction.
    private func settle(local: CloudRecord, server: CloudRecord, table: SyncedTable, existsConflict: Bool, in db: Database) throws -> [Report] {
        let id = local.recordID
        let names = Set(table.allColumns.map(\.field))
        let ancestor = try store.lastServerFields(for: id, in: db)
        let outcome = RecordMerge.merge(ancestorHolds: ancestor?.holds, local: local.fields, server: server.fields, names: names) {
            field, mine, theirs in
            if let merge { return merge(table, id, field, mine, theirs) }
            return Self.defaultSide(local: local, server: server, table: table, existsConflict: existsConflict)
        }
        var merged = server
        merged.recordID = id
        merged.fields = server.fields.filter { !names.contains($0.key) }.merging(outcome.fields) { _, new in new }
        merged.parent = local.parent
        // A local file that won the merge stays in its row (and is uploaded when the merge is sent).
        for (field, file) in local.assetFiles where merged.fields[field] == local.fields[field] { merged.downloadedAssets[field] = file }
        try table.upsert(merged, in: db)
        try store.setServerRecord(server, for: id, in: db)
        if outcome.differsFromServer || local.parent != server.parent {
            try store.enqueue([.saveRecord(id)], in: db)
        } else {
            // The merge is the server's version: nothing is left to send, a refused entry included.
            try store.clearPending(id, in: db)
        }
        // The modification time is bookkeeping, not a value the user chose.
        let discarded = outcome.discardedLocalFields.subtracting(table.modificationColumn.map { [$0] } ?? [])
        return discarded.isEmpty ? [] : [.discardedLocalValues(recordID: id, fields: discarded)]
    }

    /// A zone was deleted on the server, or a share was lost: all its rows go, as CloudKit's guidance for a deleted zone
    /// says, with their pending changes.
    private func dropZone(_ zoneID: ZoneID, shared: Bool) async throws {
        let store = self.store
        let zone = normalizedZone(zoneID, shared: shared)
        try await writer.write { db in
            for table in self.tables where table.holds(zone) { try table.deleteRows(of: zone, in: db) }
            try store.forgetZone(zone, in: db)
        }
    }

    /// The previous user's rows go, all of them, with their metadata; the engine already forgot tokens and pending
    /// changes.
    private func deleteAllRows() async throws {
        let store = self.store
        try await writer.write { db in
            for table in self.tables { try db.execute(sql: "DELETE FROM \(SyncedTable.quoted(table.tableName))") }
            try store.forgetAllRecords(in: db)
        }
    }

    /// After a full re-fetch: rows the server no longer has go, unless they wait to be sent.
    private func reconcile(_ zoneID: ZoneID, present: Set<String>, shared: Bool) async throws {
        let store = self.store
        let zone = normalized(RecordID(recordName: "", zoneID: zoneID), shared: shared).zoneID
        try await writer.write { db in
            for table in self.tables where table.holds(zone) {
                for id in try table.recordIDs(of: zone, in: db) where !present.contains(id.recordName) {
                    if try store.hasPendingSave(id, in: db) { continue }
                    try table.delete(id, in: db)
                    try store.forget(id, in: db)
                }
            }
            // Versions kept without a row (share records, unmapped types) go too.
            let pending = try store.pendingNames(of: zone, in: db)
            for name in try store.metadata(of: zone, in: db).keys where !present.contains(name) && !pending.contains(name) {
                try store.forget(RecordID(recordName: name, zoneID: zone), in: db)
            }
        }
    }

    private func applySent(_ result: ModifyRecordsResult, syncEngine: SyncEngine) async throws {
        let store = self.store
        let shared = syncEngine.configuration.database.scope == .shared
        let (recreateZones, reports): ([ZoneID], [Report]) = try await writer.write { db in
            var resend: [PendingRecordZoneChange] = []
            var recreateZones: [ZoneID] = []
            var reports: [Report] = []
            for record in result.saved.map({ self.normalized($0, shared: shared) }) {
                try store.setServerRecord(record, for: record.recordID, in: db)
            }
            for recordID in result.deleted.map({ self.normalized($0, shared: shared) }) { try store.forget(recordID, in: db) }
            for failure in result.failedSaves {
                let id = self.normalized(failure.record.recordID, shared: shared)
                switch failure.error.code {
                case .server(.conflict), .server(.exists):
                    guard let server = failure.error.serverRecord.map({ self.normalized($0, shared: shared) }),
                        let table = self.table(for: failure.record.recordType, in: id.zoneID)
                    else {
                        continue
                    }
                    // Merge with the row as it is now (it may have changed while the batch was in flight).
                    let local = try table.record(id, ancestor: try store.lastServerFields(for: id, in: db), in: db) ?? failure.record
                    reports += try self.settle(
                        local: local, server: server, table: table, existsConflict: failure.error.code == .server(.exists), in: db)
                case .server(.zoneNotFound) where shared:
                    // Someone else's zone: the share is gone, and the next fetch drops its rows.
                    continue
                case .server(.zoneNotFound):
                    recreateZones.append(id.zoneID)
                    try store.setChangeTag(nil, recordType: failure.record.recordType, for: id, in: db)
                    resend.append(.saveRecord(id))
                case .server(.notFound):
                    // Deleted on the server while this edit waited: it goes again as a new record (``Report/recreatedDeletedRecord(recordID:)``).
                    try store.setChangeTag(nil, recordType: failure.record.recordType, for: id, in: db)
                    resend.append(.saveRecord(id))
                    reports.append(.recreatedDeletedRecord(recordID: id))
                default:
                    continue
                }
            }
            try store.enqueue(resend, in: db)
            return (recreateZones, reports)
        }
        for report in reports { onReport?(report) }
        if !recreateZones.isEmpty { try await syncEngine.add(pendingDatabaseChanges: Set(recreateZones).map { .saveZone($0) }) }
    }

    /// A change the server refused for good and nothing above resolved. A refusal of permission (a read-only
    /// participant, a record outside the shares) rolls the row back to the server's version; anything else waits,
    /// visible, for the app.
    private func applyRefusal(_ recordID: RecordID, error: CloudError, deletion: Bool, syncEngine: SyncEngine) async throws {
        let shared = syncEngine.configuration.database.scope == .shared
        let id = normalized(recordID, shared: shared)
        guard error.code == .server(.accessDenied) else {
            onReport?(.refused(recordID: id, error: error, rolledBack: false))
            return
        }
        let server = try await syncEngine.configuration.database.records(named: [recordID.recordName], in: recordID.zoneID)[recordID.recordName]
        let store = self.store
        try await writer.write { db in
            if let server = server.map({ self.normalized($0, shared: shared) }),
                let table = self.table(for: server.recordType, in: server.recordID.zoneID)
            {
                try table.upsert(server, in: db)
                try store.setServerRecord(server, for: id, in: db)
            } else if !deletion {
                for table in self.tables where table.holds(id.zoneID) { try table.delete(id, in: db) }
                try store.forget(id, in: db)
            }
        }
        try await syncEngine.discardFailedChanges([recordID])
        onReport?(.refused(recordID: id, error: error, rolledBack: true))
    }

    /// Who wins a field both sides changed when no hook decides: the later `modificationColumn`; without it, the
    /// server, except for an `EXISTS` answer, where the device believed it was creating the record and its edit is the
    /// user's latest intention.
    static func defaultSide(local: CloudRecord, server: CloudRecord, table: SyncedTable, existsConflict: Bool) -> RecordMerge.Side {
        guard let column = table.modificationColumn, case .int64(let localTime)? = local.fields[column] else {
            return existsConflict ? .local : .server
        }
        guard case .int64(let serverTime)? = server.fields[column] else { return .local }
        return localTime > serverTime ? .local : .server
    }

}
