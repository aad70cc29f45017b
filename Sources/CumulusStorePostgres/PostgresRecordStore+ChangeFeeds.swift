public import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    /// One page of a database's zone feed, read in one snapshot (`REPEATABLE READ`): its rows and its final position
    /// agree. A zone's position is taken under its database's row lock, held until commit, so positions commit in
    /// order and a change that commits after this snapshot always lands after the position returned.
    public func databaseChanges(in database: DatabaseRef, after sequence: Int64, limit: Int, logger: Logger) async throws -> DatabaseChangePage {
        try await transaction(snapshot: true, logger: logger) { connection in
            guard let databaseID = try await Self.databaseID(connection, database, logger: logger) else {
                return DatabaseChangePage(zones: [], sequence: 0, moreComing: false)
            }
            let rows = try await connection.query(
                """
                SELECT id, zone_name, change_seq, database_change_seq, deleted FROM zones
                WHERE database_id = \(databaseID) AND database_change_seq > \(sequence) ORDER BY database_change_seq LIMIT \(limit + 1)
                """, logger: logger)
            var zones: [DatabaseZoneChange] = []
            var lastPosition = sequence
            var moreComing = false
            for try await (id, name, changeSequence, position, deleted) in rows.decode((Int64, String, Int64, Int64, Bool).self) {
                if zones.count == limit {
                    moreComing = true
                    break
                }
                let zoneID = database.zoneID(name)
                zones.append(deleted ? .deleted(zoneID) : .changed(ZoneState(zoneID: zoneID, changeSequence: changeSequence, incarnation: id)))
                lastPosition = position
            }
            if moreComing { return DatabaseChangePage(zones: zones, sequence: lastPosition, moreComing: true) }
            var position = sequence
            for try await current in try await connection.query("SELECT change_seq FROM databases WHERE id = \(databaseID)", logger: logger)
                .decode(Int64.self)
            {
                position = max(current, sequence)
            }
            return DatabaseChangePage(zones: zones, sequence: position, moreComing: false)
        }
    }
}
