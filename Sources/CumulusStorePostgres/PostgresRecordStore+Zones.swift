public import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    /// Runs `body` in one transaction, translating PostgreSQL's errors as ``query(_:logger:duplicate:missingReference:)``
    /// does; a ``StoreError`` thrown by `body` passes through.
    ///
    /// - Parameter snapshot: read-only, every statement seeing the same snapshot (`REPEATABLE READ`), as a feed page
    ///   needs: PostgreSQL's default gives each statement its own, and a page's rows and its position would disagree.
    func transaction<T: Sendable>(
        snapshot: Bool = false, logger: Logger, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        // A deadlock PostgreSQL broke by aborting this transaction, or a serialization failure, leaves nothing
        // written: run it again, a few times, before answering "try again later".
        var attempt = 1
        while true {
            do {
                return try await transactionOnce(snapshot: snapshot, logger: logger, body)
            } catch let error as StoreError where error.isRetryableConflict && attempt < 4 {
                attempt += 1
                logger.debug("retrying a transaction PostgreSQL aborted", metadata: ["cumulus.attempt": "\(attempt)"])
            }
        }
    }

    private func transactionOnce<T: Sendable>(
        snapshot: Bool, logger: Logger, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        do {
            let client = self.client
            return try await metrics.measure(.transaction) {
                try await withConnectionWait { leased in
                    try await client.withConnection { connection in
                        leased()
                        // BEGIN with its isolation in one statement: a round trip fewer than BEGIN then SET TRANSACTION.
                        try await connection.query(snapshot ? "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY" : "BEGIN", logger: logger)
                        do {
                            let value = try await body(connection)
                            try await connection.query("COMMIT", logger: logger)
                            return value
                        } catch {
                            _ = try? await connection.query("ROLLBACK", logger: logger)
                            throw error
                        }
                    }
                }
            }
        } catch let error as StoreError {
            throw error
        } catch let error as PSQLError {
            throw Self.storeError(error)
        } catch let error as PostgresTransactionError {
            if let error = error.closureError as? StoreError { throw error }
            if let error = (error.closureError ?? error.beginError ?? error.commitError) as? PSQLError { throw Self.storeError(error) }
            throw StoreError(.unavailable, "PostgreSQL is unavailable", underlying: error)
        } catch {
            throw StoreError(.unavailable, "PostgreSQL is unavailable", underlying: error)
        }
    }

    /// The database row's ID, or `nil` if the database was never written.
    static func databaseID(_ connection: PostgresConnection, _ database: DatabaseRef, logger: Logger) async throws -> Int64? {
        let rows = try await connection.query(
            """
            SELECT id FROM databases WHERE container_id = \(database.container) AND environment = \(database.environment.rawValue)
            AND scope = \(database.scope.rawValue) AND owner_record_name = \(database.ownerRecordName)
            """, logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        return nil
    }

    /// The database row's ID, creating the database and its default zone on first write. Instances creating the same
    /// database at once meet on its unique key: one inserts, the others read.
    static func ensureDatabase(_ connection: PostgresConnection, _ database: DatabaseRef, timestamp: Int64, logger: Logger) async throws -> Int64 {
        if let id = try await databaseID(connection, database, logger: logger) { return id }
        let inserted = try await connection.query(
            """
            INSERT INTO databases (container_id, environment, scope, owner_record_name)
            VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.ownerRecordName))
            ON CONFLICT (container_id, environment, scope, owner_record_name) DO NOTHING RETURNING id
            """, logger: logger)
        for try await id in inserted.decode(Int64.self) {
            try await connection.query(
                "INSERT INTO zones (database_id, zone_name, created_at) VALUES (\(id), \(ZoneID.defaultZoneName), \(timestamp))", logger: logger)
            return id
        }
        guard let id = try await databaseID(connection, database, logger: logger) else {
            throw StoreError(.unexpected, "database \(database.ownerRecordName) vanished while it was created")
        }
        return id
    }

    /// The live zone with this name, locked for the rest of the transaction when `forUpdate`: writers of one zone
    /// then take its sequence numbers, and commit, one after the other.
    static func zoneRow(_ connection: PostgresConnection, databaseID: Int64, zoneName: String, forUpdate: Bool = false, logger: Logger)
        async throws -> (id: Int64, changeSequence: Int64)?
    {
        let lock = forUpdate ? " FOR UPDATE" : ""
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: "SELECT id, change_seq FROM zones WHERE database_id = $1 AND zone_name = $2 AND NOT deleted\(lock)",
                binds: try binds(databaseID, zoneName)), logger: logger)
        for try await (id, sequence) in rows.decode((Int64, Int64).self) { return (id, sequence) }
        return nil
    }

    /// The live zone with this name in a database, and the database's row ID, in one statement; the zone's row is
    /// locked for the rest of the transaction when `forUpdate`.
    static func zoneRow(_ connection: PostgresConnection, _ database: DatabaseRef, zoneName: String, forUpdate: Bool = false, logger: Logger)
        async throws -> (id: Int64, changeSequence: Int64, databaseID: Int64)?
    {
        let lock = forUpdate ? " FOR UPDATE OF z" : ""
        let rows = try await connection.query(
            """
            SELECT z.id, z.change_seq, d.id FROM zones z JOIN databases d ON d.id = z.database_id
            WHERE d.container_id = \(database.container) AND d.environment = \(database.environment.rawValue)
            AND d.scope = \(database.scope.rawValue) AND d.owner_record_name = \(database.ownerRecordName)
            AND z.zone_name = \(zoneName) AND NOT z.deleted\(unescaped: lock)
            """, logger: logger)
        for try await (id, sequence, databaseID) in rows.decode((Int64, Int64, Int64).self) { return (id, sequence, databaseID) }
        return nil
    }

    /// After a batch: the zone takes its new change sequence and moves to the head of its database's feed and of every
    /// viewer's shared database feed, in one statement. Rows are locked in the order every writer takes them: the zone
    /// (already held), its database, then shared databases by user.
    static func finishZoneWrite(_ connection: PostgresConnection, zoneRowID: Int64, databaseID: Int64, sequence: Int64, logger: Logger)
        async throws
    {
        try await connection.query(
            """
            WITH d AS (UPDATE databases SET change_seq = change_seq + 1 WHERE id = \(databaseID) RETURNING change_seq),
            z AS (
                UPDATE zones SET change_seq = \(sequence), database_change_seq = (SELECT change_seq FROM d) WHERE id = \(zoneRowID) RETURNING id
            ),
            viewers AS (
                SELECT user_record_name FROM shared_zone_views WHERE zone_id = (SELECT id FROM z) AND NOT deleted ORDER BY user_record_name
            ),
            bumped AS (
                UPDATE shared_databases s SET change_seq = s.change_seq + 1 FROM viewers v
                WHERE s.user_record_name = v.user_record_name RETURNING s.user_record_name, s.change_seq
            )
            UPDATE shared_zone_views v SET view_seq = b.change_seq FROM bumped b
            WHERE v.user_record_name = b.user_record_name AND v.zone_id = \(zoneRowID)
            """, logger: logger)
    }

    /// Deletes a zone's records and shares and keeps its row as a tombstone for the database feed; participants'
    /// views of it end, so their devices drop it.
    static func deleteZone(_ connection: PostgresConnection, zoneRowID: Int64, databaseID: Int64, logger: Logger) async throws {
        // Rows are locked in one order everywhere: zone, database, then shared databases.
        try await connection.query("UPDATE zones SET deleted = true WHERE id = \(zoneRowID)", logger: logger)
        try await touchZone(connection, zoneID: zoneRowID, databaseID: databaseID, logger: logger)
        try await endViews(connection, zoneRowID: zoneRowID, logger: logger)
        for table in ["shares", "record_references", "records"] {
            try await connection.query(
                PostgresQuery(unsafeSQL: "DELETE FROM \(table) WHERE zone_id = $1", binds: try binds(zoneRowID)), logger: logger)
        }
    }

    /// Moves a zone to the head of its database's change feed.
    static func touchZone(_ connection: PostgresConnection, zoneID: Int64, databaseID: Int64, logger: Logger) async throws {
        try await connection.query(
            """
            WITH d AS (UPDATE databases SET change_seq = change_seq + 1 WHERE id = \(databaseID) RETURNING change_seq)
            UPDATE zones SET database_change_seq = d.change_seq FROM d WHERE zones.id = \(zoneID)
            """, logger: logger)
    }

    /// Ends every participant's view of a zone (it was deleted): each of their shared database feeds reports it deleted.
    static func endViews(_ connection: PostgresConnection, zoneRowID: Int64, logger: Logger) async throws {
        try await connection.query(
            """
            WITH viewers AS (SELECT user_record_name FROM shared_zone_views WHERE zone_id = \(zoneRowID) AND NOT deleted),
            bumped AS (
                INSERT INTO shared_databases (user_record_name, change_seq) SELECT user_record_name, 1 FROM viewers
                ON CONFLICT (user_record_name) DO UPDATE SET change_seq = shared_databases.change_seq + 1
                RETURNING user_record_name, change_seq
            )
            UPDATE shared_zone_views v SET view_seq = b.change_seq, deleted = true, access = NULL
            FROM bumped b WHERE v.user_record_name = b.user_record_name AND v.zone_id = \(zoneRowID)
            """, logger: logger)
    }

    private static func defaultZone(_ database: DatabaseRef) -> ZoneState {
        ZoneState(zoneID: database.zoneID(ZoneID.defaultZoneName), changeSequence: 0, incarnation: 0)
    }

    public func zones(in database: DatabaseRef, logger: Logger) async throws -> [ZoneState] {
        try await transaction(snapshot: true, logger: logger) { connection in
            guard let databaseID = try await Self.databaseID(connection, database, logger: logger) else { return [Self.defaultZone(database)] }
            let rows = try await connection.query(
                """
                SELECT id, zone_name, change_seq FROM zones WHERE database_id = \(databaseID) AND NOT deleted
                ORDER BY zone_name <> \(ZoneID.defaultZoneName), zone_name COLLATE "C"
                """, logger: logger)
            var zones: [ZoneState] = []
            for try await (id, name, sequence) in rows.decode((Int64, String, Int64).self) {
                zones.append(ZoneState(zoneID: database.zoneID(name), changeSequence: sequence, incarnation: id))
            }
            return zones
        }
    }

    public func zones(named names: [String], in database: DatabaseRef, logger: Logger) async throws -> [String: ZoneState] {
        try await transaction(snapshot: true, logger: logger) { connection in
            guard let databaseID = try await Self.databaseID(connection, database, logger: logger) else {
                return names.contains(ZoneID.defaultZoneName) ? [ZoneID.defaultZoneName: Self.defaultZone(database)] : [:]
            }
            let rows = try await connection.query(
                "SELECT id, zone_name, change_seq FROM zones WHERE database_id = \(databaseID) AND NOT deleted AND zone_name = ANY(\(names))",
                logger: logger)
            var zones: [String: ZoneState] = [:]
            for try await (id, name, sequence) in rows.decode((Int64, String, Int64).self) {
                zones[name] = ZoneState(zoneID: database.zoneID(name), changeSequence: sequence, incarnation: id)
            }
            return zones
        }
    }

    public func modifyZones(
        _ operations: [ZoneOperation], in database: DatabaseRef, timestamp: Int64, logger: Logger
    ) async throws -> [ZoneModificationResult] {
        try await transaction(logger: logger) { connection in
            let databaseID = try await Self.ensureDatabase(connection, database, timestamp: timestamp, logger: logger)
            var results: [ZoneModificationResult] = []
            for operation in operations {
                let name = operation.zoneID.zoneName
                let zoneID = database.zoneID(name)
                switch operation.operationType {
                case .create:
                    // Instances creating the same zone at once meet on the live-name index: one inserts, the others read.
                    let inserted = try await connection.query(
                        """
                        INSERT INTO zones (database_id, zone_name, created_at) VALUES (\(databaseID), \(name), \(timestamp))
                        ON CONFLICT (database_id, zone_name) WHERE NOT deleted DO NOTHING RETURNING id
                        """, logger: logger)
                    var newID: Int64?
                    for try await id in inserted.decode(Int64.self) { newID = id }
                    if let newID {
                        try await Self.touchZone(connection, zoneID: newID, databaseID: databaseID, logger: logger)
                        results.append(.saved(ZoneState(zoneID: zoneID, changeSequence: 0, incarnation: newID)))
                    } else if let existing = try await Self.zoneRow(connection, databaseID: databaseID, zoneName: name, logger: logger) {
                        results.append(.saved(ZoneState(zoneID: zoneID, changeSequence: existing.changeSequence, incarnation: existing.id)))
                    } else {
                        throw StoreError(.unavailable, "zone \(name) was deleted while it was created; retry")
                    }
                case .delete:
                    guard
                        let existing = try await Self.zoneRow(connection, databaseID: databaseID, zoneName: name, forUpdate: true, logger: logger)
                    else {
                        results.append(.failed(zoneID, .zoneNotFound, "zone \(name) does not exist"))
                        continue
                    }
                    try await Self.deleteZone(connection, zoneRowID: existing.id, databaseID: databaseID, logger: logger)
                    results.append(.deleted(zoneID))
                }
            }
            return results
        }
    }
}
