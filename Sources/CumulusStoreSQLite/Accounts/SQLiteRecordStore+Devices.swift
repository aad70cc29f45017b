import CumulusModel
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
                    WHERE EXISTS (SELECT 1 FROM users WHERE user_record_name = ?1)
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
                        SELECT v.device_id, v.name, v.environment, v.last_seen_at, v.last_fetched_at, v.position,
                            (SELECT d.change_seq FROM databases d WHERE d.container_id = u.container_id AND d.environment = v.environment
                                AND d.scope = 'private' AND d.owner_record_name = v.user_record_name)
                        FROM devices v JOIN users u ON u.user_record_name = v.user_record_name
                        WHERE v.user_record_name = ? AND u.container_id = ?
                        ORDER BY v.last_seen_at DESC, v.device_id
                        """),
                arguments: [userRecordName, container]
            ).map { row in
                let position: Int64? = row[5]
                let head: Int64? = row[6]
                return DeviceState(
                    deviceID: row[0], name: row[1], environment: ContainerEnvironment(rawValue: row[2]) ?? .development, lastSeenAt: row[3],
                    lastFetchedAt: row[4], position: position, changesBehind: position.map { max(0, (head ?? 0) - $0) })
            }
        }
    }
}
