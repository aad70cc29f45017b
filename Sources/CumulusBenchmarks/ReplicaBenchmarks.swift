import AsyncHTTPClient
import CumulusCore
import CumulusStorePostgres
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO

/// Feed pages through an instance reading the primary, then through one whose reads a streaming replica serves (issue
/// 38): pages a second, and the CPU each PostgreSQL server (every process of its cluster, read from `/proc`) and the
/// instance spend a page. On one machine the primary, the replica and the instance share the cores, so what moves is
/// where the work is done, more than how many pages a second there are.
extension Benchmarks {
    static func replicas(records: Int, primary: PostgresLocation, replica: PostgresLocation) async throws {
        let (store, cleanUp, location) = try await BenchStore.postgres(primary).makeLocated()
        defer { cleanUp() }
        let (container, apiToken, webToken) = try await benchAccount(store)
        guard let writer = try ServerProcess.startDeployed(store: location) else {
            throw BenchmarkError("build cumulus beside the benchmark: swift build -c release --product cumulus")
        }
        defer { writer.stop() }
        let http = Self.manyConnections
        @Sendable func post(_ server: ServerProcess, _ path: String, _ body: String, as user: String = webToken) async throws -> ByteBuffer {
            try await Self.post(
                "\(server.url)/database/1/\(container)/development/private/\(path)?ckAPIToken=\(apiToken)&ckWebAuthToken=\(user)", body, with: http)
        }
        _ = try await post(writer, "zones/modify", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Drives"}}}]}"#)
        for batch in stride(from: 0, to: records, by: batchSize) {
            let operations = (batch..<min(batch + batchSize, records)).map { index in
                #"{"operationType":"create","record":{"recordName":"drive-\#(index)","recordType":"Drive","fields":\#(fields(index))}}"#
            }
            _ = try await post(
                writer, "records/modify", #"{"zoneID":{"zoneName":"Drives"},"desiredKeys":[],"operations":[\#(operations.joined(separator: ","))]}"#)
        }
        // Statistics as autovacuum leaves them within a minute of a bulk load: without them the planner reads the whole
        // remaining feed for each page (a bitmap scan and a sort) instead of walking the feed's index.
        try await BenchStore.onServer(try PostgresLocation(url: location)) { client in
            _ = try await client.query("ANALYZE records", logger: Logger(label: "bench"))
        }
        var replicated = replica
        replicated.database = try PostgresLocation(url: location).database
        // The replica has the database once it has replayed its creation.
        let deadline = ContinuousClock.now + .seconds(120)
        while (try? await replicated.check(logger: Logger(label: "bench"))) == nil {
            guard ContinuousClock.now < deadline else { throw BenchmarkError("the replica never had \(replicated.database)") }
            try await Task.sleep(for: .milliseconds(200))
        }
        let url = "postgres://\(replicated.username):\(replicated.password ?? "")@\(replicated.host):\(replicated.port)/\(replicated.database)"
        guard
            let reader = try ServerProcess.startDeployed(
                store: location, arguments: ["--read-replica", url + (replicated.tls == .disable ? "?sslmode=disable" : "")])
        else { throw BenchmarkError("cumulus did not start") }
        defer { reader.stop() }
        // In service within a probe or two.
        try await Task.sleep(for: .seconds(3))

        // Writes: sixteen users at once, through two instances; the replica replays them.
        try await writesThroughTwoInstances(
            "read replicas: single-record writes, 16 users through two instances on one primary", store: store, location: location,
            arguments: ["--read-replica", url + (replicated.tls == .disable ? "?sslmode=disable" : "")], servers: [primary, replica],
            account: (container, apiToken))

        let readers = 4
        for (label, server) in [("the primary serves reads", writer), ("a streaming replica serves reads", reader)] {
            // Warm: one pass each, so neither measures a cold cache.
            _ = try await feedPass(server) { try await post($0, $1, $2) }
            let (primaryBefore, replicaBefore) = (PostgresCluster.cpuSeconds(port: primary.port), PostgresCluster.cpuSeconds(port: replica.port))
            let serverBefore = server.cpuSeconds
            let start = ContinuousClock.now
            let pages = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<readers { group.addTask { try await feedPass(server) { try await post($0, $1, $2) } } }
                return try await group.reduce(0, +)
            }
            let seconds = (ContinuousClock.now - start).seconds
            func perPage(_ before: Double?, _ after: Double?) -> String {
                guard let before, let after else { return "n/a" }
                return String(format: "%.2f ms", (after - before) * 1000 / Double(pages))
            }
            print(
                "| read replicas: feed pages of 200, \(readers) readers, \(label) | \(pages * 200) | \(format(seconds)) | "
                    + "\(Int(Double(pages) / seconds)) pages/s | CPU a page: primary \(perPage(primaryBefore, PostgresCluster.cpuSeconds(port: primary.port))), "
                    + "replica \(perPage(replicaBefore, PostgresCluster.cpuSeconds(port: replica.port))), "
                    + "instance \(String(format: "%.2f ms", (server.cpuSeconds - serverBefore) * 1000 / Double(pages))) |")
        }
    }

    /// The zone's whole feed from a zero token, pages of 200; how many pages it took.
    private static func feedPass(
        _ server: ServerProcess, post: @Sendable (ServerProcess, String, String) async throws -> ByteBuffer
    ) async throws -> Int {
        var token: String?
        var pages = 0
        while true {
            let tokenJSON = token.map { #","syncToken":"\#($0)""# } ?? ""
            let page = try await post(server, "changes/zone", #"{"zones":[{"zoneID":{"zoneName":"Drives"},"resultsLimit":200\#(tokenJSON)}]}"#)
            pages += 1
            let scanned = scanFeedPage(page)
            token = scanned.syncToken
            if !scanned.moreComing { return pages }
        }
    }
}

/// The CPU of a local PostgreSQL cluster: its postmaster and every process it started (backends, WAL sender and
/// receiver, startup process), found through the data directory's `postmaster.pid`.
enum PostgresCluster {
    /// User and system CPU, in seconds, of the cluster listening on `port`; `nil` when it cannot be read (not local, or
    /// not root).
    static func cpuSeconds(port: Int) -> Double? {
        guard let postmaster = postmaster(port: port), let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else {
            return nil
        }
        var ticks = 0.0
        for entry in entries where Int32(entry) != nil {
            guard let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8), let afterName = stat.range(of: ") ") else {
                continue
            }
            let fields = stat[afterName.upperBound...].split(separator: " ")
            // After the name: the parent is field 4, utime and stime fields 14 and 15.
            guard fields.count > 12, entry == "\(postmaster)" || fields[1] == "\(postmaster)" else { continue }
            ticks += (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        }
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    private static func postmaster(port: Int) -> Int32? {
        guard let pidFiles = try? FileManager.default.contentsOfDirectory(atPath: "/var/run/postgresql") else { return nil }
        for file in pidFiles where file.hasSuffix(".pid") {
            guard let text = try? String(contentsOfFile: "/var/run/postgresql/\(file)", encoding: .utf8),
                let pid = Int32(text.split(separator: "\n").first ?? ""),
                let dataDirectory = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd"),
                let lines = try? String(contentsOfFile: "\(dataDirectory)/postmaster.pid", encoding: .utf8).split(separator: "\n"),
                lines.count > 3, Int(lines[3]) == port
            else { continue }
            return pid
        }
        return nil
    }
}
