import AsyncHTTPClient
import CumulusClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusStorePostgres
import CumulusStoreSQLite
import CumulusStores
import CumulusSyncGRDB
import Foundation
import GRDB
import GhostCarExample
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import Synchronization

/// Cumulus benchmarks. Run in release mode: `swift run -c release CumulusBenchmarks [--records N] [--concurrency C]`
/// `[--subscribers N] [--idle-streams N] [--only sync|sync-parts|verify|history|feed|modify|push|abuse|requests|assets|export]`
/// `[--in-process-server]`; `--only replicas --store postgres://… --replica postgres://…` reads feeds through a
/// streaming replica of the `--store` server, beside the primary; `--only shards --store … --second-store …` writes
/// through two instances on one primary, then over two (a store sharded over both servers), and moves a shard;
/// `--only scale` with all three runs both, and push across two instances under both fan-outs (issue 38).
///
/// `--only requests` drives `cumulus serve` built beside the benchmark (`swift build -c release --product cumulus`), as
/// an operator runs it; `--in-process-server` drives this executable's own `--serve` instead (the same server, no
/// request limits, warnings only in its log), the configuration of the figures measured before issue 41.
///
/// With `--store postgres://user:password@host:port/database` (a role that may create databases), the write, feed and
/// query benchmarks run on SQLite and on PostgreSQL side by side, with PostgreSQL's own ceiling (`COPY`).
///
/// Results are printed as a Markdown table for `docs/BENCHMARKS.md`.
@main
struct Benchmarks {
    static func main() async throws {
        var arguments = CommandLine.arguments.dropFirst()
        if arguments.first == "--serve", let store = arguments.dropFirst().first {
            let options = Set(arguments.dropFirst(2))
            try await serve(
                store, requestLimits: options.contains("--request-limits") ? RequestLimits() : .unlimited,
                fanOut: options.contains("--fan-out-watch") ? .watch(interval: .milliseconds(25)) : .notify)
            return
        }
        var records = 50_000
        var subscribers = 1_000
        var idleStreams = 10_000
        var concurrency = 4
        var feedRecords = 100_000
        var only: String?
        var postgres: PostgresLocation?
        var inProcessServer = false
        var replica: PostgresLocation?
        var secondStore: PostgresLocation?
        while let argument = arguments.popFirst() {
            switch argument {
            case "--only": only = arguments.popFirst()
            case "--store": postgres = try PostgresLocation(url: arguments.popFirst() ?? "")
            case "--records": records = Int(arguments.popFirst() ?? "") ?? records
            case "--concurrency": concurrency = Int(arguments.popFirst() ?? "") ?? concurrency
            case "--feed-records": feedRecords = Int(arguments.popFirst() ?? "") ?? feedRecords
            case "--subscribers": subscribers = Int(arguments.popFirst() ?? "") ?? subscribers
            case "--idle-streams": idleStreams = Int(arguments.popFirst() ?? "") ?? idleStreams
            case "--in-process-server": inProcessServer = true
            case "--replica": replica = try PostgresLocation(url: arguments.popFirst() ?? "")
            case "--second-store": secondStore = try PostgresLocation(url: arguments.popFirst() ?? "")
            default:
                let usage =
                    "usage: CumulusBenchmarks [--records N] [--concurrency C] [--feed-records N] [--subscribers N] [--idle-streams N] "
                    + "[--only sync|sync-parts|verify|history|feed|modify|push|abuse|requests|assets|export|replicas|shards|scale] [--store postgres://…] "
                    + "[--replica postgres://…] [--second-store postgres://…] [--in-process-server]\n"
                let message = (argument == "--help" ? "" : "unknown argument \(argument)\n") + usage
                FileHandle.standardError.write(Data(message.utf8))
                exit(argument == "--help" ? 0 : 2)
            }
        }
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0, metadataProvider: nil) }
        print("| benchmark | records | seconds | records/s | notes |")
        print("|---|---:|---:|---:|---|")
        if only == "abuse" {
            try await hostileBodies()
            try await floodLatency()
            return
        }
        if only == "assets" {
            for store in [BenchStore.sqlite] + (postgres.map { [.postgres($0)] } ?? []) {
                try await assets(on: store, megabytes: 256, largeMegabytes: 1024)
            }
            return
        }
        if only == "requests" {
            for store in [BenchStore.sqlite] + (postgres.map { [.postgres($0)] } ?? []) {
                try await requestPath(records: records, on: store, deployed: !inProcessServer)
            }
            return
        }
        if only == "replicas" {
            guard let postgres, let replica else { throw BenchmarkError("--only replicas needs --store and --replica (a streaming replica of it)") }
            try await replicas(records: records, primary: postgres, replica: replica)
            return
        }
        // Past one PostgreSQL (issue 38), in one run: feed pages with and without a replica, writes through two
        // instances on one primary and on two, and push across two instances under both fan-outs.
        if only == "scale" {
            guard let postgres, let replica, let secondStore else {
                throw BenchmarkError("--only scale needs --store, --replica (a streaming replica of it) and --second-store (another server)")
            }
            try await replicas(records: records, primary: postgres, replica: replica)
            try await shards(first: postgres, second: secondStore)
            try await push(subscribers: subscribers, idleStreams: 0, on: .postgres(postgres), instances: 2)
            try await push(subscribers: subscribers, idleStreams: 0, on: .postgres(postgres), instances: 2, watching: true)
            return
        }
        if only == "shards" {
            guard let postgres, let secondStore else {
                throw BenchmarkError("--only shards needs --store and --second-store (another PostgreSQL server)")
            }
            try await shards(first: postgres, second: secondStore)
            return
        }
        if only == "sync" {
            try await initialSyncAndLatency(records: feedRecords)
            try await syncParts(records: feedRecords)
            return
        }
        if only == "export" {
            try await exportMemory(megabytes: 600)
            return
        }
        if only == "sync-parts" {
            try await syncParts(records: feedRecords)
            return
        }
        if only == "history" {
            for store in [BenchStore.sqlite] + (postgres.map { [.postgres($0)] } ?? []) {
                try await history(records: feedRecords, on: store)
            }
            return
        }
        if only == "verify" {
            try await verification(records: feedRecords)
            return
        }
        if only == "push" {
            for store in [BenchStore.sqlite] + (postgres.map { [.postgres($0)] } ?? []) {
                try await push(subscribers: subscribers, idleStreams: idleStreams, on: store)
            }
            // Over PostgreSQL, again with the streams spread over two instances: every other notification crosses.
            // Both ways instances wake each other: NOTIFY, and each watching its connections' databases every 25 ms.
            if let postgres {
                try await push(subscribers: subscribers, idleStreams: 0, on: .postgres(postgres), instances: 2)
                try await push(subscribers: subscribers, idleStreams: 0, on: .postgres(postgres), instances: 2, watching: true)
            }
            return
        }
        if let postgres {
            let stores = [BenchStore.sqlite, .postgres(postgres)]
            if only == "feed" {
                for store in stores { try await feedAndQuery(records: feedRecords, on: store) }
                return
            }
            if only == "modify" {
                for store in stores {
                    try await writePathParts(records: records, on: store)
                    try await modifyOverHTTP(records: records, concurrency: concurrency, on: store)
                    try await modifyOverHTTP(records: records, concurrency: concurrency, on: store, zonePerClient: true)
                }
                return
            }
            for store in stores {
                for clients in Set([1, concurrency]).sorted() {
                    try await modifyOverHTTP(records: records, concurrency: clients, on: store)
                }
                try await modifyOverHTTP(records: records, concurrency: concurrency, on: store, zonePerClient: true)
                try await writePathParts(records: records, on: store)
            }
            try directSQLiteInserts(records: records)
            try await directPostgresCopy(records: records, on: postgres)
            for store in stores {
                try await feedAndQuery(records: feedRecords, on: store)
                try await push(subscribers: subscribers, idleStreams: idleStreams, on: store)
            }
            return
        }
        for clients in Set([1, concurrency]).sorted() {
            try await modifyOverHTTP(records: records, concurrency: clients, on: .sqlite)
        }
        try directSQLiteInserts(records: records)
        try await writePathParts(records: records)
        try await feedAndQuery(records: feedRecords, on: .sqlite)
        try await initialSyncAndLatency(records: feedRecords)
        try await push(subscribers: subscribers, idleStreams: idleStreams, on: .sqlite)
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

    /// `records/modify` over HTTP on loopback, against a store (SQLite on disk, or PostgreSQL).
    ///
    /// - Parameter zonePerClient: Each client writes its own zone (as devices of different users do) instead of all
    ///   writing one zone, whose writers a store serializes.
    static func modifyOverHTTP(records: Int, concurrency: Int, on kind: BenchStore, zonePerClient: Bool = false) async throws {
        let world = try await BenchWorld.make(kind)
        defer { world.cleanUp() }
        let (store, container, apiToken, webToken) = (world.store, world.container, world.apiToken, world.webToken)

        var silent = Logger(label: "bench-server")
        silent.logLevel = .warning
        let app = buildApplication(configuration: .throughput, store: store, logger: silent)
        try await app.test(.live) { client in
            let base = "http://127.0.0.1:\(client.port!)/database/1/\(container)/development/private"
            let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)"
            let zones = zonePerClient ? (0..<concurrency).map { "Drives\($0)" } : ["Drives"]
            for zone in zones {
                _ = try await post(
                    "\(base)/zones/modify?\(query)", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"\#(zone)"}}}]}"#)
            }

            let requests = records / batchSize
            let bodies = (0..<requests).map { request in
                let operations = (0..<batchSize).map { offset in
                    let index = request * batchSize + offset
                    return #"{"operationType":"create","record":{"recordName":"drive-\#(index)","recordType":"Drive","fields":\#(fields(index))}}"#
                }
                // Requests go to clients round-robin, so request r is sent by client r % concurrency.
                let zone = zones[request % zones.count]
                return #"{"zoneID":{"zoneName":"\#(zone)"},"operations":[\#(operations.joined(separator: ","))]}"#
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
                "| records/modify over HTTP, \(kind.name), \(concurrency) client\(concurrency == 1 ? "" : "s")"
                    + "\(zonePerClient ? ", a zone each" : concurrency == 1 ? "" : ", one zone") | \(total) | \(format(seconds)) | "
                    + "\(Int(Double(total) / seconds)) | \(batchSize) creates of ~1 KB per request, \(averageBody / 1024) KB bodies |"
            )
        }
    }

    static func post(_ url: String, _ body: String) async throws -> Int {
        try await postJSON(url, body).0
    }

    static func postJSON(_ url: String, _ body: String) async throws -> (Int, JSONValue) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 64 * 1024 * 1024)
        let start = ContinuousClock.now
        let json = try JSONValue(parsing: Array(bytes.readableBytesView))
        clientParseTime.withLock { $0 += ContinuousClock.now - start }
        return (Int(response.status.code), json)
    }

    /// Time the benchmark client spends parsing responses (it runs on the same cores as the server).
    static let clientParseTime = Mutex(Duration.zero)

    /// A zone of `records` drives read through `changes/zone` from a zero token, and a filtered, sorted query paged
    /// through with continuation markers, both over HTTP.
    static func feedAndQuery(records: Int, on kind: BenchStore) async throws {
        let world = try await BenchWorld.make(kind)
        defer { world.cleanUp() }
        let (store, logger, container, apiToken, user, webToken) =
            (world.store, world.logger, world.container, world.apiToken, world.user, world.webToken)
        let database = DatabaseRef(container: container, environment: .development, scope: .private, ownerRecordName: user.userRecordName)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Drives"))], in: database, timestamp: 0, logger: logger)
        // Seed through the store directly: this measures reading, not writing.
        for batch in stride(from: 0, to: records, by: batchSize) {
            let operations = (batch..<min(batch + batchSize, records)).map { index in
                RecordModification(
                    operationType: .create, recordName: "drive-\(index)", recordType: "Drive",
                    fields: ((try? RecordFieldsCoding.parseCanonical(Array(fields(index).utf8))) ?? [:]).mapValues { Optional($0) }
                )
            }
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: database, zoneName: "Drives", atomic: true, operations: operations, author: user.userRecordName, deviceID: "d",
                    timestamp: 0),
                logger: logger
            )
        }

        // Writes through the API grow the development schema (which queries index from); say what they would have.
        let driveFields = try RecordFieldsCoding.parseCanonical(Array(fields(0).utf8)).compactMap { name, value in
            SchemaFieldType(of: value).map { FieldSchema(name: name, type: $0) }
        }
        _ = try await store.extendSchema(
            ContainerSchema(recordTypes: [RecordTypeSchema(name: "Drive", fields: driveFields)]), container: container, environment: .development,
            logger: logger)

        // The store alone, and the store plus response encoding, without HTTP.
        var storeSeconds = 0.0
        var encodeSeconds = 0.0
        do {
            var after: Int64 = 0
            var more = true
            var read = 0
            while more {
                let start = ContinuousClock.now
                let page = try await store.zoneChanges(
                    ZoneChangeRequest(database: database, zoneName: "Drives", incarnation: nil, after: after, limit: batchSize), logger: logger
                )
                storeSeconds += (ContinuousClock.now - start).seconds
                let encodeStart = ContinuousClock.now
                var writer = JSONWriter(reservingCapacity: 300 * 1024)
                writer.beginArray()
                for change in page.changes {
                    if case .changed(let record) = change { writer.record(header: record.header, fields: .canonical(record.fieldsJSON)) }
                }
                writer.endArray()
                precondition(!writer.bytes.isEmpty)
                encodeSeconds += (ContinuousClock.now - encodeStart).seconds
                read += page.changes.count
                after = page.sequence
                more = page.moreComing
            }
            print(
                "| zone feed, \(kind.name) store only (no HTTP) | \(read) | \(format(storeSeconds)) | \(Int(Double(read) / storeSeconds)) | read and row decoding |"
            )
            print(
                "| zone feed, response encoding only | \(read) | \(format(encodeSeconds)) | \(Int(Double(read) / encodeSeconds)) | records written as JSON, fields spliced |"
            )
        }

        var silent = Logger(label: "bench-server")
        silent.logLevel = .warning
        let app = buildApplication(configuration: .throughput, store: store, logger: silent)
        try await app.test(.live) { client in
            let base = "http://127.0.0.1:\(client.port!)/database/1/\(container)/development/private"
            let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)"

            var token: String?
            var received = 0
            var more = true
            clientParseTime.withLock { $0 = .zero }
            let start = ContinuousClock.now
            while more {
                let entry = #"{"zoneID":{"zoneName":"Drives"}"# + (token.map { #","syncToken":"\#($0)""# } ?? "") + "}"
                let (status, json) = try await postJSON("\(base)/changes/zone?\(query)", #"{"zones":[\#(entry)]}"#)
                precondition(status == 200, "changes/zone answered \(status)")
                let zone = json["zones"]!.arrayValue![0]
                received += zone["records"]!.arrayValue!.count
                token = zone["syncToken"]!.stringValue
                more = zone["moreComing"] == .bool(true)
            }
            let seconds = (ContinuousClock.now - start).seconds
            precondition(received == records, "feed returned \(received) of \(records)")
            let parse = clientParseTime.withLock { $0 }.seconds
            print(
                "| changes/zone from a zero token over HTTP, \(kind.name) | \(received) | \(format(seconds)) | \(Int(Double(received) / seconds)) | "
                    + "pages of 200, 1 client; \(format(parse)) s of it is the client parsing the JSON |"
            )

            let body = { (marker: String?) in
                #"{"zoneID":{"zoneName":"Drives"},"resultsLimit":200,"# + (marker.map { #""continuationMarker":"\#($0)","# } ?? "")
                    + #""query":{"recordType":"Drive","filterBy":[{"comparator":"GREATER_THAN","fieldName":"duration","fieldValue":{"value":650}}],"#
                    + #""sortBy":[{"fieldName":"startTime","ascending":false}]}}"#
            }
            // The first query creates the expression indexes; time it apart.
            let firstStart = ContinuousClock.now
            var (status, json) = try await postJSON("\(base)/records/query?\(query)", body(nil))
            precondition(status == 200, "records/query answered \(status): \(json)")
            let firstSeconds = (ContinuousClock.now - firstStart).seconds
            var pages = 0
            var matched = json["records"]!.arrayValue!.count
            let pagesStart = ContinuousClock.now
            while let marker = json["continuationMarker"]?.stringValue, pages < 50 {
                (status, json) = try await postJSON("\(base)/records/query?\(query)", body(marker))
                precondition(status == 200, "records/query answered \(status)")
                matched += json["records"]!.arrayValue!.count
                pages += 1
            }
            let perPage = (ContinuousClock.now - pagesStart).seconds / Double(max(pages, 1)) * 1000
            print(
                "| records/query, \(kind.name), filter + sort, first page (builds indexes) | \(records) | \(format(firstSeconds)) | — | 200 per page |"
            )
            print(
                "| records/query, \(kind.name), filter + sort, next \(pages) pages | \(records) | \(String(format: "%.1f", perPage)) ms/page | — | "
                    + "duration > 650 (~half), sorted by startTime desc, continuation markers; \(matched) records read |"
            )
        }
    }

    static func modifyBodies(records: Int) -> [String] {
        (0..<(records / batchSize)).map { request in
            let operations = (0..<batchSize).map { offset in
                let index = request * batchSize + offset
                return #"{"operationType":"create","record":{"recordName":"drive-\#(index)","recordType":"Drive","fields":\#(fields(index))}}"#
            }
            return #"{"zoneID":{"zoneName":"Drives"},"operations":[\#(operations.joined(separator: ","))]}"#
        }
    }

    /// The write path without HTTP: parsing request bodies, then the store applying the batches.
    static func writePathParts(records: Int, on kind: BenchStore = .sqlite) async throws {
        let bodies = modifyBodies(records: records).map { Array($0.utf8) }
        var parsed: [RecordsModifyRequest] = []
        let parseStart = ContinuousClock.now
        for body in bodies {
            parsed.append(try RecordsModifyRequest(wire: WireObject(JSONValue(parsing: body), path: "")))
        }
        let parseSeconds = (ContinuousClock.now - parseStart).seconds
        print(
            "| records/modify request parsing only | \(records) | \(format(parseSeconds)) | \(Int(Double(records) / parseSeconds)) | JSON to typed operations |"
        )

        let (store, cleanUp) = try await kind.make()
        defer { cleanUp() }
        let logger = Logger(label: "bench")
        try await store.createContainer("c", createdAt: 0, logger: logger)
        let database = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_u")
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Drives"))], in: database, timestamp: 0, logger: logger)
        let batches = parsed.map { request in
            RecordBatch(
                database: database, zoneName: "Drives", atomic: true,
                operations: request.operations.map {
                    RecordModification(
                        operationType: $0.operationType, recordName: $0.record.recordName!, recordType: $0.record.recordType, fields: $0.record.fields
                    )
                },
                author: "_u", deviceID: "d", timestamp: 0
            )
        }
        let storeStart = ContinuousClock.now
        for batch in batches { _ = try await store.modifyRecords(batch, logger: logger) }
        let storeSeconds = (ContinuousClock.now - storeStart).seconds
        print(
            "| records/modify store only, \(kind.name) | \(records) | \(format(storeSeconds)) | \(Int(Double(records) / storeSeconds)) | plan and apply 200-record batches, no HTTP |"
        )
    }

    /// The CPU time the whole process has used (user and system, every thread), in seconds: with the server in the
    /// process, what a phase costs both sides together, whatever the machine's other load did to its wall time.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
    }

    /// Peak resident memory of the process, in MiB (the server runs in the same process).
    static func peakMemoryMiB() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_maxrss) / 1024
    }

    /// The sync engine: a `records` initial sync into an empty device's SQLite file, and how long an edit on one device
    /// takes to reach another that polls.
    static func initialSyncAndLatency(records: Int) async throws {
        let world = try await BenchWorld.make()
        // The devices' own SQLite files.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-bench-devices-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer {
            world.cleanUp()
            try? FileManager.default.removeItem(at: directory)
        }
        let (store, logger, container, apiToken, user, webToken) =
            (world.store, world.logger, world.container, world.apiToken, world.user, world.webToken)
        let database = DatabaseRef(container: container, environment: .development, scope: .private, ownerRecordName: user.userRecordName)
        _ = try await store.modifyZones([ZoneOperation(operationType: .create, zoneID: GhostCar.zone)], in: database, timestamp: 0, logger: logger)
        let route = Data((0..<675).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        for batch in stride(from: 0, to: records, by: batchSize) {
            let operations = (batch..<min(batch + batchSize, records)).map { index in
                RecordModification(
                    operationType: .create, recordName: "drive-\(index)", recordType: "Drive",
                    fields: [
                        "startTime": .timestamp(1_700_000_000_000 + Int64(index)), "duration": .double(600), "distance": .double(Double(index)),
                        "averageSpeed": .double(14.2), "maxSpeed": .double(31.7), "coordinatesData": .bytes(route),
                        "customName": .string("Drive \(index)"), "modifiedAt": .int64(1),
                    ]
                )
            }
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: database, zoneName: GhostCar.zone.zoneName, atomic: true, operations: operations, author: user.userRecordName,
                    deviceID: "d", timestamp: 0),
                logger: logger
            )
        }
        var silent = Logger(label: "bench-server")
        silent.logLevel = .warning
        let app = buildApplication(configuration: .throughput, store: store, logger: silent)
        try await app.test(.live) { client in
            let cloud = CloudContainer(
                serverURL: URL(string: "http://127.0.0.1:\(client.port!)")!, containerIdentifier: container, apiToken: apiToken,
                webAuthToken: webToken
            )
            let applying = TimedDelegate.Clock()
            func device(_ name: String) throws -> (DatabasePool, GRDBSyncStore, SyncEngine) {
                // A DatabasePool (WAL), as GRDB recommends for apps.
                let queue = try DatabasePool(path: directory.appendingPathComponent("\(name).sqlite").path)
                try GhostCar.migrate(queue)
                let syncStore = try GRDBSyncStore(writer: queue, scope: "private")
                let adapter = try GRDBSyncAdapter(writer: queue, store: syncStore, tables: [GhostCar.drivesTable()])
                let delegate = TimedDelegate(adapter, clock: applying)
                let engine = SyncEngine(.init(database: cloud.privateCloudDatabase, stateStore: syncStore, delegate: delegate))
                return (queue, syncStore, engine)
            }
            // The feed alone, read and parsed by the client: what the device's work adds to it shows below.
            let feedStart = ContinuousClock.now
            let feedCPU = processCPUSeconds()
            var feedToken: String?
            var feedCount = 0
            repeat {
                let page = try await cloud.privateCloudDatabase.zoneChanges(GhostCar.zone, since: feedToken)
                feedCount += page.records.count
                feedToken = page.moreComing ? page.syncToken : nil
            } while feedToken != nil
            let feedSeconds = (ContinuousClock.now - feedStart).seconds
            print(
                "| the same feed read and parsed by CloudDatabase, nothing stored | \(feedCount) | \(format(feedSeconds)) | "
                    + "\(Int(Double(feedCount) / feedSeconds)) | pages of 200 over loopback HTTP; the process's CPU \(format(processCPUSeconds() - feedCPU)) s |"
            )

            let memoryBefore = peakMemoryMiB()
            let (fresh, _, freshEngine) = try device("fresh")
            let start = ContinuousClock.now
            let syncCPU = processCPUSeconds()
            try await freshEngine.fetchChanges()
            let syncCPUSeconds = processCPUSeconds() - syncCPU
            let seconds = (ContinuousClock.now - start).seconds
            let count = try await fresh.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM drives") ?? 0 }
            precondition(count == records, "synced \(count) of \(records)")
            print(
                "| initial sync into an empty device (SyncEngine + GRDB) | \(count) | \(format(seconds)) | \(Int(Double(count) / seconds)) | "
                    + "peak memory \(Int(peakMemoryMiB())) MiB for the whole process (\(Int(memoryBefore)) MiB before), server included; "
                    + "the device applied pages for \(format(applying.seconds)) s of it; the process's CPU \(format(syncCPUSeconds)) s |"
            )

            // Edit-to-other-device latency: the phone records and sends; the tablet polls every 20 ms.
            let (phone, phoneStore, phoneEngine) = try device("phone")
            let (tablet, _, tabletEngine) = try device("tablet")
            try await phoneEngine.fetchChanges()
            try await tabletEngine.fetchChanges()
            var latencies: [Double] = []
            for round in 0..<20 {
                let id = "latency-\(round)"
                let edit = ContinuousClock.now
                try await phone.write { db in
                    try db.execute(sql: "INSERT INTO drives (id, customName, modifiedAt) VALUES (?, 'x', 2)", arguments: [id])
                    try phoneStore.enqueue([.saveRecord(RecordID(recordName: id, zoneID: GhostCar.zone))], in: db)
                }
                try await phoneEngine.sendChanges()
                while true {
                    try await tabletEngine.fetchChanges()
                    let seen = try await tablet.read { db in
                        try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM drives WHERE id = ?)", arguments: [id]) ?? false
                    }
                    if seen { break }
                    try await Task.sleep(for: .milliseconds(20))
                }
                latencies.append((ContinuousClock.now - edit).seconds * 1000)
            }
            latencies.sort()
            print(
                "| edit on one device to the other, polling every 20 ms | 20 edits | \(String(format: "%.1f", latencies[10])) ms median | — | "
                    + "p90 \(String(format: "%.1f", latencies[18])) ms; one send, then fetches until seen |"
            )
        }
    }

    /// The ceiling: the same rows inserted straight into SQLite with GRDB, 200 per transaction.
    @discardableResult
    static func directSQLiteInserts(records: Int) throws -> Double {
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
        return Double(records) / seconds
    }

    /// PostgreSQL's ceiling: the same rows loaded with `COPY … FROM STDIN` (text format), 200 per transaction, into a
    /// migrated schema, so the indexes are the store's.
    static func directPostgresCopy(records: Int, on server: PostgresLocation) async throws {
        let (store, cleanUp) = try await BenchStore.postgres(server).make()
        defer { cleanUp() }
        guard let store = store as? PostgresRecordStore else { return }
        let logger = Logger(label: "bench")
        try await store.createContainer("c", createdAt: 0, logger: logger)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Drives"))],
            in: DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_u"), timestamp: 0, logger: logger)
        let zoneID =
            try await store.client.query("SELECT id FROM zones WHERE zone_name = 'Drives'", logger: logger).collect().first?.decode(
                Int64.self) ?? 0
        // COPY's text format: tab-separated, with backslash, tab and newline escaped.
        let lines = (0..<records).map { index in
            let fields = String(
                decoding: RecordFieldsCoding.canonical((try? RecordFieldsCoding.parseCanonical(Array(fields(index).utf8))) ?? [:]), as: UTF8.self
            )
            .replacingOccurrences(of: "\\", with: "\\\\")
            return "\(zoneID)\tdrive-\(index)\tDrive\t\(index + 1)\t\(fields)\t0\t_u\td\t0\t_u\td\n"
        }
        let start = ContinuousClock.now
        for batch in stride(from: 0, to: records, by: batchSize) {
            try await store.client.withTransaction(logger: logger) { connection in
                try await connection.copyFrom(
                    table: "records",
                    columns: [
                        "zone_id", "record_name", "record_type", "change_seq", "fields", "created_at", "created_by", "created_device", "modified_at",
                        "modified_by", "modified_device",
                    ], logger: logger
                ) { writer in
                    var buffer = ByteBuffer()
                    for index in batch..<min(batch + batchSize, records) { buffer.writeString(lines[index]) }
                    try await writer.write(buffer)
                }
            }
        }
        let seconds = (ContinuousClock.now - start).seconds
        print(
            "| direct PostgreSQL COPY (ceiling) | \(records) | \(format(seconds)) | \(Int(Double(records) / seconds)) | same rows and indexes, COPY FROM STDIN, 200 per transaction |"
        )
    }

    static func format(_ seconds: Double) -> String { String(format: "%.2f", seconds) }
}

