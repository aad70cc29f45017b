public import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    public func recordDevice(_ sighting: DeviceSighting, logger: Logger) async throws {
        _ = try await transaction(logger: logger) { connection in
            try await connection.query(
                """
                INSERT INTO devices (user_record_name, environment, device_id, name, last_seen_at, last_fetched_at, position)
                SELECT \(sighting.userRecordName), \(sighting.environment.rawValue), \(sighting.deviceID), \(sighting.name), \(sighting.seenAt),
                    CASE WHEN \(sighting.position)::bigint IS NULL THEN NULL ELSE \(sighting.seenAt) END, \(sighting.position)
                WHERE EXISTS (SELECT 1 FROM users WHERE user_record_name = \(sighting.userRecordName))
                    AND (EXISTS (SELECT 1 FROM devices WHERE user_record_name = \(sighting.userRecordName)
                            AND environment = \(sighting.environment.rawValue) AND device_id = \(sighting.deviceID))
                        OR (SELECT count(*) FROM devices WHERE user_record_name = \(sighting.userRecordName)) < \(DeviceLimits.maximumPerUser))
                ON CONFLICT (user_record_name, environment, device_id) DO UPDATE SET
                    name = COALESCE(excluded.name, devices.name), last_seen_at = GREATEST(devices.last_seen_at, excluded.last_seen_at),
                    last_fetched_at = COALESCE(excluded.last_fetched_at, devices.last_fetched_at),
                    position = GREATEST(devices.position, excluded.position)
                """, logger: logger)
        }
    }

    public func devices(container: String, userRecordName: String, logger: Logger) async throws -> [DeviceState] {
        try await transaction(snapshot: true, logger: logger) { connection in
            let rows = try await connection.query(
                """
                SELECT \(unescaped: Self.deviceColumns)
                FROM devices v JOIN users u ON u.user_record_name = v.user_record_name
                WHERE v.user_record_name = \(userRecordName) AND u.container_id = \(container)
                ORDER BY v.last_seen_at DESC, v.device_id
                """, logger: logger)
            var devices: [DeviceState] = []
            for try await row in rows { devices.append(try Self.deviceState(row)) }
            return devices
        }
    }

    public func recordVerification(
        _ verification: DeviceVerification, container: String, environment: ContainerEnvironment, userRecordName: String, deviceID: String,
        logger: Logger
    ) async throws {
        _ = try await transaction(logger: logger) { connection in
            try await connection.query(
                """
                INSERT INTO devices (user_record_name, environment, device_id, last_seen_at, verified_at, verified_zones, verified_missing,
                    verified_extra, verified_stale, verified_zones_out)
                SELECT \(userRecordName), \(environment.rawValue), \(deviceID), \(verification.verifiedAt), \(verification.verifiedAt),
                    \(verification.zones), \(verification.missing), \(verification.extra), \(verification.stale), \(verification.zoneNamesText)
                WHERE EXISTS (SELECT 1 FROM users WHERE user_record_name = \(userRecordName) AND container_id = \(container))
                    AND (EXISTS (SELECT 1 FROM devices WHERE user_record_name = \(userRecordName) AND environment = \(environment.rawValue)
                            AND device_id = \(deviceID))
                        OR (SELECT count(*) FROM devices WHERE user_record_name = \(userRecordName)) < \(DeviceLimits.maximumPerUser))
                ON CONFLICT (user_record_name, environment, device_id) DO UPDATE SET
                    last_seen_at = GREATEST(devices.last_seen_at, excluded.last_seen_at), verified_at = excluded.verified_at,
                    verified_zones = excluded.verified_zones, verified_missing = excluded.verified_missing,
                    verified_extra = excluded.verified_extra, verified_stale = excluded.verified_stale,
                    verified_zones_out = excluded.verified_zones_out
                """, logger: logger)
        }
    }

    public func devicesOutOfSync(container: String, environment: ContainerEnvironment, limit: Int, logger: Logger) async throws
        -> [DeviceOutOfSync]
    {
        try await transaction(snapshot: true, logger: logger) { connection in
            let rows = try await connection.query(
                """
                SELECT \(unescaped: Self.deviceColumns), u.user_record_name, u.name
                FROM devices v JOIN users u ON u.user_record_name = v.user_record_name
                WHERE v.environment = \(environment.rawValue) AND v.verified_missing + v.verified_extra + v.verified_stale > 0
                    AND u.container_id = \(container)
                ORDER BY v.verified_at DESC, v.device_id
                LIMIT \(limit)
                """, logger: logger)
            var devices: [DeviceOutOfSync] = []
            for try await row in rows {
                let cells = RowReader(row)
                devices.append(
                    DeviceOutOfSync(userRecordName: try cells[13], userName: try cells[14], device: try Self.deviceState(row)))
            }
            return devices
        }
    }

    /// A device's columns, as ``deviceState(_:)`` reads them: `v` is the device, `u` its user.
    static let deviceColumns = """
        v.device_id, v.name, v.environment, v.last_seen_at, v.last_fetched_at, v.position,
            (SELECT d.change_seq FROM databases d WHERE d.container_id = u.container_id AND d.environment = v.environment
                AND d.scope = 'private' AND d.owner_record_name = v.user_record_name),
            v.verified_at, v.verified_zones, v.verified_missing, v.verified_extra, v.verified_stale, v.verified_zones_out
        """

    static func deviceState(_ row: PostgresRow) throws -> DeviceState {
        let cells = RowReader(row)
        let position: Int64? = try cells[5]
        let head: Int64? = try cells[6]
        let verifiedAt: Int64? = try cells[7]
        func count(_ index: Int) throws -> Int { Int(try cells[index, as: Int32?.self] ?? 0) }
        return DeviceState(
            deviceID: try cells[0], name: try cells[1], environment: ContainerEnvironment(rawValue: try cells[2]) ?? .development,
            lastSeenAt: try cells[3], lastFetchedAt: try cells[4], position: position, changesBehind: position.map { max(0, (head ?? 0) - $0) },
            verification: try verifiedAt.map {
                DeviceVerification(
                    verifiedAt: $0, zones: try count(8), missing: try count(9), extra: try count(10), stale: try count(11),
                    zonesOutOfSync: DeviceVerification.zoneNames(try cells[12]))
            })
    }
}

extension PostgresRecordStore {
    /// A database's position in its own feed; 0 when it was never written.
    func databaseSequence(_ database: DatabaseRef, logger: Logger) async throws -> Int64 {
        try await read(logger: logger) { connection in
            let rows = try await connection.query(
                """
                SELECT change_seq FROM databases WHERE container_id = \(database.container) AND environment = \(database.environment.rawValue)
                AND scope = \(database.scope.rawValue) AND owner_record_name = \(database.ownerRecordName)
                """, logger: logger)
            for try await sequence in rows.decode(Int64.self) { return sequence }
            return 0
        }
    }
}

extension PostgresRecordStore {
    public func probeWrite(at time: Int64, logger: Logger) async throws {
        _ = try await transaction(logger: logger) { connection in
            try await connection.query(
                "INSERT INTO store_probe (id, probed_at) VALUES (1, \(time)) ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at",
                logger: logger)
        }
    }
}
