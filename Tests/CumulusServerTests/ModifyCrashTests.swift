import AsyncHTTPClient
import CumulusModel
import CumulusStore
import CumulusStorePostgres
import CumulusStoreSQLite
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import Testing

/// `cumulus serve` killed (SIGKILL) while it writes batches that save records holding uploaded assets and start
/// shares: after a restart every batch is whole or absent (its records, its share and participants, the root's
/// reference to it, its asset attached), and every acknowledged one is whole.
@Suite("A killed server leaves every records/modify whole or absent", .serialized, .timeLimit(.minutes(10)))
struct ModifyCrashTests {
    static let container = "iCloud.com.example.crash"

    /// Where a trial's server keeps its data, and how the test opens the same store afterwards.
    struct Location: Sendable, CustomTestStringConvertible {
        var name: String
        var testDescription: String { name }
        var arguments: @Sendable () async throws -> [String]

        static let sqlite = Location(name: "SQLite file") {
            let directory = URL(fileURLWithPath: try TestFiles.fresh("data")).path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            return ["--data", directory]
        }
        static let postgres = Location(name: "PostgreSQL") {
            let location = try await TestStore.makePostgresDatabase()
            let server = try #require(TestStore.postgresURL)
            var components = try #require(URLComponents(string: server))
            components.path = "/" + location.database
            return ["--database", try #require(components.string)]
        }
        static let all: [Location] = [.sqlite] + (TestStore.postgresURL == nil ? [] : [.postgres])
    }

    /// One batch: a list, an item under it holding an uploaded photo, and a share of the list with Bob.
    struct Batch: Sendable {
        var index: Int
        var receipt: String
        var acknowledged: Bool
        var list: String { "list-\(index)" }
        var item: String { "item-\(index)" }
        var share: String { "share-\(index)" }
    }

    static func post(_ url: String, _ body: String) async throws -> (Int, JSONValue) {
        try await ServeProcessTests.post(url, body, timeout: .seconds(30))
    }

