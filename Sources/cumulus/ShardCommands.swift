import ArgumentParser
import CumulusStore
import CumulusStorePostgres
import Logging

/// `cumulus shards`: the logical shards of a store sharded over several PostgreSQL databases.
struct Shards: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List logical shards and move one to another database (PostgreSQL with --shard).", subcommands: [List.self, Move.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the logical shards: shard, database number, users there.")
        @OptionGroup var listing: ListingOptions
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let rows = try await options.withStore { store in
                let sharded = try Shards.sharded(store)
                let logger = Logger(label: "cumulus")
                var users: [Int: Int] = [:]
                for account in try await sharded.allUsers(logger: logger) { users[sharded.shard(of: account), default: 0] += 1 }
                let map = try await sharded.currentMap(logger: logger)
                return map.enumerated().map { shard, number -> [(String, ListingValue)] in
                    [("shard", .text("\(shard)")), ("database", .text("\(number)")), ("users", .text("\(users[shard] ?? 0)"))]
                }
            }
            listing.print(rows)
        }
    }

    struct Move: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: """
                Move a logical shard to another database while instances serve: its writers wait while its rows are \
                copied; run it again if it was interrupted. Prints the rows copied and how long writers waited.
                """)
        @Argument(help: "The logical shard (cumulus shards list).") var shard: Int
        @Option(name: .customLong("to"), help: "The database number to move it to (0 is the directory).") var destination: Int
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let move = try await options.withStore { store in
                try await Shards.sharded(store).moveShard(shard, to: destination, logger: Logger(label: "cumulus"))
            }
            let rows = move.rows.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            printResult(
                "shard \(move.shard): database \(move.from) -> \(move.to); \(rows.isEmpty ? "no rows copied" : rows); writers waited \(move.pause)")
        }
    }

    static func sharded(_ store: any RecordStore) throws -> ShardedPostgresStore {
        guard let sharded = store as? ShardedPostgresStore else {
            throw ValidationError("the store is not sharded: give the directory as --database and each other database with --shard")
        }
        return sharded
    }
}