/// Which store a benchmark runs on.
enum BenchStore {
    case sqlite
    /// A fresh database on this server, dropped afterwards.
    case postgres(PostgresLocation)

    var name: String {
        switch self {
        case .sqlite: "SQLite"
        case .postgres: "PostgreSQL"
        }
    }

    /// A fresh store, and how to remove it.
    func make() async throws -> (any RecordStore, cleanUp: @Sendable () -> Void) {
        let (store, cleanUp, _) = try await makeLocated()
        return (store, cleanUp)
    }

    /// A fresh store, how to remove it, and where it is (a SQLite file's path, or a PostgreSQL URL), for a server
    /// process of its own.
    func makeLocated() async throws -> (any RecordStore, cleanUp: @Sendable () -> Void, location: String) {
        switch self {
        case .sqlite:
            // Opened as `cumulus serve` opens its store.
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-bench-\(UUID().uuidString)")
            let store = try await StoreLocation.sqlite(directory: directory.path).open(logger: Logger(label: "bench")).store
            return (store, { try? FileManager.default.removeItem(at: directory) }, directory.appendingPathComponent("cumulus.sqlite").path)
        case .postgres(let server):
            let logger = Logger(label: "bench")
            var location = server
            location.database = "cumulus_bench_\(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16))"
            let name = location.database
            try await Self.onServer(server) { client in
                _ = try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
            }
            // Opened as `cumulus serve` opens its store, with as many connections as a deployed instance has by default.
            let opened = try await StoreLocation.postgres(location, connections: 20).open(logger: logger)
            let running = Task { try? await opened.runServices() }
            let password = location.password.map { ":\($0)" } ?? ""
            let url = "postgres://\(location.username)\(password)@\(location.host):\(location.port)/\(name)?sslmode=\(location.tls.rawValue)"
            return (
                opened.store,
                {
                    running.cancel()
                    let done = DispatchSemaphore(value: 0)
                    Task {
                        try? await Self.onServer(server) { client in
                            _ = try await client.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
                        }
                        done.signal()
                    }
                    done.wait()
                },
                url
            )
        }
    }