    /// Uploads a photo for `item-<index>` and saves the batch; `acknowledged` when the server answered every operation.
    static func write(_ index: Int, server: ServeProcessTests.Server, query: String, modifying: PostgresOutageTests.Shared<Int>) async throws
        -> Batch?
    {
        let base = "\(server.url)/database/1/\(container)/development/private"
        let (_, tokens) = try await post(
            "\(base)/assets/upload?\(query)",
            #"{"zoneID":{"zoneName":"Crash"},"tokens":[{"recordName":"item-\#(index)","recordType":"Item","fieldName":"photo"}]}"#)
        guard let url = tokens["tokens"]?[0]?["url"]?.stringValue else { return nil }
        var upload = HTTPClientRequest(url: url)
        upload.method = .POST
        upload.body = .bytes(ByteBuffer(string: "photo \(index)"))
        let uploaded = try await HTTPClient.shared.execute(upload, timeout: .seconds(30))
        let answer = try JSONValue(parsing: Array(try await uploaded.body.collect(upTo: 1 << 20).readableBytesView))
        guard let singleFile = answer["singleFile"], let receipt = singleFile["receipt"]?.stringValue else { return nil }
        var batch = Batch(index: index, receipt: receipt, acknowledged: false)
        let photo = String(decoding: singleFile.jsonBytes, as: UTF8.self)
        let body = #"""
            {"zoneID":{"zoneName":"Crash"},"operations":[
            {"operationType":"create","record":{"recordName":"\#(batch.list)","recordType":"List","fields":{"name":{"value":"List \#(index)"}}}},
            {"operationType":"create","record":{"recordName":"\#(batch.item)","recordType":"Item","parent":{"recordName":"\#(batch.list)"},"fields":{"photo":{"type":"ASSETID","value":\#(photo)}}}},
            \#(shareOperation(name: batch.share, root: batch.list, participants: [("bob@example.com", "READ_ONLY")]))
            ]}
            """#
        modifying.withLock { $0 += 1 }
        defer { modifying.withLock { $0 -= 1 } }
        do {
            let (status, saved) = try await post("\(base)/records/modify?\(query)", body)
            let records = saved["records"]?.arrayValue ?? []
            batch.acknowledged = status == 200 && records.count == 3 && records.allSatisfy { $0["serverErrorCode"] == nil }
        } catch {
            // Cut off by the kill: its outcome is what the check finds.
        }
        return batch
    }

    @Test(arguments: Location.all) func everyBatchIsWholeOrAbsentAfterAKill(_ store: Location) async throws {
        let arguments = try await store.arguments()
        func run(_ command: [String]) async throws -> String {
            let result = try await ServeProcessTests.run(command + arguments)
            #expect(result.status == 0, "\(command): \(result.stderr)")
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        _ = try await run(["containers", "create", Self.container, "--create"])
        let apiToken = try await run(["tokens", "create", "--container", Self.container])
        for name in ["alice", "bob"] {
            _ = try await run(["users", "create", name, "--container", Self.container, "--email", "\(name)@example.com"])
        }
        let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(try await run(["users", "token", "alice", "--container", Self.container]))"

        var server = try await ServeProcessTests.Server.start(arguments: arguments)
        let (zoneStatus, _) = try await Self.post(
            "\(server.url)/database/1/\(Self.container)/development/private/zones/modify?\(query)",
            #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Crash"}}}]}"#)
        #expect(zoneStatus == 200)

        // Three kills, each while a batch is being saved; a kill that found none (a loaded machine can leave both
        // writers between requests) is tried again, up to eight kills in all.
        var batches: [Batch] = []
        var cutOff = 0
        for trial in 0..<8 where cutOff < 3 {
            let victim = server
            let acknowledged = PostgresOutageTests.Shared(0)
            let modifying = PostgresOutageTests.Shared(0)
            let written = await withTaskGroup(of: [Batch].self) { group in
                for writer in 0..<2 {
                    group.addTask {
                        var batches: [Batch] = []
                        for index in 0..<10_000 {
                            guard
                                let batch = try? await Self.write(
                                    trial * 1_000_000 + writer * 100_000 + index, server: victim, query: query, modifying: modifying)
                            else {
                                break
                            }
                            batches.append(batch)
                            if !batch.acknowledged { break }
                            acknowledged.withLock { $0 += 1 }
                        }
                        return batches
                    }
                }
                group.addTask {
                    // Killed at a different point of a batch each trial, once the writers are under way.
                    while acknowledged.withLock({ $0 }) < 3 + trial * 2 || modifying.withLock({ $0 }) == 0 {
                        try? await Task.sleep(for: .microseconds(200))
                    }
                    try? await Task.sleep(for: .microseconds(Int.random(in: 0..<1_500)))
                    _ = victim.stop(SIGKILL)
                    return []
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
            batches += written
            if written.contains(where: { !$0.acknowledged }) { cutOff += 1 }
            server = try await ServeProcessTests.Server.start(arguments: arguments)
        }
        defer { _ = server.stop(SIGKILL) }
        #expect(batches.count >= 9, "the writers wrote before each kill")
        #expect(cutOff > 0, "a kill cut off a batch being saved")

        // Through the restarted server: each batch's records and share are all there or none is.
        var whole = Set<Int>()
        let base = "\(server.url)/database/1/\(Self.container)/development/private"
        for batch in batches {
            let (_, found) = try await Self.post(
                "\(base)/records/lookup?\(query)",
                #"{"zoneID":{"zoneName":"Crash"},"records":[{"recordName":"\#(batch.list)"},{"recordName":"\#(batch.item)"},{"recordName":"\#(batch.share)"}]}"#
            )
            let records = found["records"]?.arrayValue ?? []
            let present = records.filter { $0["serverErrorCode"] == nil }
            #expect(present.count == 0 || present.count == 3, "batch \(batch.index) was half applied: \(found)")
            if batch.acknowledged { #expect(present.count == 3, "an acknowledged batch was lost: \(found)") }
            guard present.count == 3 else { continue }
            whole.insert(batch.index)
            #expect(records[0]["share"]?["recordName"]?.stringValue == batch.share, "the root points at its share: \(records[0])")
            let participants = records[2]["participants"]?.arrayValue ?? []
            #expect(participants.contains { $0["userIdentity"]?["lookupInfo"]?["emailAddress"] == "bob@example.com" }, "\(records[2])")
            #expect(records[1]["fields"]?["photo"]?["value"]?["downloadURL"]?.stringValue != nil, "\(records[1])")
        }
        _ = server.stop(SIGTERM)

        // And in the store: a batch's asset is attached exactly when its item was saved, so the cleanup keeps its file.
        let uploads = try await Self.uploads(receipts: batches.map(\.receipt), arguments: arguments)
        for batch in batches {
            #expect(
                uploads[batch.receipt]?.attached == whole.contains(batch.index),
                "batch \(batch.index): attached \(String(describing: uploads[batch.receipt]?.attached)), saved \(whole.contains(batch.index))")
        }
    }

    /// The asset receipts as the store holds them, read with the server stopped.
    static func uploads(receipts: [String], arguments: [String]) async throws -> [String: AssetUpload] {
        let logger = Logger(label: "crash-test")
        if arguments.first == "--data" {
            let store = try SQLiteRecordStore(path: (arguments[1] as NSString).appendingPathComponent("cumulus.sqlite"))
            return Dictionary(
                try await store.assetUploads(receipts: receipts, logger: logger).map { ($0.receipt, $0) }, uniquingKeysWith: { a, _ in a })
        }
        let location = try PostgresLocation(url: arguments[1])
        let client = PostgresClient(configuration: location.clientConfiguration(maximumConnections: 1))
        return try await withThrowingTaskGroup(of: [String: AssetUpload]?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            let store = PostgresRecordStore(client: client, connectionWait: .seconds(30))
            let uploads = try await store.assetUploads(receipts: receipts, logger: logger)
            return Dictionary(uploads.map { ($0.receipt, $0) }, uniquingKeysWith: { a, _ in a })
        }
    }
}
