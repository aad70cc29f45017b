import CumulusModel
public import CumulusStore
import Foundation
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    /// Counts the uploader's windows and stores the snapshots in one transaction. An advisory lock per device keeps two
    /// instances from both admitting the last upload a window allows (counting then inserting is not atomic by itself).
    public func createLinkSnapshots(
        _ snapshots: [LinkSnapshot], uploader: LinkUploader, quota: LinkQuota, now: Int64, logger: Logger
    ) async throws -> LinkQuotaDecision {
        try await transaction(logger: logger) { connection in
            try await connection.query(
                "SELECT pg_advisory_xact_lock(hashtext(\("device\n" + uploader.container + "\n" + uploader.deviceID)))", logger: logger)
            try await connection.query("SELECT pg_advisory_xact_lock(hashtext(\("address\n" + uploader.ipAddress)))", logger: logger)
            var usage: [LinkQuotaUsage] = []
            for window in quota.windows {
                let since = now - window.length
                let rows =
                    switch window.scope {
                    case .device:
                        try await connection.query(
                            """
                            SELECT COUNT(*), MIN(created_at) FROM link_uploads
                            WHERE container_id = \(uploader.container) AND device_id = \(uploader.deviceID) AND created_at > \(since)
                            """, logger: logger)
                    case .address:
                        try await connection.query(
                            "SELECT COUNT(*), MIN(created_at) FROM link_uploads WHERE ip_address = \(uploader.ipAddress) AND created_at > \(since)",
                            logger: logger)
                    }
                for try await (count, oldest) in rows.decode((Int64, Int64?).self) {
                    usage.append(LinkQuotaUsage(count: Int(count), oldest: oldest))
                }
            }
            let decision = quota.decide(usage: usage, now: now)
            guard decision == .accepted else { return decision }
            try await connection.query(
                """
                INSERT INTO link_uploads (container_id, device_id, ip_address, created_at)
                VALUES (\(uploader.container), \(uploader.deviceID), \(uploader.ipAddress), \(now))
                """, logger: logger)
            guard !snapshots.isEmpty else { return .accepted }
            // One statement for every snapshot of the upload.
            try await connection.query(
                """
                INSERT INTO link_snapshots (id, container_id, environment, kind, payload, created_at, expires_at)
                SELECT * FROM UNNEST(\(snapshots.map(\.id))::text[], \(snapshots.map(\.container))::text[],
                    \(snapshots.map(\.environment.rawValue))::text[], \(snapshots.map(\.kind))::text[],
                    \(snapshots.map { String(decoding: $0.payload, as: UTF8.self) })::text[],
                    \(snapshots.map(\.createdAt))::bigint[], \(snapshots.map(\.expiresAt))::bigint[])
                """, logger: logger)
            return .accepted
        }
    }

    public func linkSnapshot(id: String, now: Int64, logger: Logger) async throws -> LinkSnapshot? {
        let rows = try await query(
            """
            SELECT container_id, environment, kind, payload, created_at, expires_at FROM link_snapshots
            WHERE id = \(id) AND expires_at > \(now)
            """, logger: logger)
        guard
            let (container, environment, kind, payload, createdAt, expiresAt) = try await first(
                rows.decode((String, String, String, String, Int64, Int64).self))
        else { return nil }
        guard let environment = ContainerEnvironment(rawValue: environment) else { throw StoreError(.corrupt, "link has an unknown environment") }
        return LinkSnapshot(
            id: id, container: container, environment: environment, kind: kind, payload: Array(payload.utf8), createdAt: createdAt,
            expiresAt: expiresAt)
    }

    public func deleteExpiredLinkSnapshots(now: Int64, logger: Logger) async throws -> Int {
        try await transaction(logger: logger) { connection in
            var deleted = 0
            for try await _ in try await connection.query("DELETE FROM link_snapshots WHERE expires_at <= \(now) RETURNING 1", logger: logger) {
                deleted += 1
            }
            try await connection.query("DELETE FROM link_uploads WHERE created_at <= \(now - LinkQuota.retention)", logger: logger)
            return deleted
        }
    }
}
