import CumulusModel
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
                SELECT v.device_id, v.name, v.environment, v.last_seen_at, v.last_fetched_at, v.position,
                    (SELECT d.change_seq FROM databases d WHERE d.container_id = u.container_id AND d.environment = v.environment
                        AND d.scope = 'private' AND d.owner_record_name = v.user_record_name)
                FROM devices v JOIN users u ON u.user_record_name = v.user_record_name
                WHERE v.user_record_name = \(userRecordName) AND u.container_id = \(container)
                ORDER BY v.last_seen_at DESC, v.device_id
                """, logger: logger)
            var devices: [DeviceState] = []
            for try await (id, name, environment, seen, fetched, position, head) in rows.decode(
                (String, String?, String, Int64, Int64?, Int64?, Int64?).self)
            {
                devices.append(
                    DeviceState(
                        deviceID: id, name: name, environment: ContainerEnvironment(rawValue: environment) ?? .development, lastSeenAt: seen,
                        lastFetchedAt: fetched, position: position, changesBehind: position.map { max(0, (head ?? 0) - $0) }))
            }
            return devices
        }
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
