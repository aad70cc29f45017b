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
        try await read { db in try Self.run(ZoneScripts.records(named: names, zoneName: zoneName, in: database, access: access), db) }
    }

    public func modifyRecords(_ batch: RecordBatch, logger: Logger) async throws -> [RecordModificationResult] {
        let planner = self.planner
        return try await write { db in try Self.run(ModifyRecordsScript.script(batch, planner: planner), db) }
    }
}