    /// Runs `body` with a one-connection client of the server's own database.
    static func onServer(_ location: PostgresLocation, _ body: @Sendable (PostgresClient) async throws -> Void) async throws {
        let client = PostgresClient(configuration: location.clientConfiguration(maximumConnections: 1))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await body(client)
        }
    }
}

/// A fresh store with a container, an API token and a signed-in user.
struct BenchWorld {
    let store: any RecordStore
    let cleanUp: @Sendable () -> Void
    /// The store's file or URL, for a server process of its own.
    let location: String
    let logger = Logger(label: "bench")
    let container = "iCloud.com.example.bench"
    let apiToken: String
    let user: UserAccount
    let webToken: String

    static func make(_ kind: BenchStore = .sqlite) async throws -> BenchWorld {
        let (store, cleanUp, location) = try await kind.makeLocated()
        let logger = Logger(label: "bench")
        let accounts = AccountService(store: store)
        let container = "iCloud.com.example.bench"
        try await accounts.createContainer(container, logger: logger)
        let apiToken = try await accounts.createAPIToken(container: container, environment: .development, logger: logger)
        let user = try await accounts.createUser(container: container, name: "bench", password: nil, email: nil, logger: logger)
        return BenchWorld(
            store: store, cleanUp: cleanUp, location: location, apiToken: apiToken, user: user,
            webToken: try await accounts.issueWebAuthToken(for: user, logger: logger)
        )
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Times a sync delegate's event handling: how long the device spends applying what it fetched.
final class TimedDelegate: SyncEngineDelegate {
    final class Clock: Sendable {
        private let total = Mutex(Duration.zero)
        var seconds: Double { total.withLock { $0 }.seconds }
        func add(_ duration: Duration) { total.withLock { $0 += duration } }
    }

    let wrapped: any SyncEngineDelegate
    let clock: Clock

    init(_ wrapped: any SyncEngineDelegate, clock: Clock) {
        self.wrapped = wrapped
        self.clock = clock
    }

    func handleEvent(_ event: SyncEngine.Event, syncEngine: SyncEngine) async throws {
        let start = ContinuousClock.now
        defer { clock.add(ContinuousClock.now - start) }
        try await wrapped.handleEvent(event, syncEngine: syncEngine)
    }

    func nextRecordZoneChangeBatch(_ pending: [PendingRecordZoneChange], syncEngine: SyncEngine) async throws -> RecordZoneChangeBatch? {
        try await wrapped.nextRecordZoneChangeBatch(pending, syncEngine: syncEngine)
    }
}

extension ServerConfiguration {
    /// A server measured for throughput: its clients are one user on one address, deliberately past the per-caller
    /// limits a deployment keeps (`docs/SECURITY.md`).
    static var throughput: ServerConfiguration {
        var configuration = ServerConfiguration(port: 0)
        configuration.requestLimits = .unlimited
        return configuration
    }
}
