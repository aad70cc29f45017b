import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging

/// Asset receipts and the files that hold their bytes (the bytes themselves are in an ``AssetStorage``).
extension SQLiteRecordStore {
    static let assetColumns = """
        receipt, environment, database_scope, owner_record_name, zone_name, record_name, field_name, uploader, file_id, size, checksum, \
        created_at, attached, container_id
        """

    static func assetUpload(_ row: Row) throws -> AssetUpload {
        guard let environment = ContainerEnvironment(rawValue: row[1]), let scope = DatabaseScope(rawValue: row[2]) else {
            throw StoreError(.corrupt, "asset receipt has an unknown environment or database")
        }
        return AssetUpload(
            receipt: row[0], database: DatabaseRef(container: row[13], environment: environment, scope: scope, ownerRecordName: row[3]),
            zoneName: row[4], recordName: row[5], fieldName: row[6], uploader: row[7], fileID: row[8], size: row[9], checksum: row[10],
            createdAt: row[11], attached: row[12])
    }

    public func createAssetUploads(_ uploads: [AssetUpload], logger: Logger) async throws {
        try await write { db in
            let statement = try db.cachedStatement(
                sql: """
                    INSERT INTO asset_uploads (\(Self.assetColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """)
            for upload in uploads {
                try statement.execute(arguments: [
                    upload.receipt, upload.database.environment.rawValue, upload.database.scope.rawValue, upload.database.ownerRecordName,
                    upload.zoneName, upload.recordName, upload.fieldName, upload.uploader, upload.fileID, upload.size, upload.checksum,
                    upload.createdAt, upload.attached, upload.database.container,
                ])
            }
        }
    }

    public func assetUploads(receipts: [String], logger: Logger) async throws -> [AssetUpload] {
        guard !receipts.isEmpty else { return [] }
        return try await read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: "SELECT \(Self.assetColumns) FROM asset_uploads WHERE receipt IN (SELECT value FROM json_each(?))"),
                arguments: [String(decoding: JSONValue.array(receipts.map { .string($0) }).jsonBytes, as: UTF8.self)]
            ).map(Self.assetUpload)
        }
    }

    public func completeAssetUpload(receipt: String, fileID: String, size: Int64, checksum: String, logger: Logger) async throws -> Bool {
        try await write { db in
            try db.cachedStatement(sql: "UPDATE asset_uploads SET file_id = ?, size = ?, checksum = ? WHERE receipt = ? AND file_id IS NULL")
                .execute(arguments: [fileID, size, checksum, receipt])
            return db.changesCount == 1
        }
    }

    /// Marks receipts as held by saved records, binding a receipt `assets/rereference` made to the record that holds it;
    /// in the transaction that saved them.
    static func attachAssets(_ attachments: [AssetAttachment], _ db: Database) throws {
        guard !attachments.isEmpty else { return }
        let statement = try db.cachedStatement(
            sql: """
                UPDATE asset_uploads SET attached = 1, zone_name = ?, record_name = coalesce(record_name, ?), field_name = coalesce(field_name, ?)
                WHERE receipt = ?
                """)
        for attachment in attachments {
            try statement.execute(arguments: [attachment.zoneName, attachment.recordName, attachment.fieldName, attachment.receipt])
        }
    }

    public func assetUsage(uploader: String, container: String, pendingSince: Int64, logger: Logger) async throws -> AssetUsage {
        try await read { db in
            let pending = try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT count(*), coalesce(sum(size), 0) FROM asset_uploads
                        WHERE uploader = ? AND container_id = ? AND attached = 0 AND created_at >= ?
                        """), arguments: [uploader, container, pendingSince])
            let stored = try Int64.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT coalesce(sum(size), 0) FROM (SELECT DISTINCT file_id, size FROM asset_uploads
                        WHERE uploader = ? AND container_id = ? AND file_id IS NOT NULL AND detached_at IS NULL)
                        """), arguments: [uploader, container])
            return AssetUsage(pendingReceipts: pending?[0] ?? 0, pendingBytes: pending?[1] ?? 0, storedBytes: stored ?? 0)
        }
    }

    public func collectAssetGarbage(unattachedBefore: Int64, detachedBefore: Int64, history: AssetHistoryHold?, logger: Logger) async throws
        -> [String]
    {
        try await write { db in
            // A receipt is held while the live record it was saved in still names it (as a field value, or in a list).
            let held = """
                EXISTS (
                    SELECT 1 FROM databases d
                    JOIN zones z ON z.database_id = d.id AND z.zone_name = a.zone_name AND z.deleted = 0
                    JOIN records r ON r.zone_id = z.id AND r.record_name = a.record_name AND r.deleted = 0
                    WHERE d.container_id = a.container_id AND d.environment = a.environment AND d.scope = a.database_scope
                      AND d.owner_record_name = a.owner_record_name AND instr(r.fields, a.receipt) > 0)
                """
            let forgotten: String
            if let history {
                // Held again (a restore brought its record back), or detached now and kept for the history.
                try db.execute(sql: "UPDATE asset_uploads AS a SET detached_at = NULL WHERE detached_at IS NOT NULL AND \(held)")
                try db.execute(
                    sql:
                        "UPDATE asset_uploads AS a SET detached_at = ? WHERE attached = 1 AND detached_at IS NULL AND created_at < ? AND NOT \(held)",
                    arguments: [history.now, detachedBefore])
                forgotten = "(a.detached_at IS NOT NULL AND a.detached_at < \(history.keptSince))"
            } else {
                forgotten = "(a.attached = 1 AND a.created_at < \(detachedBefore) AND NOT \(held))"
            }
            let doomed = try Row.fetchAll(
                db, sql: "SELECT receipt, file_id FROM asset_uploads a WHERE (a.attached = 0 AND a.created_at < ?) OR \(forgotten)",
                arguments: [unattachedBefore])
            guard !doomed.isEmpty else { return [] }
            let receipts = doomed.map { $0[0] as String }
            let files = Set(doomed.compactMap { $0[1] as String? })
            let json = { (values: [String]) in String(decoding: JSONValue.array(values.map { .string($0) }).jsonBytes, as: UTF8.self) }
            try db.execute(sql: "DELETE FROM asset_uploads WHERE receipt IN (SELECT value FROM json_each(?))", arguments: [json(receipts)])
            let stillNamed = try String.fetchSet(
                db, sql: "SELECT DISTINCT file_id FROM asset_uploads WHERE file_id IN (SELECT value FROM json_each(?))",
                arguments: [json(Array(files))])
            return files.subtracting(stillNamed).sorted()
        }
    }
}
