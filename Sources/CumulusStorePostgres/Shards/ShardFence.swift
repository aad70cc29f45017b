import CumulusStore
import Logging
import PostgresNIO

/// The logical shard the running operation works in, when its store is one database of a ``ShardedPostgresStore``.
///
/// Each transaction of such an operation first checks, in its own snapshot, that its database still owns the shard;
/// a writing transaction also locks the shard's row to share, so that a move (which locks it to update) waits for the
/// writers running and holds off new ones until the shard has left. A task-local rather than a parameter: every
/// method of the store would otherwise take a shard it only hands to ``PostgresRecordStore/transaction(snapshot:logger:_:)``.
enum ShardFence {
    @TaskLocal static var shard: Int?

    /// Throws ``ShardNotHere`` unless the connection's database owns `shard`; with `lock`, holds the shard's row
    /// against a move until the transaction ends.
    static func check(_ shard: Int, _ connection: PostgresConnection, lock: Bool, logger: Logger) async throws {
        let rows = try await connection.query(
            lock
                ? "SELECT owned FROM shard_owners WHERE shard = \(shard) FOR KEY SHARE"
                : "SELECT owned FROM shard_owners WHERE shard = \(shard)", logger: logger)
        var owned = false
        for try await value in rows.decode(Bool.self) { owned = value }
        guard owned else { throw ShardNotHere(shard: shard) }
    }
}

/// The database an operation went to does not hold its shard (any more): the shard moved, and the sharded store
/// reads the map again and goes where it is now.
struct ShardNotHere: Error, CustomStringConvertible {
    var shard: Int
    var description: String { "logical shard \(shard) is not in this database" }
}
