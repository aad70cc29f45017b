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

    /// A read-only snapshot (as `transaction(snapshot: true)`), served by a read replica when one is in service and
    /// has replayed everything the primary had written when the read began, else by the primary: a read never sees an
    /// older state than a primary read would (``PostgresReadReplicas``).
    func read<T: Sendable>(logger: Logger, _ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        guard let replicas else { return try await transaction(snapshot: true, logger: logger, body) }
        if let replica = replicas.next() {
            // Where the primary stands now: every write acknowledged before this read is at or before it. Read with
            // the store's own bounds (a deadline on an event loop, no task of its own).
            var target = WALPosition.start
            for try await text in try await query("SELECT pg_current_wal_flush_lsn()::text", logger: logger).decode(String.self) {
                target = WALPosition(text) ?? .start
            }
            do {
                if try await replicas.waitForReplay(replica, upTo: target) {
                    let value = try await transactionOnce(
                        on: replica.client, connectionWait: replicas.connectionWait, snapshot: true, logger: logger, body)
                    replicas.served(by: replica)
                    return value
                }
                replicas.takeOutOfService(replica, reason: "lagging: had not replayed the primary's position within \(replicas.wait)")
            } catch let error as StoreError where error.code == .unavailable {
                // The replica's failure, not the read's: the primary serves it.
                replicas.takeOutOfService(replica, reason: "unreachable")
            }
        }
        replicas.served(by: nil)
        return try await transaction(snapshot: true, logger: logger, body)
    }

    private func transactionOnce<T: Sendable>(
        on client: PostgresClient? = nil, connectionWait: Duration? = nil, snapshot: Bool, logger: Logger,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        do {
            let (client, lostConnections) = (client ?? self.client, self.lostConnections)
            return try await metrics.measure(.transaction) {
                try await withConnectionWait(wait: connectionWait) { leased in
                    try await client.withConnection { connection in
                        leased(connection)
                        defer { lostConnections.forget(connection) }
                        return try await withTaskExecutorPreference(ConnectionLoopExecutor(connection.eventLoop)) {
                            // BEGIN with its isolation in one statement: a round trip fewer than BEGIN then SET TRANSACTION.
                            if snapshot {
                                try await connection.run(BeginSnapshot.self, logger: logger)
                            } else {
                                try await connection.run(Begin.self, logger: logger)
                            }
                            do {
                                if let shard = ShardFence.shard {
                                    try await ShardFence.check(shard, connection, lock: !snapshot, logger: logger)
                                }
                                let value = try await body(connection)
                                try await connection.run(Commit.self, logger: logger)
                                return value
                            } catch {
                                _ = try? await connection.query("ROLLBACK", logger: logger)
                                throw error
                            }
                        }
                    }
                }
            }
        } catch let error as StoreError {
            throw error
        } catch let error as ShardNotHere {
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

    /// A transaction's first and last statements, prepared once per connection as every write's are.
    private enum Begin: PostgresPreparedText {
        static let name = "cumulus_begin"
        static let sql = "BEGIN"
    }

    private enum BeginSnapshot: PostgresPreparedText {
        static let name = "cumulus_begin_snapshot"
        static let sql = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
    }

    private enum Commit: PostgresPreparedText {
        static let name = "cumulus_commit"
        static let sql = "COMMIT"
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
        let bindings = zoneBindings(database, zoneName: zoneName)
        let rows =
            if forUpdate {
                try await connection.run(ZoneInDatabaseLocked.self, bindings, logger: logger)
            } else {
                try await connection.run(ZoneInDatabase.self, bindings, logger: logger)
            }
        for try await row in rows {
            let (id, sequence, databaseID) = try row.decode((Int64, Int64, Int64).self)
            return (id, sequence, databaseID)
        }
        return nil
    }

    /// A zone's parameters, `$1` to `$5`: its database by the database's four names, then the zone's name.
    static func zoneBindings(_ database: DatabaseRef, zoneName: String) -> PostgresBindings {
        var bindings = PostgresBindings()
        for text in [database.container, database.environment.rawValue, database.scope.rawValue, database.ownerRecordName, zoneName] {
            bindings.append(text)
        }
        return bindings
    }

    /// ``zoneRow(_:_:zoneName:forUpdate:logger:)``'s statement, on the path of every feed page and lookup; its
    /// parameters are ``zoneBindings(_:zoneName:)``.
    private enum ZoneInDatabase: PostgresPreparedText {
        static let name = "cumulus_zone_in_database"
        static let sql = """
            SELECT z.id, z.change_seq, d.id FROM zones z JOIN databases d ON d.id = z.database_id
            WHERE d.container_id = $1 AND d.environment = $2 AND d.scope = $3 AND d.owner_record_name = $4
            AND z.zone_name = $5 AND NOT z.deleted
            """
    }

    private enum ZoneInDatabaseLocked: PostgresPreparedText {
        static let name = "cumulus_zone_in_database_locked"
        static let sql = ZoneInDatabase.sql + " FOR UPDATE OF z"
    }

    public func zones(in database: DatabaseRef, logger: Logger) async throws -> [ZoneState] {
        try await read(logger: logger) { connection in
            guard let databaseID = try await Self.databaseID(connection, database, logger: logger) else {
                return [ZoneState.unwrittenDefaultZone(of: database)]
            }
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
        try await read(logger: logger) { connection in
            guard let databaseID = try await Self.databaseID(connection, database, logger: logger) else {
                return names.contains(ZoneID.defaultZoneName) ? [ZoneID.defaultZoneName: ZoneState.unwrittenDefaultZone(of: database)] : [:]
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
        _ operations: [ZoneOperation], in database: DatabaseRef, timestamp: Int64, maximumZones: Int, logger: Logger
    ) async throws -> [ZoneModificationResult] {
        try await transaction(logger: logger) { connection in
            try await Self.run(
                ZoneScripts.modify(operations, in: database, timestamp: timestamp, maximumZones: maximumZones), connection, logger: logger)
        }
    }
}
