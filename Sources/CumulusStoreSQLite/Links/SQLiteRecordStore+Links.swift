import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging

extension SQLiteRecordStore {
    public func createLinkSnapshots(
        _ snapshots: [LinkSnapshot], uploader: LinkUploader, quota: LinkQuota, now: Int64, logger: Logger
    ) async throws -> LinkQuotaDecision {
        try await write { db in
            // The store counts each window in the upload log; the quota decides (the same for every store).
            let usage = try quota.windows.map { window in
                let (condition, arguments): (String, StatementArguments) =
                    switch window.scope {
                    case .device: ("container_id = ? AND device_id = ?", [uploader.container, uploader.deviceID])
                    case .address: ("ip_address = ?", [uploader.ipAddress])
                    }
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT COUNT(*), MIN(created_at) FROM link_uploads WHERE \(condition) AND created_at > ?"),
                    arguments: arguments + [now - window.length]
                )!
                return LinkQuotaUsage(count: row[0], oldest: row[1])
            }
            let decision = quota.decide(usage: usage, now: now)
            guard decision == .accepted else { return decision }
            try db.cachedStatement(sql: "INSERT INTO link_uploads (container_id, device_id, ip_address, created_at) VALUES (?, ?, ?, ?)").execute(
                arguments: [uploader.container, uploader.deviceID, uploader.ipAddress, now]
            )
            let insert = try db.cachedStatement(
                sql: "INSERT INTO link_snapshots (id, container_id, environment, kind, payload, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
            )
            for snapshot in snapshots {
                try insert.execute(arguments: [
                    snapshot.id, snapshot.container, snapshot.environment.rawValue, snapshot.kind, String(decoding: snapshot.payload, as: UTF8.self),
                    snapshot.createdAt, snapshot.expiresAt,
                ])
            }
            return .accepted
        }
    }

    public func linkSnapshot(id: String, now: Int64, logger: Logger) async throws -> LinkSnapshot? {
        try await read { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql:
                            "SELECT container_id, environment, kind, payload, created_at, expires_at FROM link_snapshots WHERE id = ? AND expires_at > ?"
                    ),
                    arguments: [id, now]
                ),
                let environment = ContainerEnvironment(rawValue: row[1])
            else { return nil }
            let payload: Data = row[3]
            return LinkSnapshot(
                id: id, container: row[0], environment: environment, kind: row[2], payload: Array(payload), createdAt: row[4], expiresAt: row[5]
            )
        }
    }

    public func deleteExpiredLinkSnapshots(now: Int64, logger: Logger) async throws -> Int {
        try await write { db in
            try db.cachedStatement(sql: "DELETE FROM link_snapshots WHERE expires_at <= ?").execute(arguments: [now])
            let deleted = db.changesCount
            try db.cachedStatement(sql: "DELETE FROM link_uploads WHERE created_at <= ?").execute(arguments: [now - LinkQuota.retention])
            return deleted
        }
    }
}
