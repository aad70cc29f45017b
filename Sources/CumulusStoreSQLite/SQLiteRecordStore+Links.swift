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
            let hour: Int64 = 3_600_000
            let day: Int64 = 24 * hour
            // Each window: how many uploads it holds, and when its oldest one leaves it.
            func window(_ condition: String, _ arguments: StatementArguments, length: Int64) throws -> (count: Int, oldest: Int64?) {
                let row = try Row.fetchOne(
                    db, sql: "SELECT COUNT(*), MIN(created_at) FROM link_uploads WHERE \(condition) AND created_at > ?",
                    arguments: arguments + [now - length]
                )!
                return (row[0], row[1])
            }
            let device: StatementArguments = [uploader.container, uploader.deviceID]
            let checks: [(Int, (count: Int, oldest: Int64?), Int64, String)] = [
                (
                    quota.perDevicePerHour, try window("container_id = ? AND device_id = ?", device, length: hour), hour,
                    "\(quota.perDevicePerHour) links an hour from this device"
                ),
                (
                    quota.perDevicePerDay, try window("container_id = ? AND device_id = ?", device, length: day), day,
                    "\(quota.perDevicePerDay) links a day from this device"
                ),
                (
                    quota.perAddressPerHour, try window("ip_address = ?", [uploader.ipAddress], length: hour), hour,
                    "\(quota.perAddressPerHour) links an hour from this address"
                ),
            ]
            for (limit, usage, length, reason) in checks where usage.count >= limit {
                let retryAfter = max(1, Int(((usage.oldest ?? now) + length - now + 999) / 1000))
                return .rejected(retryAfter: retryAfter, reason: reason)
            }
            try db.execute(
                sql: "INSERT INTO link_uploads (container_id, device_id, ip_address, created_at) VALUES (?, ?, ?, ?)",
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
                    db,
                    sql:
                        "SELECT container_id, environment, kind, payload, created_at, expires_at FROM link_snapshots WHERE id = ? AND expires_at > ?",
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
            try db.execute(sql: "DELETE FROM link_snapshots WHERE expires_at <= ?", arguments: [now])
            let deleted = db.changesCount
            try db.execute(sql: "DELETE FROM link_uploads WHERE created_at <= ?", arguments: [now - 24 * 3_600_000])
            return deleted
        }
    }
}
