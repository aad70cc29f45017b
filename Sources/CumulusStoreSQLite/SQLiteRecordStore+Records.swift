import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging

extension SQLiteRecordStore {
    /// The record columns, in the order ``storedRecord(_:zoneID:offset:)`` reads them.
    static let recordColumns = """
        record_name, record_type, change_seq, fields, parent_name, share_name, short_guid,
        created_at, created_by, created_device, modified_at, modified_by, modified_device
        """

    /// Decodes a row selected with ``recordColumns`` starting at column `offset`. Positional access: GRDB's lookup by
    /// name is a case-insensitive search per access, which shows on feeds of tens of thousands of rows.
    static func storedRecord(_ row: Row, zoneID: ZoneID, offset: Int = 0) -> StoredRecord {
        let sequence: Int64 = row[offset + 2]
        let fields: Data = row[offset + 3]
        let shareName: String? = row[offset + 5]
        return StoredRecord(
            header: RecordHeader(
                recordName: row[offset], recordType: row[offset + 1], recordChangeTag: ChangeTag.make(sequence),
                created: RecordStamp(timestamp: row[offset + 7], userRecordName: row[offset + 8], deviceID: row[offset + 9]),
                modified: RecordStamp(timestamp: row[offset + 10], userRecordName: row[offset + 11], deviceID: row[offset + 12]),
                parent: row[offset + 4],
                share: shareName.map { Reference(recordName: $0, zoneID: zoneID) },
                zoneID: zoneID, shortGUID: row[offset + 6]
            ),
            fieldsJSON: Array(fields),
            changeSequence: sequence
        )
    }

    /// Live records of a zone by name, one statement.
    static func liveRecords(_ db: Database, zoneRowID: Int64, zoneID: ZoneID, names: [String]) throws -> [String: StoredRecord] {
        // One name, the single write's case, without making and parsing a JSON array of it.
        let statement = try db.cachedStatement(
            sql: names.count == 1
                ? "SELECT \(recordColumns) FROM records WHERE zone_id = ? AND deleted = 0 AND record_name = ?"
                : "SELECT \(recordColumns) FROM records WHERE zone_id = ? AND deleted = 0 AND record_name IN (SELECT value FROM json_each(?))"
        )
        var records: [String: StoredRecord] = [:]
        records.reserveCapacity(names.count)
        let rows = try Row.fetchCursor(statement, arguments: [zoneRowID, names.count == 1 ? names[0] : names.jsonArray])
        while let row = try rows.next() {
            let record = storedRecord(row, zoneID: zoneID)
            records[record.header.recordName] = record
        }
        return records
    }

    public func records(
        named names: [String], zoneName: String, in database: DatabaseRef, access: ParticipantAccess?, logger: Logger
    ) async throws -> [String: StoredRecord] {
        try await read { db in
            guard let databaseID = try Self.databaseID(db, database) else {
                if zoneName == ZoneID.defaultZoneName { return [:] }
                throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
            }
            guard let zone = try Self.zoneRow(db, databaseID: databaseID, zoneName: zoneName) else {
                throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
            }
            let found = try Self.liveRecords(db, zoneRowID: zone.id, zoneID: database.zoneID(zoneName), names: names)
            guard let access else { return found }
            let visible = try Self.visibleNames(Array(found.keys), zoneRowID: zone.id, access: access, db)
            return found.filter { visible.contains($0.key) }
        }
    }

    public func modifyRecords(_ batch: RecordBatch, logger: Logger) async throws -> [RecordModificationResult] {
        let planner = self.planner
        return try await write { db in
            // The database and the zone in one statement; a first write to the default zone makes both.
            var found = try Self.databaseAndZone(db, batch.database, zoneName: batch.zoneName)
            if found == nil, batch.zoneName == ZoneID.defaultZoneName {
                let databaseID = try Self.ensureDatabase(db, batch.database, timestamp: batch.timestamp)
                found = (databaseID, try Self.zoneRow(db, databaseID: databaseID, zoneName: batch.zoneName))
            }
            guard let (databaseID, zone) = found, let zone else {
                throw StoreError(.zoneNotFound, "zone \(batch.zoneName) does not exist")
            }
            let zoneID = batch.database.zoneID(batch.zoneName)
            let read = try Self.liveRecords(db, zoneRowID: zone.id, zoneID: zoneID, names: Array(batch.namesToRead))
            var (plan, existing) = try Self.plan(batch, existing: read, planner: planner, zoneRowID: zone.id, db)
            let shareWork = try Self.prepareShareChanges(&plan, batch: batch, existing: existing, zoneRowID: zone.id, db)

            var sequence = zone.changeSequence
            var saved: [StoredRecord] = []
            saved.reserveCapacity(plan.writes.count)
            if !plan.isEmpty {
                saved = try Self.apply(plan, db: db, zoneRowID: zone.id, zoneID: zoneID, batch: batch, sequence: &sequence)
                try Self.trackHierarchyMoves(db, zoneRowID: zone.id, existing: existing, writes: plan.writes, sequence: &sequence)
                if shareWork.isEmpty {
                    try Self.touchZone(db, zoneID: zone.id, databaseID: databaseID, changeSequence: sequence)
                } else {
                    // Share changes take their change tags after the batch's: the zone's sequence is stored first.
                    try db.cachedStatement(sql: "UPDATE zones SET change_seq = ? WHERE id = ?").execute(arguments: [sequence, zone.id])
                    try Self.applyShareChanges(shareWork, zoneRowID: zone.id, batch: batch, db)
                    try Self.touchZone(db, zoneID: zone.id, databaseID: databaseID)
                }
                try Self.touchSharedViews(db, zoneRowID: zone.id)
                // Share changes and moves may have given records new change tags: answer with what is stored now.
                let movedAny = plan.writes.contains { write in existing[write.recordName].map { $0.header.parent != write.parent } ?? false }
                if !shareWork.isEmpty || movedAny {
                    let names = saved.map(\.header.recordName)
                    let current = try Self.liveRecords(db, zoneRowID: zone.id, zoneID: zoneID, names: names)
                    saved = saved.map { current[$0.header.recordName] ?? $0 }
                }
            }
            let results = plan.results(saved: saved)
            try Self.attachAssets(batch.attachments(savedIn: results), db)
            return results
        }
    }

