import CumulusStore
import Foundation
public import Logging
import PostgresNIO

/// What ``ShardedPostgresStore/moveShard(_:to:logger:)`` did.
public struct ShardMove: Sendable, Hashable {
    public var shard: Int
    public var from: Int
    public var to: Int
    /// Rows copied, by table.
    public var rows: [String: Int]
    /// How long the shard's writers waited: from the lock in the database it left to that database's commit.
    public var pause: Duration
}

extension ShardedPostgresStore {
    /// The tables a shard's rows are in, in the order they are copied (a row after those it refers to), with what
    /// picks the shard's rows: `$1` is the ids of its users' databases, `$2` the users.
    static let shardTables: [(table: String, rows: String)] = {
        let zones = "zone_id IN (SELECT id FROM zones WHERE database_id = ANY($1))"
        return [
            ("databases", "id = ANY($1)"),
            ("zones", "database_id = ANY($1)"),
            ("records", zones),
            ("record_references", zones),
            ("shares", zones),
            ("share_participants", "share_id IN (SELECT s.id FROM shares s JOIN zones z ON z.id = s.zone_id WHERE z.database_id = ANY($1))"),
            ("share_exits", zones),
            ("participant_changes", zones),
            ("record_history", zones),
            ("shared_zone_views", zones),
            ("asset_uploads", "owner_record_name = ANY($2)"),
        ]
    }()

    /// Moves logical shard `shard` to database `destination`, with every instance serving.
    ///
    /// 1. In the database the shard leaves, its row in `shard_owners` is locked to update: writers of the shard
    ///    running finish first, and new ones wait. Reads go on, and see no change, since nothing changes.
    /// 2. Its rows are read there and written into the destination in one transaction (replacing what an interrupted
    ///    move left), which does not own the shard yet. Participants' views of the moved zones take new positions in
    ///    the destination's count, so their shared databases list them again from there.
    /// 3. The database it leaves deletes them and marks the shard gone, in the transaction that took the lock: the
    ///    waiting writers find the shard gone, read the map, and wait for it to name the destination.
    /// 4. The map names the destination; 5. the destination owns the shard.
    ///
    /// Stopped after step 3 (or 4), the shard is in no database and its operations wait, then are answered "try again
    /// later": run the same move again, and it finishes steps 4 and 5. Stopped before, nothing changed.
    public func moveShard(_ shard: Int, to destination: Int, logger: Logger) async throws -> ShardMove {
        do {
            return try await move(shard, to: destination, logger: logger)
        } catch let error as PSQLError {
            throw PostgresRecordStore.storeError(error)
        }
    }

