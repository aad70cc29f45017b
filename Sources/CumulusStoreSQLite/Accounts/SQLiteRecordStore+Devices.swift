public import CumulusModel
public import CumulusStore
import GRDB
public import Logging

extension SQLiteRecordStore {
    public func recordDevice(_ sighting: DeviceSighting, logger: Logger) async throws {
        try await write { db in
            try db.cachedStatement(
                sql: """
                    INSERT INTO devices (user_record_name, environment, device_id, name, last_seen_at, last_fetched_at, position)
                    SELECT ?1, ?2, ?3, ?4, ?5, CASE WHEN ?6 IS NULL THEN NULL ELSE ?5 END, ?6
                    WHERE EXISTS (SELECT 1 FROM users WHERE user_record_name = ?1) AND \(Self.deviceRoom)
                    ON CONFLICT (user_record_name, environment, device_id) DO UPDATE SET
                        name = COALESCE(excluded.name, devices.name), last_seen_at = max(devices.last_seen_at, excluded.last_seen_at),
                        last_fetched_at = COALESCE(excluded.last_fetched_at, devices.last_fetched_at),
                        position = CASE WHEN excluded.position IS NULL THEN devices.position
                            ELSE max(COALESCE(devices.position, excluded.position), excluded.position) END
                    """
            ).execute(arguments: [
                sighting.userRecordName, sighting.environment.rawValue, sighting.deviceID, sighting.name, sighting.seenAt, sighting.position,
            ])
        }
    }

    public func devices(container: String, userRecordName: String, logger: Logger) async throws -> [DeviceState] {
        try await read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.deviceColumns)
                        FROM devices v JOIN users u ON u.user_record_name = v.user_record_name
                        WHERE v.user_record_name = ? AND u.container_id = ?
                        ORDER BY v.last_seen_at DESC, v.device_id
                        """),
                arguments: [userRecordName, container]
            ).map(Self.deviceState)
        }
    }

    public func recordVerification(
        _ verification: DeviceVerification, container: String, environment: ContainerEnvironment, userRecordName: String, deviceID: String,
        logger: Logger
    ) async throws {
        try await write { db in
            try db.cachedStatement(
                sql: """
                    INSERT INTO devices (user_record_name, environment, device_id, last_seen_at, verified_at, verified_zones, verified_missing,
                        verified_extra, verified_stale, verified_zones_out)
                    SELECT ?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, ?8, ?9
                    WHERE EXISTS (SELECT 1 FROM users WHERE user_record_name = ?1 AND container_id = ?10) AND \(Self.deviceRoom)
                    ON CONFLICT (user_record_name, environment, device_id) DO UPDATE SET
                        last_seen_at = max(devices.last_seen_at, excluded.last_seen_at), verified_at = excluded.verified_at,
                        verified_zones = excluded.verified_zones, verified_missing = excluded.verified_missing,
                        verified_extra = excluded.verified_extra, verified_stale = excluded.verified_stale,
                        verified_zones_out = excluded.verified_zones_out
                    """
            ).execute(arguments: [
                userRecordName, environment.rawValue, deviceID, verification.verifiedAt, verification.zones, verification.missing,
                verification.extra, verification.stale, verification.zoneNamesText, container,
            ])
        }
    }

    public func devicesOutOfSync(container: String, environment: ContainerEnvironment, limit: Int, logger: Logger) async throws
        -> [DeviceOutOfSync]
    {
        try await read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.deviceColumns), u.user_record_name, u.name
                        FROM devices v JOIN users u ON u.user_record_name = v.user_record_name
                        WHERE v.environment = ? AND v.verified_missing + v.verified_extra + v.verified_stale > 0 AND u.container_id = ?
                        ORDER BY v.verified_at DESC, v.device_id
                        LIMIT ?
                        """),
                arguments: [environment.rawValue, container, limit]
            ).map { row in DeviceOutOfSync(userRecordName: row[13], userName: row[14], device: Self.deviceState(row)) }
        }
    }

    /// A known device, or room for one more (``DeviceLimits/maximumPerUser``): a user naming a new device on every
    /// request cannot grow the table past it. `?1` is the user, `?2` the environment, `?3` the device.
    static let deviceRoom = """
        (EXISTS (SELECT 1 FROM devices WHERE user_record_name = ?1 AND environment = ?2 AND device_id = ?3)
            OR (SELECT count(*) FROM devices WHERE user_record_name = ?1) < \(DeviceLimits.maximumPerUser))
        """

    /// A device's columns, as ``deviceState(_:)`` reads them: `v` is the device, `u` its user.
    static let deviceColumns = """
        v.device_id, v.name, v.environment, v.last_seen_at, v.last_fetched_at, v.position,
            (SELECT d.change_seq FROM databases d WHERE d.container_id = u.container_id AND d.environment = v.environment
                AND d.scope = 'private' AND d.owner_record_name = v.user_record_name),
            v.verified_at, v.verified_zones, v.verified_missing, v.verified_extra, v.verified_stale, v.verified_zones_out
        """

    static func deviceState(_ row: Row) -> DeviceState {
        let position: Int64? = row[5]
        let head: Int64? = row[6]
        let verifiedAt: Int64? = row[7]
        return DeviceState(
            deviceID: row[0], name: row[1], environment: ContainerEnvironment(rawValue: row[2]) ?? .development, lastSeenAt: row[3],
            lastFetchedAt: row[4], position: position, changesBehind: position.map { max(0, (head ?? 0) - $0) },
            verification: verifiedAt.map {
                DeviceVerification(
                    verifiedAt: $0, zones: row[8] ?? 0, missing: row[9] ?? 0, extra: row[10] ?? 0, stale: row[11] ?? 0,
                    zonesOutOfSync: DeviceVerification.zoneNames(row[12]))
            })
    }
}

extension SQLiteRecordStore {
    public func probeWrite(at time: Int64, logger: Logger) async throws {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO store_probe (id, probed_at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at",
                arguments: [time])
        }
    }
}
