import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusStore
import CumulusStorePostgres
import Foundation
import Logging
import NIOCore
import PostgresNIO

/// Writes through two instances on one primary, then through two instances over two primaries, users spread over them
/// by logical shard (issue 38): writes a second, and the CPU each PostgreSQL server and the instances spend a write.
/// On one machine both servers and both instances share the cores, so the figure to read is where the work goes.
extension Benchmarks {
    static func shards(first: PostgresLocation, second: PostgresLocation) async throws {
        let logger = Logger(label: "bench")
        // One primary.
        let (single, cleanUpSingle, singleURL) = try await BenchStore.postgres(first).makeLocated()
        defer { cleanUpSingle() }
        try await writesThroughTwoInstances(
            "shards: single-record writes, 16 users through two instances on one primary", store: single, location: singleURL, arguments: [],
            servers: [first])

        // Two primaries: the directory on the first server, one more database on the second; 64 logical shards dealt
        // round the two.
        let (directory, cleanUpDirectory, directoryURL) = try await BenchStore.postgres(first).makeLocated()
        defer { cleanUpDirectory() }
        let (shard, cleanUpShard, shardURL) = try await BenchStore.postgres(second).makeLocated()
        defer { cleanUpShard() }
        guard let directoryStore = directory as? PostgresRecordStore, let shardStore = shard as? PostgresRecordStore else {
            throw BenchmarkError("--only shards needs PostgreSQL")
        }
        let sharded = try await ShardedPostgresStore.prepare(directory: directoryStore, others: [shardStore], logger: logger)
        try await writesThroughTwoInstances(
            "shards: single-record writes, 16 users through two instances over two primaries (two shards)", store: sharded,
            location: directoryURL, arguments: ["--shard", shardURL], servers: [first, second])

        // A move: one user with 20,000 records (and the 16 writers' 3,200) in a shard; how long its writers wait.
        let accounts = AccountService(store: sharded)
        let mover = try await accounts.createUser(
            container: "iCloud.com.example.bench", name: "mover", password: nil, email: nil, logger: logger)
        let database = DatabaseRef(
            container: "iCloud.com.example.bench", environment: .development, scope: .private, ownerRecordName: mover.userRecordName)
        for batch in stride(from: 0, to: 20_000, by: batchSize) {
            let operations = (batch..<batch + batchSize).map {
                RecordModification(operationType: .create, recordName: "drive-\($0)", recordType: "Drive", fields: ["distance": .double(Double($0))])
            }
            _ = try await sharded.modifyRecords(
                RecordBatch(
                    database: database, zoneName: ZoneID.defaultZoneName, atomic: false, operations: operations, author: mover.userRecordName,
                    deviceID: "bench", timestamp: 1), logger: logger)
        }
        let shardNumber = sharded.shard(of: mover.userRecordName)
        let home = sharded.databaseNumber(holding: shardNumber)
        let started = ContinuousClock.now
        let move = try await sharded.moveShard(shardNumber, to: home == 0 ? 1 : 0, logger: logger)
        let rows = move.rows.values.reduce(0, +)
        print(
            "| shards: moving a logical shard between servers (\(move.rows["records"] ?? 0) records) | \(rows) rows | "
                + "\(format((ContinuousClock.now - started).seconds)) | \(Int(Double(rows) / move.pause.seconds)) rows/s | "
                + "its writers waited \(format(move.pause.seconds)) s; other shards not touched |")
    }

    /// Sixteen users write 200 small records each, one a request, half through each of two `cumulus serve` instances
    /// started with `arguments`; prints writes a second and the CPU a write of each server and of the instances.
    ///
    /// - Parameter account: The container and API token to use; by default, made.
    static func writesThroughTwoInstances(
        _ label: String, store: any RecordStore, location: String, arguments: [String], servers: [PostgresLocation],
        account: (container: String, apiToken: String)? = nil, perWriter: Int = 200
    ) async throws {
        let logger = Logger(label: "bench")
        let made = account == nil ? try await benchAccount(store) : nil
        let (container, apiToken) = account ?? (made!.container, made!.apiToken)
        let accounts = AccountService(store: store)
        var writers: [String] = []
        for index in 0..<16 {
            let user = try await accounts.createUser(container: container, name: "writer\(index)", password: nil, email: nil, logger: logger)
            writers.append(try await accounts.issueWebAuthToken(for: user, logger: logger))
        }
        guard let one = try ServerProcess.startDeployed(store: location, arguments: arguments),
            let two = try ServerProcess.startDeployed(store: location, arguments: arguments)
        else { throw BenchmarkError("build cumulus beside the benchmark: swift build -c release --product cumulus") }
        defer {
            one.stop()
            two.stop()
        }
        let http = Self.manyConnections
        @Sendable func post(_ server: ServerProcess, _ path: String, _ body: String, as user: String) async throws {
            _ = try await Self.post(
                "\(server.url)/database/1/\(container)/development/private/\(path)?ckAPIToken=\(apiToken)&ckWebAuthToken=\(user)", body, with: http)
        }
        let zone = #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Drives"}}}]}"#
        for (index, user) in writers.enumerated() { try await post(index % 2 == 0 ? one : two, "zones/modify", zone, as: user) }
        let serversBefore = servers.map { PostgresCluster.cpuSeconds(port: $0.port) }
        let instancesBefore = one.cpuSeconds + two.cpuSeconds
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, user) in writers.enumerated() {
                let server = index % 2 == 0 ? one : two
                group.addTask {
                    for write in 0..<perWriter { try await post(server, "records/modify", singleWrite("single-\(write)"), as: user) }
                }
            }
            try await group.waitForAll()
        }
        let seconds = (ContinuousClock.now - start).seconds
        let writes = Double(writers.count * perWriter)
        let perServer = zip(servers, serversBefore).map { server, before -> String in
            guard let before, let after = PostgresCluster.cpuSeconds(port: server.port) else { return "port \(server.port) n/a" }
            return String(format: "port \(server.port) %.2f ms", (after - before) * 1000 / writes)
        }
        print(
            "| \(label) | \(Int(writes)) | \(format(seconds)) | \(Int(writes / seconds)) writes/s | CPU a write: PostgreSQL "
                + "\(perServer.joined(separator: ", ")); instances "
                + "\(String(format: "%.2f ms", (one.cpuSeconds + two.cpuSeconds - instancesBefore) * 1000 / writes)) |")
    }
}
