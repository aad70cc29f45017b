public import CumulusModel
public import CumulusStore
import GRDB
public import Logging

extension SQLiteRecordStore {
    /// The database row's ID, or `nil` if the database was never written.
    static func databaseID(_ db: Database, _ database: DatabaseRef) throws -> Int64? {
        try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT id FROM databases WHERE container_id = ? AND environment = ? AND scope = ? AND owner_record_name = ?"),
            arguments: [database.container, database.environment.rawValue, database.scope.rawValue, database.ownerRecordName]
        )
    }

    /// The database row's ID, creating the database and its default zone on first write.
    static func ensureDatabase(_ db: Database, _ database: DatabaseRef, timestamp: Int64) throws -> Int64 {
        if let id = try databaseID(db, database) { return id }
        try db.cachedStatement(sql: "INSERT INTO databases (container_id, environment, scope, owner_record_name) VALUES (?, ?, ?, ?)").execute(
            arguments: [database.container, database.environment.rawValue, database.scope.rawValue, database.ownerRecordName]
        )
        let id = db.lastInsertedRowID
        try db.cachedStatement(sql: "INSERT INTO zones (database_id, zone_name, created_at) VALUES (?, ?, ?)").execute(arguments: [
            id, ZoneID.defaultZoneName, timestamp,
        ]
        )
        return id
    }

    /// The live zone with this name.
    static func zoneRow(_ db: Database, databaseID: Int64, zoneName: String) throws -> (id: Int64, changeSequence: Int64)? {
        try Row.fetchOne(
            db.cachedStatement(sql: "SELECT id, change_seq FROM zones WHERE database_id = ? AND zone_name = ? AND deleted = 0"),
            arguments: [databaseID, zoneName]
        ).map { (id: $0[0], changeSequence: $0[1]) }
    }

    /// Moves a zone to the head of its database's change feed.
    ///
    /// - Parameters:
    ///   - changeSequence: The zone's own new change sequence, stored in the same statement, if it has one.
    ///   - digest: A change of the zone's digest, also in that statement (after a batch: one `UPDATE` of the zone).
    static func touchZone(_ db: Database, zoneID: Int64, databaseID: Int64, changeSequence: Int64? = nil, digest: ZoneDigest = .empty) throws {
        let sequence = try Int64.fetchOne(
            db.cachedStatement(sql: "UPDATE databases SET change_seq = change_seq + 1 WHERE id = ? RETURNING change_seq"), arguments: [databaseID]
        )!
        if let changeSequence, digest != .empty {
            var arguments: StatementArguments = [sequence, changeSequence]
            _ = arguments.append(contentsOf: digestArguments(digest))
            _ = arguments.append(contentsOf: [zoneID])
            try db.cachedStatement(sql: "UPDATE zones SET database_change_seq = ?, change_seq = ?, \(digestAdjustment) WHERE id = ?")
                .execute(arguments: arguments)
        } else if let changeSequence {
            try db.cachedStatement(sql: "UPDATE zones SET database_change_seq = ?, change_seq = ? WHERE id = ?").execute(arguments: [
                sequence, changeSequence, zoneID,
            ])
        } else {
            try db.cachedStatement(sql: "UPDATE zones SET database_change_seq = ? WHERE id = ?").execute(arguments: [sequence, zoneID])
        }
    }

    public func zones(in database: DatabaseRef, logger: Logger) async throws -> [ZoneState] {
        try await read { db in
            guard let databaseID = try Self.databaseID(db, database) else { return [ZoneState.unwrittenDefaultZone(of: database)] }
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT id, zone_name, change_seq FROM zones WHERE database_id = ? AND deleted = 0
                        ORDER BY zone_name <> '_defaultZone', zone_name
                        """),
                arguments: [databaseID]
            )
            return rows.map { ZoneState(zoneID: database.zoneID($0["zone_name"]), changeSequence: $0["change_seq"], incarnation: $0["id"]) }
        }
    }

    public func zones(named names: [String], in database: DatabaseRef, logger: Logger) async throws -> [String: ZoneState] {
        try await read { db in
            guard let databaseID = try Self.databaseID(db, database) else {
                return names.contains(ZoneID.defaultZoneName) ? [ZoneID.defaultZoneName: ZoneState.unwrittenDefaultZone(of: database)] : [:]
            }
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT id, zone_name, change_seq FROM zones
                        WHERE database_id = ? AND deleted = 0 AND zone_name IN (SELECT value FROM json_each(?))
                        """),
                arguments: [databaseID, names.jsonArray]
            )
            var zones: [String: ZoneState] = [:]
            for row in rows {
                let name: String = row["zone_name"]
                zones[name] = ZoneState(zoneID: database.zoneID(name), changeSequence: row["change_seq"], incarnation: row["id"])
            }
            return zones
        }
    }

    public func modifyZones(
        _ operations: [ZoneOperation], in database: DatabaseRef, timestamp: Int64, maximumZones: Int, logger: Logger
    ) async throws -> [ZoneModificationResult] {
        try await write { db in
            try Self.run(ZoneScripts.modify(operations, in: database, timestamp: timestamp, maximumZones: maximumZones), db)
        }
    }
}