    private func move(_ shard: Int, to destination: Int, logger: Logger) async throws -> ShardMove {
        guard (0..<logicalShards).contains(shard) else { throw StoreError(.invalidValue, "there is no logical shard \(shard)") }
        guard let target = databases[destination] else {
            throw StoreError(.invalidValue, "there is no database \(destination) (databases: \(databases.keys.sorted()))")
        }
        let source = try await reloadMap(logger: logger)[shard]
        guard let from = databases[source] else { throw StoreError(.misconfigured, "logical shard \(shard) is in database \(source), not given") }
        guard source != destination else {
            // Stopped between the map and the owner row: the map names the destination, which does not own it yet.
            if try await ownerRow(target, shard, logger: logger) == false { try await finishMove(shard, to: destination, target, logger: logger) }
            return ShardMove(shard: shard, from: source, to: destination, rows: [:], pause: .zero)
        }
        if try await ownerRow(from, shard, logger: logger) != true {
            // An interrupted move: the rows left the source, and are in the destination it was moving to.
            guard try await ownerRow(target, shard, logger: logger) != nil else {
                throw StoreError(.invalidState, "logical shard \(shard) left database \(source) for another database than \(destination)")
            }
            try await finishMove(shard, to: destination, target, logger: logger)
            return ShardMove(shard: shard, from: source, to: destination, rows: [:], pause: .zero)
        }
        try await copyCatalog(into: target, logger: logger)
        let logicalShards = self.logicalShards
        let tables = Self.shardTables
        let (rows, pause) = try await from.client.withConnection { connection -> ([String: Int], Duration) in
            let started = ContinuousClock.now
            let counts = try await ShardLayout.inTransaction(connection, logger: logger) {
                var owned = false
                for try await value in try await connection.query(
                    "SELECT owned FROM shard_owners WHERE shard = \(shard) FOR UPDATE", logger: logger
                ).decode(Bool.self) {
                    owned = value
                }
                guard owned else { throw StoreError(.invalidState, "logical shard \(shard) left database \(source) meanwhile") }
                var owners: [String] = []
                for try await owner in try await connection.query("SELECT DISTINCT owner_record_name FROM databases", logger: logger).decode(
                    String.self)
                where Self.shard(of: owner, logicalShards: logicalShards) == shard {
                    owners.append(owner)
                }
                var databaseIDs: [Int64] = []
                for try await id in try await connection.query("SELECT id FROM databases WHERE owner_record_name = ANY(\(owners))", logger: logger)
                    .decode(Int64.self)
                {
                    databaseIDs.append(id)
                }
                var copies: [(table: String, json: String)] = []
                var counts: [String: Int] = [:]
                for (table, picked) in tables {
                    // Receipts are completed outside any shard's lock: locked here, so no completion is lost.
                    let lock = table == "asset_uploads" ? " FOR UPDATE" : ""
                    var query = PostgresQuery(
                        unsafeSQL: """
                            SELECT count(*), coalesce(json_agg(t), '[]')::text FROM (SELECT * FROM \(table) WHERE \(picked)\(lock)) t
                            """)
                    query.binds.append(databaseIDs)
                    query.binds.append(owners)
                    for try await (count, json) in try await connection.query(query, logger: logger).decode((Int, String).self) {
                        copies.append((table, json))
                        counts[table] = count
                    }
                }
                try await self.writeCopy(copies, owners: owners, shard: shard, into: target, logger: logger)
                // The rows are in the destination: they leave here, with the shard.
                var delete = PostgresQuery(
                    unsafeSQL: "DELETE FROM shared_zone_views WHERE zone_id IN (SELECT id FROM zones WHERE database_id = ANY($1))")
                delete.binds.append(databaseIDs)
                try await connection.query(delete, logger: logger)
                try await connection.query("DELETE FROM asset_uploads WHERE owner_record_name = ANY(\(owners))", logger: logger)
                try await connection.query("DELETE FROM databases WHERE id = ANY(\(databaseIDs))", logger: logger)
                try await connection.query("UPDATE shard_owners SET owned = false WHERE shard = \(shard)", logger: logger)
                return counts
            }
            return (counts, ContinuousClock.now - started)
        }
        try await finishMove(shard, to: destination, target, logger: logger)
        logger.info(
            "moved a logical shard",
            metadata: [
                "cumulus.shard": "\(shard)", "cumulus.shard.from": "\(source)", "cumulus.shard.to": "\(destination)",
                "cumulus.shard.records": "\(rows["records"] ?? 0)", "cumulus.shard.pause": "\(pause)",
            ])
        return ShardMove(shard: shard, from: source, to: destination, rows: rows, pause: pause)
    }

    /// Steps 4 and 5: the map names the destination, and the destination owns the shard.
    private func finishMove(_ shard: Int, to destination: Int, _ target: PostgresRecordStore, logger: Logger) async throws {
        try await directory.query("UPDATE shard_map SET database_number = \(destination) WHERE shard = \(shard)", logger: logger)
        try await target.query("UPDATE shard_owners SET owned = true WHERE shard = \(shard)", logger: logger)
        try await reloadMap(logger: logger)
    }