    /// Writes a plan: upserts, `DELETE_SELF` reference index, explicit and cascading deletions.
    private static func apply(
        _ plan: RecordBatchPlan, db: Database, zoneRowID: Int64, zoneID: ZoneID, batch: RecordBatch, sequence: inout Int64
    ) throws -> [StoredRecord] {
        // Prepared once, executed per row: in-process SQLite has no round trip to save, and this is its fastest bulk path.
        let upsert = try db.cachedStatement(
            sql: """
                INSERT INTO records (zone_id, record_name, record_type, change_seq, deleted, fields, parent_name, share_name, short_guid,
                    created_at, created_by, created_device, modified_at, modified_by, modified_device)
                VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (zone_id, record_name) DO UPDATE SET
                    record_type = excluded.record_type, change_seq = excluded.change_seq, deleted = 0, fields = excluded.fields,
                    parent_name = excluded.parent_name, share_name = excluded.share_name, short_guid = excluded.short_guid,
                    created_at = excluded.created_at, created_by = excluded.created_by, created_device = excluded.created_device,
                    modified_at = excluded.modified_at, modified_by = excluded.modified_by, modified_device = excluded.modified_device
                """
        )
        var saved: [StoredRecord] = []
        saved.reserveCapacity(plan.writes.count)
        for write in plan.writes {
            sequence += 1
            try upsert.execute(arguments: [
                zoneRowID, write.recordName, write.recordType, sequence, String(decoding: write.fieldsJSON, as: UTF8.self), write.parent,
                write.share?.recordName,
                write.shortGUID, write.created.timestamp, write.created.userRecordName, write.created.deviceID,
                write.modified.timestamp, write.modified.userRecordName, write.modified.deviceID,
            ])
            saved.append(write.storedRecord(zoneID: zoneID, changeSequence: sequence))
        }

        if plan.writes.count == 1 {
            try db.cachedStatement(sql: "DELETE FROM record_references WHERE zone_id = ? AND source_name = ?")
                .execute(arguments: [zoneRowID, plan.writes[0].recordName])
        } else if !plan.writes.isEmpty {
            try db.cachedStatement(sql: "DELETE FROM record_references WHERE zone_id = ? AND source_name IN (SELECT value FROM json_each(?))")
                .execute(arguments: [zoneRowID, plan.writes.map(\.recordName).jsonArray])
        }
        if !plan.writes.isEmpty {
            let insertReference = try db.cachedStatement(
                sql: "INSERT OR IGNORE INTO record_references (zone_id, target_name, source_name) VALUES (?, ?, ?)"
            )
            for write in plan.writes {
                for target in write.deleteSelfTargets {
                    try insertReference.execute(arguments: [zoneRowID, target, write.recordName])
                }
            }
        }

        guard !plan.deletions.isEmpty else { return saved }
        // Follow DELETE_SELF references breadth-first until no live record points at a deleted one.
        var deleted = Set(plan.deletions)
        var frontier = plan.deletions
        let referrers = try db.cachedStatement(
            sql: """
                SELECT DISTINCT r.source_name FROM record_references r
                JOIN records s ON s.zone_id = r.zone_id AND s.record_name = r.source_name AND s.deleted = 0
                WHERE r.zone_id = ? AND r.target_name IN (SELECT value FROM json_each(?))
                """
        )
        while !frontier.isEmpty {
            let sources = try String.fetchAll(referrers, arguments: [zoneRowID, frontier.jsonArray])
            frontier = sources.filter { deleted.insert($0).inserted }
        }
        let tombstone = try db.cachedStatement(
            sql: """
                UPDATE records SET deleted = 1, fields = NULL, change_seq = ?, share_name = NULL,
                    modified_at = ?, modified_by = ?, modified_device = ?
                WHERE zone_id = ? AND record_name = ? AND deleted = 0
                """
        )
        // Explicit deletions first, in request order, then cascades.
        let ordered = plan.deletions + deleted.subtracting(plan.deletions).sorted()
        for name in ordered {
            sequence += 1
            try tombstone.execute(arguments: [sequence, batch.timestamp, batch.author, batch.deviceID, zoneRowID, name])
        }
        try db.cachedStatement(sql: "DELETE FROM record_references WHERE zone_id = ? AND source_name IN (SELECT value FROM json_each(?))").execute(
            arguments: [zoneRowID, ordered.jsonArray]
        )
        // Deleting a share's root, or its share record, ends the share, as in CloudKit.
        try endShares(db, zoneRowID: zoneRowID, deletedNames: ordered, sequence: &sequence, batch: batch)
        return saved
    }
}
