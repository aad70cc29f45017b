import CumulusModel
public import CumulusStore
import Foundation
public import Logging
import PostgresNIO

/// Asset receipts and the files that hold their bytes (the bytes themselves are in an ``AssetStorage``).
extension PostgresRecordStore {
    static let assetColumns = """
        receipt, environment, database_scope, owner_record_name, zone_name, record_name, field_name, uploader, file_id, size, checksum, \
        created_at, attached, container_id
        """

    func assetUploads(_ rows: PostgresRowSequence) async throws -> [AssetUpload] {
        var uploads: [AssetUpload] = []
        for try await row in rows {
            let (receipt, environment, scope, owner, zone, recordName, fieldName, uploader, fileID, size, checksum, createdAt, attached, container) =
                try row.decode((String, String, String, String, String, String?, String?, String, String?, Int64?, String?, Int64, Bool, String).self)
            guard let environment = ContainerEnvironment(rawValue: environment), let scope = DatabaseScope(rawValue: scope) else {
                throw StoreError(.corrupt, "asset receipt has an unknown environment or database")
            }
            uploads.append(
                AssetUpload(
                    receipt: receipt, database: DatabaseRef(container: container, environment: environment, scope: scope, ownerRecordName: owner),
                    zoneName: zone, recordName: recordName, fieldName: fieldName, uploader: uploader, fileID: fileID, size: size, checksum: checksum,
                    createdAt: createdAt, attached: attached))
        }
        return uploads
    }

    public func createAssetUploads(_ uploads: [AssetUpload], logger: Logger) async throws {
        guard !uploads.isEmpty else { return }
        try await transaction(logger: logger) { connection in
            for upload in uploads {
                try await connection.query(
                    """
                    INSERT INTO asset_uploads (receipt, environment, database_scope, owner_record_name, zone_name, record_name, field_name,
                        uploader, file_id, size, checksum, created_at, attached, container_id)
                    VALUES (\(upload.receipt), \(upload.database.environment.rawValue), \(upload.database.scope.rawValue),
                        \(upload.database.ownerRecordName), \(upload.zoneName), \(upload.recordName), \(upload.fieldName), \(upload.uploader),
                        \(upload.fileID), \(upload.size), \(upload.checksum), \(upload.createdAt), \(upload.attached), \(upload.database.container))
                    """, logger: logger)
            }
        }
    }

    public func assetUploads(receipts: [String], logger: Logger) async throws -> [AssetUpload] {
        guard !receipts.isEmpty else { return [] }
        return try await assetUploads(
            query(
                PostgresQuery(
                    unsafeSQL: "SELECT \(Self.assetColumns) FROM asset_uploads WHERE receipt = ANY($1)", binds: try Self.binds(receipts)),
                logger: logger))
    }

    public func completeAssetUpload(receipt: String, fileID: String, size: Int64, checksum: String, logger: Logger) async throws -> Bool {
        let updated = try await query(
            """
            UPDATE asset_uploads SET file_id = \(fileID), size = \(size), checksum = \(checksum)
            WHERE receipt = \(receipt) AND file_id IS NULL RETURNING 1
            """, logger: logger
        ).collect()
        return updated.count == 1
    }

    /// Marks receipts as held by saved records, binding a receipt `assets/rereference` made to the record that holds it;
    /// in the transaction that saved them.
    static func attachAssets(_ attachments: [AssetAttachment], _ connection: PostgresConnection, logger: Logger) async throws {
        guard !attachments.isEmpty else { return }
        try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    UPDATE asset_uploads a SET attached = true, zone_name = t.zone_name,
                        record_name = coalesce(a.record_name, t.record_name), field_name = coalesce(a.field_name, t.field_name)
                    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS t(receipt, zone_name, record_name, field_name)
                    WHERE a.receipt = t.receipt
                    """,
                binds: try Self.binds(
                    attachments.map(\.receipt), attachments.map(\.zoneName), attachments.map(\.recordName), attachments.map(\.fieldName))),
            logger: logger)
    }

    public func assetUsage(uploader: String, container: String, pendingSince: Int64, logger: Logger) async throws -> AssetUsage {
        let rows = try await query(
            """
            SELECT count(*) FILTER (WHERE NOT attached AND created_at >= \(pendingSince))::bigint,
                coalesce(sum(size) FILTER (WHERE NOT attached AND created_at >= \(pendingSince)), 0)::bigint,
                (SELECT coalesce(sum(size), 0) FROM (SELECT DISTINCT file_id, size FROM asset_uploads
                    WHERE uploader = \(uploader) AND container_id = \(container) AND file_id IS NOT NULL AND detached_at IS NULL) AS files)::bigint
            FROM asset_uploads WHERE uploader = \(uploader) AND container_id = \(container)
            """, logger: logger)
        let usage = try await first(rows.decode((Int64, Int64, Int64).self))
        return AssetUsage(pendingReceipts: Int(usage?.0 ?? 0), pendingBytes: usage?.1 ?? 0, storedBytes: usage?.2 ?? 0)
    }

    public func collectAssetGarbage(unattachedBefore: Int64, detachedBefore: Int64, history: AssetHistoryHold?, logger: Logger) async throws
        -> [String]
    {
        try await transaction(logger: logger) { connection in
            // A receipt is held while the live record it was saved in still names it (as a field value, or in a list).
            let held = """
                EXISTS (
                    SELECT 1 FROM databases d
                    JOIN zones z ON z.database_id = d.id AND z.zone_name = a.zone_name AND NOT z.deleted
                    JOIN records r ON r.zone_id = z.id AND r.record_name = a.record_name AND NOT r.deleted
                    WHERE d.container_id = a.container_id AND d.environment = a.environment AND d.scope = a.database_scope
                      AND d.owner_record_name = a.owner_record_name AND strpos(r.fields, a.receipt) > 0)
                """
            let forgotten: String
            if let history {
                // Held again (a restore brought its record back), or detached now and kept for the history.
                try await connection.query(
                    PostgresQuery(unsafeSQL: "UPDATE asset_uploads AS a SET detached_at = NULL WHERE detached_at IS NOT NULL AND \(held)"),
                    logger: logger)
                try await connection.query(
                    PostgresQuery(
                        unsafeSQL: """
                            UPDATE asset_uploads AS a SET detached_at = \(history.now)
                            WHERE attached AND detached_at IS NULL AND created_at < \(detachedBefore) AND NOT \(held)
                            """), logger: logger)
                forgotten = "(a.detached_at IS NOT NULL AND a.detached_at < \(history.keptSince))"
            } else {
                forgotten = "(a.attached AND a.created_at < \(detachedBefore) AND NOT \(held))"
            }
            var files: Set<String> = []
            for try await fileID in try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        DELETE FROM asset_uploads a WHERE (NOT a.attached AND a.created_at < \(unattachedBefore)) OR \(forgotten)
                        RETURNING a.file_id
                        """), logger: logger
            ).decode(String?.self) {
                if let fileID { files.insert(fileID) }
            }
            guard !files.isEmpty else { return [] }
            var stillNamed: Set<String> = []
            for try await fileID in try await connection.query(
                PostgresQuery(
                    unsafeSQL: "SELECT DISTINCT file_id FROM asset_uploads WHERE file_id = ANY($1)", binds: try Self.binds(Array(files))),
                logger: logger
            ).decode(String.self) {
                stillNamed.insert(fileID)
            }
            return files.subtracting(stillNamed).sorted()
        }
    }
}