    /// Step 2: the shard's rows into the destination, in one transaction, which does not own the shard yet.
    private func writeCopy(_ copies: [(table: String, json: String)], owners: [String], shard: Int, into target: PostgresRecordStore, logger: Logger)
        async throws
    {
        try await target.client.withConnection { connection in
            try await ShardLayout.inTransaction(connection, logger: logger) {
                try await connection.query(
                    "INSERT INTO shard_owners (shard, owned) VALUES (\(shard), false) ON CONFLICT (shard) DO UPDATE SET owned = false", logger: logger
                )
                // What an interrupted move left here goes first.
                try await connection.query(
                    """
                    DELETE FROM shared_zone_views WHERE zone_id IN (
                        SELECT z.id FROM zones z JOIN databases d ON d.id = z.database_id WHERE d.owner_record_name = ANY(\(owners)))
                    """, logger: logger)
                try await connection.query("DELETE FROM asset_uploads WHERE owner_record_name = ANY(\(owners))", logger: logger)
                try await connection.query("DELETE FROM databases WHERE owner_record_name = ANY(\(owners))", logger: logger)
                for (table, json) in copies {
                    var insert = PostgresQuery(
                        unsafeSQL: "INSERT INTO \(table) OVERRIDING SYSTEM VALUE SELECT * FROM json_populate_recordset(NULL::\(table), $1::json)")
                    insert.binds.append(json)
                    try await connection.query(insert, logger: logger)
                }
                // Participants' views take new positions in this database's count: their shared databases list the
                // zones again from here (their positions here are all older), as they stopped listing them there.
                try await connection.query(
                    """
                    WITH moved AS (
                        SELECT v.zone_id FROM shared_zone_views v JOIN zones z ON z.id = v.zone_id JOIN databases d ON d.id = z.database_id
                        WHERE d.owner_record_name = ANY(\(owners))
                    ),
                    viewers AS (
                        SELECT DISTINCT user_record_name FROM shared_zone_views WHERE zone_id IN (SELECT zone_id FROM moved) ORDER BY 1
                    ),
                    bumped AS (
                        INSERT INTO shared_databases (user_record_name, change_seq) SELECT user_record_name, 1 FROM viewers
                        ON CONFLICT (user_record_name) DO UPDATE SET change_seq = shared_databases.change_seq + 1
                        RETURNING user_record_name, change_seq
                    )
                    UPDATE shared_zone_views v SET view_seq = b.change_seq FROM bumped b
                    WHERE v.user_record_name = b.user_record_name AND v.zone_id IN (SELECT zone_id FROM moved)
                    """, logger: logger)
            }
        }
    }

    /// The containers and schemas the directory has and `target` lacks: the rows a shard's rows refer to, and the
    /// fields its queries index. (A sharded store writes them to every database; a database added to a deployment
    /// that ran on one database has none of the earlier ones.)
    func copyCatalog(into target: PostgresRecordStore, logger: Logger) async throws {
        for table in ["containers", "schema_record_types", "schema_fields"] {
            var json = "[]"
            for try await rows in try await directory.query(
                PostgresQuery(unsafeSQL: "SELECT coalesce(json_agg(t), '[]')::text FROM \(table) t"), logger: logger
            ).decode(String.self) {
                json = rows
            }
            var insert = PostgresQuery(
                unsafeSQL: "INSERT INTO \(table) SELECT * FROM json_populate_recordset(NULL::\(table), $1::json) ON CONFLICT DO NOTHING")
            insert.binds.append(json)
            try await target.query(insert, logger: logger)
        }
    }

    /// A database's row for a shard: whether it owns it, or `nil` when it never held it.
    func ownerRow(_ store: PostgresRecordStore, _ shard: Int, logger: Logger) async throws -> Bool? {
        for try await owned in try await store.query("SELECT owned FROM shard_owners WHERE shard = \(shard)", logger: logger).decode(Bool.self) {
            return owned
        }
        return nil
    }
}
