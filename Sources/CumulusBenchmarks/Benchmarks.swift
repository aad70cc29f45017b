import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusStoreSQLite
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1

/// Cumulus benchmarks. Run in release mode: `swift run -c release CumulusBenchmarks [--records N] [--concurrency C]`.
///
/// Results are printed as a Markdown table for `docs/BENCHMARKS.md`.
@main
struct Benchmarks {
    static func main() async throws {
        var arguments = CommandLine.arguments.dropFirst()
        var records = 50_000
        var concurrency = 4
        while let argument = arguments.popFirst() {
            switch argument {
            case "--records": records = Int(arguments.popFirst() ?? "") ?? records
            case "--concurrency": concurrency = Int(arguments.popFirst() ?? "") ?? concurrency
            default: fatalError("unknown argument \(argument); use --records N --concurrency C")
            }
        }
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0, metadataProvider: nil) }
        print("| benchmark | records | seconds | records/s | notes |")
        print("|---|---:|---:|---:|---|")
        for clients in Set([1, concurrency]).sorted() {
            try await modifyOverHTTP(records: records, concurrency: clients)
        }
        try directSQLiteInserts(records: records)
    }

    static let batchSize = 200

    /// About 1 KB of fields: a Ghost Car drive with a 900-byte encoded route.
    static func fields(_ index: Int) -> String {
        let route = Data((0..<675).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) }).base64EncodedString()
        return #"{"name":{"value":"Drive \#(index)","type":"STRING"},"startTime":{"value":\#(1_700_000_000_000 + index),"type":"TIMESTAMP"},"#
            + #""duration":{"value":\#(600 + index % 100),"type":"DOUBLE"},"distance":{"value":12400.5,"type":"DOUBLE"},"#
            + #""averageSpeed":{"value":14.2,"type":"DOUBLE"},"maxSpeed":{"value":31.7,"type":"DOUBLE"},"#
            + #""coordinates":{"value":"\#(route)","type":"BYTES"}}"#
    }

    static func temporaryStore() throws -> (SQLiteRecordStore, URL) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("cumulus.sqlite")
        return (try SQLiteRecordStore(path: path.path), directory)
    }

    /// `records/modify` over HTTP on loopback, against the embedded SQLite store on disk.
    static func modifyOverHTTP(records: Int, concurrency: Int) async throws {
        let (store, directory) = try temporaryStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let logger = Logger(label: "bench")
        let accounts = AccountService(store: store)
        let container = "iCloud.com.example.bench"
        try await accounts.createContainer(container, logger: logger)
        let apiToken = try await accounts.createAPIToken(container: container, environment: .development, logger: logger)
        let user = try await accounts.createUser(container: container, name: "bench", password: nil, email: nil, logger: logger)
        let webToken = try await accounts.issueWebAuthToken(for: user, logger: logger)

        var silent = Logger(label: "bench-server")
        silent.logLevel = .warning
        let app = buildApplication(configuration: ServerConfiguration(port: 0), store: store, logger: silent)
        try await app.test(.live) { client in
            let base = "http://127.0.0.1:\(client.port!)/database/1/\(container)/development/private"
            let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)"
            _ = try await post(
                "\(base)/zones/modify?\(query)", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Drives"}}}]}"#)

            let requests = records / batchSize
            let bodies = (0..<requests).map { request in
                let operations = (0..<batchSize).map { offset in
                    let index = request * batchSize + offset
                    return #"{"operationType":"create","record":{"recordName":"drive-\#(index)","recordType":"Drive","fields":\#(fields(index))}}"#
                }
                return #"{"zoneID":{"zoneName":"Drives"},"operations":[\#(operations.joined(separator: ","))]}"#
            }
            let averageBody = bodies.map(\.utf8.count).reduce(0, +) / max(bodies.count, 1)
            let start = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<concurrency {
                    group.addTask {
                        for request in stride(from: worker, to: requests, by: concurrency) {
                            let status = try await post("\(base)/records/modify?\(query)", bodies[request])
                            precondition(status == 200, "records/modify answered \(status)")
                        }
                    }
                }
                try await group.waitForAll()
            }
            let seconds = (ContinuousClock.now - start).seconds
            let total = requests * batchSize
            print(
                "| records/modify over HTTP, \(concurrency) client\(concurrency == 1 ? "" : "s") | \(total) | \(format(seconds)) | "
                    + "\(Int(Double(total) / seconds)) | \(batchSize) creates of ~1 KB per request, \(averageBody / 1024) KB bodies |"
            )
        }
    }

    static func post(_ url: String, _ body: String) async throws -> Int {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        _ = try await response.body.collect(upTo: 64 * 1024 * 1024)
        return Int(response.status.code)
    }

    /// The ceiling: the same rows inserted straight into SQLite with GRDB, 200 per transaction.
    static func directSQLiteInserts(records: Int) throws {
        let (store, directory) = try temporaryStore()
        _ = store
        defer { try? FileManager.default.removeItem(at: directory) }
        let pool = try DatabasePool(path: directory.appendingPathComponent("cumulus.sqlite").path)
        let payloads = (0..<records).map { index in
            Data(RecordFieldsCoding.canonical((try? RecordFieldsCoding.parseCanonical(Array(fields(index).utf8))) ?? [:]))
        }
        try pool.write { db in
            try db.execute(sql: "INSERT INTO containers (id, created_at) VALUES ('c', 0)")
            try db.execute(
                sql: "INSERT INTO databases (id, container_id, environment, scope, owner_record_name) VALUES (1, 'c', 'development', 'private', '_u')"
            )
            try db.execute(sql: "INSERT INTO zones (id, database_id, zone_name, created_at) VALUES (1, 1, 'Drives', 0)")
        }
        let start = ContinuousClock.now
        for batch in stride(from: 0, to: records, by: batchSize) {
            try pool.write { db in
                let statement = try db.cachedStatement(
                    sql: """
                        INSERT INTO records (zone_id, record_name, record_type, change_seq, fields, created_at, created_by, created_device,
                            modified_at, modified_by, modified_device) VALUES (1, ?, 'Drive', ?, ?, 0, '_u', 'd', 0, '_u', 'd')
                        """
                )
                for index in batch..<min(batch + batchSize, records) {
                    try statement.execute(arguments: ["drive-\(index)", index + 1, payloads[index]])
                }
            }
        }
        let seconds = (ContinuousClock.now - start).seconds
        print(
            "| direct SQLite inserts (ceiling) | \(records) | \(format(seconds)) | \(Int(Double(records) / seconds)) | same rows, GRDB prepared statement, 200 per transaction |"
        )
    }

    static func format(_ seconds: Double) -> String { String(format: "%.2f", seconds) }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
