import CumulusStore
public import Logging
public import PostgresNIO

/// How a sharded store's databases are numbered and which holds each logical shard; made or read by
/// ``prepare(directory:others:logicalShards:logger:)`` before the store serves.
public struct ShardLayout: Sendable, Hashable {
    /// How many logical shards there are.
    public var logicalShards: Int
    /// The database number of each of the other databases, in the order they were given.
    public var numbers: [Int]
    /// Which database holds each logical shard.
    public var map: [Int]

    /// How many logical shards a new sharded deployment has: enough to spread users evenly over tens of databases,
    /// few enough that the map is read in one short statement.
    public static let defaultLogicalShards = 64

    /// The first row id a database numbered `number` gives out: each database counts in a range of its own (2⁴⁰ ids),
    /// so that a shard's rows keep their ids when it moves to another database.
    static func firstID(of number: Int) -> Int64 { Int64(number) << 40 + 1 }

    /// The tables whose ids a database gives out.
    static let tablesWithIDs = ["databases", "zones", "records", "shares", "link_uploads", "record_history"]

    static let lock: Int64 = 0x63_75_6d_73_68_61_72_64

    /// Migrates every database, numbers those seen for the first time, makes the map on the first start, and reads it.
    ///
    /// Safe with several instances starting at once (an advisory lock in the directory). A database seen for the first
    /// time must hold no data: it gets the next free number, and its ids start in that number's range. The first time
    /// the map is made, the shards are dealt round the databases given, unless the directory already holds data (a
    /// deployment that was on one database): then every shard stays in the directory, and the operator moves shards out
    /// one by one (``ShardedPostgresStore/moveShard(_:to:logger:)``).
    ///
    /// - Parameters:
    ///   - directory: Database 0's client, running.
    ///   - others: The other databases' clients, running.
    ///   - logicalShards: The number of logical shards of a new deployment; an existing one keeps its own.
    public static func prepare(directory: PostgresClient, others: [PostgresClient], logicalShards: Int = defaultLogicalShards, logger: Logger)
        async throws -> ShardLayout
    {
        try await PostgresMigrations.migrate(directory, logger: logger)
        for other in others { try await PostgresMigrations.migrate(other, logger: logger) }
        return try await directory.withConnection { connection in
            try await connection.query("SELECT pg_advisory_lock(\(lock))", logger: logger)
            do {
                let layout = try await prepareLocked(directory: connection, others: others, logicalShards: logicalShards, logger: logger)
                try await connection.query("SELECT pg_advisory_unlock(\(lock))", logger: logger)
                return layout
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(lock))", logger: logger)
                throw error
            }
        }
    }

    private static func prepareLocked(directory: PostgresConnection, others: [PostgresClient], logicalShards requested: Int, logger: Logger)
        async throws -> ShardLayout
    {
        var logicalShards = requested
        if let (number, shards) = try await identity(directory, logger: logger) {
            guard number == 0 else {
                throw StoreError(.misconfigured, "the --database given is shard database \(number), not the directory (database 0)")
            }
            logicalShards = shards
        } else {
            try await directory.query("INSERT INTO shard_identity (number, logical_shards) VALUES (0, \(logicalShards))", logger: logger)
            try await directory.query("INSERT INTO shard_databases (number) VALUES (0) ON CONFLICT DO NOTHING", logger: logger)
        }
        var numbers: [Int] = []
        for other in others {
            let number = try await other.withConnection { connection in
                try await register(connection, directory: directory, logicalShards: logicalShards, logger: logger)
            }
            guard !numbers.contains(number) else { throw StoreError(.misconfigured, "shard database \(number) is given twice") }
            numbers.append(number)
        }
        var map = try await readMap(directory, logicalShards: logicalShards, logger: logger)
        if map == nil {
            let holdsData = try await directory.query("SELECT EXISTS (SELECT 1 FROM databases)", logger: logger).decode(Bool.self)
            var existing = false
            for try await value in holdsData { existing = value }
            let holders = existing ? [0] : [0] + numbers
            let made = (0..<logicalShards).map { holders[$0 % holders.count] }
            // Each database owns the shards dealt to it; then the map, in one statement, the step that makes the
            // layout: a start stopped before it deals the same shards again.
            func owned(by number: Int) -> PostgresQuery {
                "INSERT INTO shard_owners (shard, owned) SELECT unnest(\(made.indices.filter { made[$0] == number })), true ON CONFLICT DO NOTHING"
            }
            try await directory.query(owned(by: 0), logger: logger)
            for (client, number) in zip(others, numbers) { try await client.query(owned(by: number), logger: logger) }
            try await directory.query(
                "INSERT INTO shard_map (shard, database_number) SELECT * FROM unnest(\(Array(0..<logicalShards)), \(made))", logger: logger)
            map = made
        }
        guard let map else { throw StoreError(.corrupt, "the shard map is incomplete") }
        for number in Set(map) where number != 0 && !numbers.contains(number) {
            throw StoreError(.misconfigured, "database \(number) holds logical shards but was not given (pass its URL with --shard)")
        }
        return ShardLayout(logicalShards: logicalShards, numbers: numbers, map: map)
    }

    /// A database's number and the deployment's count of logical shards, once it has them.
    static func identity(_ connection: PostgresConnection, logger: Logger) async throws -> (Int, Int)? {
        for try await row in try await connection.query("SELECT number, logical_shards FROM shard_identity", logger: logger).decode((Int, Int).self) {
            return row
        }
        return nil
    }

    /// The database's number; the next free one, with its ids moved into that number's range, the first time.
    private static func register(_ connection: PostgresConnection, directory: PostgresConnection, logicalShards: Int, logger: Logger) async throws
        -> Int
    {
        if let (number, shards) = try await identity(connection, logger: logger) {
            guard number != 0 else { throw StoreError(.misconfigured, "a --shard is the directory (database 0) itself") }
            guard shards == logicalShards else {
                throw StoreError(.misconfigured, "shard database \(number) belongs to a deployment of \(shards) logical shards, not \(logicalShards)")
            }
            return number
        }
        var empty = true
        for try await value in try await connection.query("SELECT NOT EXISTS (SELECT 1 FROM databases)", logger: logger).decode(Bool.self) {
            empty = value
        }
        guard empty else { throw StoreError(.misconfigured, "a --shard database seen for the first time must hold no data") }
        var number = 1
        for try await value in try await directory.query("SELECT COALESCE(max(number), 0) + 1 FROM shard_databases", logger: logger)
            .decode(Int.self)
        {
            number = value
        }
        try await directory.query("INSERT INTO shard_databases (number) VALUES (\(number))", logger: logger)
        try await inTransaction(connection, logger: logger) {
            for table in tablesWithIDs {
                try await connection.query(
                    PostgresQuery(unsafeSQL: "ALTER TABLE \(table) ALTER COLUMN id RESTART WITH \(firstID(of: number))"), logger: logger)
            }
            try await connection.query(
                "INSERT INTO shard_identity (number, logical_shards) VALUES (\(number), \(logicalShards))", logger: logger)
        }
        logger.info("registered a shard database", metadata: ["cumulus.shard.database": "\(number)"])
        return number
    }

    /// The map, when it has a row for every shard.
    static func readMap(_ connection: PostgresConnection, logicalShards: Int, logger: Logger) async throws -> [Int]? {
        try await map(from: connection.query(mapQuery, logger: logger), logicalShards: logicalShards)
    }

    static let mapQuery: PostgresQuery = "SELECT shard, database_number FROM shard_map"

    /// The map in `rows` (of ``mapQuery``), when it has a row for every shard.
    static func map(from rows: PostgresRowSequence, logicalShards: Int) async throws -> [Int]? {
        var map = [Int?](repeating: nil, count: logicalShards)
        for try await (shard, number) in rows.decode((Int, Int).self) where shard < logicalShards { map[shard] = number }
        let complete = map.compactMap { $0 }
        return complete.count == logicalShards ? complete : nil
    }

    /// Runs `body` between `BEGIN` and `COMMIT` on `connection`, rolled back if it throws; its errors as they are
    /// (PostgresNIO's `withTransaction` wraps them).
    static func inTransaction<T: Sendable>(_ connection: PostgresConnection, logger: Logger, _ body: () async throws -> T) async throws -> T {
        try await connection.query("BEGIN", logger: logger)
        do {
            let value = try await body()
            try await connection.query("COMMIT", logger: logger)
            return value
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }
}
