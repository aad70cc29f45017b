import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusServerHTTP
import CumulusStore
import CumulusStorePostgres
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// The request path, measured as users meet it: the server in a process of its own (the benchmark executable started
/// again with `--serve`), driven over loopback by this process, with the server's CPU time read from `/proc` around each
/// phase, so a figure is what the server spent, not what the client and the server spent together on two cores.
extension Benchmarks {
    static func requestPath(records: Int, on kind: BenchStore, deployed asDeployed: Bool = true) async throws {
        let (store, cleanUp, location) = try await kind.makeLocated()
        defer { cleanUp() }
        let (container, apiToken, webToken) = try await benchAccount(store)
        // Sixteen users for the phase with sixteen connections: a deployed server lets one user have 8 requests at once.
        var others: [String] = []
        let accounts = AccountService(store: store)
        for index in 0..<16 {
            let user = try await accounts.createUser(
                container: container, name: "writer\(index)", password: nil, email: nil, logger: Logger(label: "bench"))
            others.append(try await accounts.issueWebAuthToken(for: user, logger: Logger(label: "bench")))
        }

        // SQLite's ceiling first, while nothing else runs: the same rows inserted straight into the database.
        let ceiling = kind.name == BenchStore.sqlite.name ? try directSQLiteInserts(records: records) : nil

        let launched = ContinuousClock.now
        // `cumulus serve` when it was built beside the benchmark (as `--only requests` asks); else this executable's
        // `--serve`, the same server with the benchmark's own limits.
        let deployed = asDeployed ? try ServerProcess.startDeployed(store: location) : nil
        let server = try deployed ?? ServerProcess.start(store: location)
        defer { server.stop() }
        print(
            "| request path \(kind.name): the server | | | | "
                + (deployed != nil
                    ? "`cumulus serve` in its own process, default limits, `--requests-per-second 1000000` |"
                    : "the benchmark's `--serve` in its own process: no request limits, warnings only in its log |"))
        let http = Self.manyConnections
        let base = "\(server.url)/database/1/\(container)/development/private"
        @Sendable func post(_ path: String, _ body: String, as webToken: String = webToken) async throws -> ByteBuffer {
            try await Self.post("\(base)/\(path)?ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)", body, with: http)
        }
        // The phases on one connection are timed by a client on one thread: its connection's event loop, with the
        // benchmark's task preferred onto it, so an answer resumes the task on the thread that read it, as a blocking
        // client would. Through the shared client, each answer woke a second thread of this process, and those wake-ups
        // (on the server's two cores) were in the latencies.
        let oneLoop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let oneConnection = HTTPClient(eventLoopGroupProvider: .shared(oneLoop))
        let onOneLoop = EventLoopTaskExecutor(oneLoop.next())
        @Sendable func postOnOneLoop(_ path: String, _ body: String) async throws -> ByteBuffer {
            try await Self.post("\(base)/\(path)?ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)", body, with: oneConnection)
        }
        _ = try await post("zones/lookup", #"{"zones":[{"zoneName":"_defaultZone"}]}"#)
        let coldStart = (ContinuousClock.now - launched).seconds * 1000
        print(
            "| request path \(kind.name): cold start | | \(format(coldStart / 1000)) | | process launched to its first database answer; "
                + "resident \(String(format: "%.0f", server.residentMiB)) MiB then |")
        _ = try await post(
            "zones/modify", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Drives"}}}]}"#)

        // The floor: Hummingbird answering `GET /health` (no authentication, no store), one connection.
        let probes = 3_000
        // Per thread in nanoseconds: every figure below is given in floors, so the floor is read to the finest grain.
        let floorThreads = server.threadCPU
        let floorStart = ContinuousClock.now
        for _ in 0..<probes {
            let response = try await http.execute(HTTPClientRequest(url: "\(server.url)/health"), timeout: .seconds(10))
            _ = try await response.body.collect(upTo: 1024)
        }
        let floorSeconds = (ContinuousClock.now - floorStart).seconds
        let floor = server.cpuMilliseconds(since: floorThreads) / Double(probes)
        print(
            "| request path \(kind.name): the floor, `GET /health`, 1 connection | \(probes) | \(format(floorSeconds)) | "
                + "\(Int(Double(probes) / floorSeconds)) requests/s | server CPU \(String(format: "%.3f", floor)) ms a request |")
        /// A figure of server CPU in milliseconds, and how many floors it is (and, for a paced figure, how many of the
        /// floor at the same pace).
        func cpu(_ milliseconds: Double, pacedFloor: Double? = nil) -> String {
            let paced = pacedFloor.map { String(format: "; %.1f× the floor 10 ms apart", milliseconds / $0) } ?? ""
            return String(format: "%.3f ms (%.1f× the floor", milliseconds, milliseconds / floor) + paced + ")"
        }
        /// PostgreSQL's own CPU (every process of the cluster, when it runs on this machine and its processes can be read).
        func databaseCPU() -> Double? {
            guard case .postgres(let location) = kind else { return nil }
            return PostgresCluster.cpuSeconds(port: location.port)
        }
        func databaseCPU(since start: Double?, per count: Int, _ unit: String, scale: Double) -> String {
            guard let start, let now = databaseCPU() else { return "" }
            return String(format: "PostgreSQL's own CPU %.3f ", (now - start) * scale / Double(count)) + unit + "; "
        }
        // The floor again, 10 ms apart: what waking an idle server costs before it does any work of its own. Paced
        // figures are read per thread in nanoseconds: 150 requests 10 ms apart use a few clock ticks of CPU in all.
        let pacedProbes = 150
        let pacedFloorThreads = server.threadCPU
        for _ in 0..<pacedProbes {
            try await Task.sleep(for: .milliseconds(10))
            let response = try await http.execute(HTTPClientRequest(url: "\(server.url)/health"), timeout: .seconds(10))
            _ = try await response.body.collect(upTo: 1024)
        }
        let pacedFloor = server.cpuMilliseconds(since: pacedFloorThreads) / Double(pacedProbes)
        print(
            "| request path \(kind.name): the floor 10 ms apart, `GET /health` | \(pacedProbes) | | | server CPU "
                + "\(cpu(pacedFloor)) a request (the pauses' idle CPU included) |")

        // One record a request, one connection, as an app saving one edit: the client asks for no fields back.
        let singles = 3_000
        try await withTaskExecutorPreference(onOneLoop) {
            for warmUp in 0..<200 { _ = try await postOnOneLoop("records/modify", singleWrite("warm-\(warmUp)")) }
        }
        var latencies: [Double] = []
        latencies.reserveCapacity(singles)
        let singleCPU = server.cpuSeconds
        let singleDatabaseCPU = databaseCPU()
        let singleStart = ContinuousClock.now
        try await withTaskExecutorPreference(onOneLoop) {
            for index in 0..<singles {
                let start = ContinuousClock.now
                _ = try await postOnOneLoop("records/modify", singleWrite("single-\(index)"))
                latencies.append((ContinuousClock.now - start).seconds * 1000)
            }
        }
        let singleSeconds = (ContinuousClock.now - singleStart).seconds
        let singleCPUms = (server.cpuSeconds - singleCPU) * 1000 / Double(singles)
        latencies.sort()
        print(
            "| request path \(kind.name): single-record writes, 1 connection | \(singles) | \(format(singleSeconds)) | "
                + "\(Int(Double(singles) / singleSeconds)) requests/s | server CPU \(cpu(singleCPUms)) a request; "
                + databaseCPU(since: singleDatabaseCPU, per: singles, "ms a request", scale: 1000)
                + "latency p50 \(percentile(latencies, 0.5)) ms, p99 \(percentile(latencies, 0.99)) ms |")

        // The same write paced as an app saves edits, one at a time with a pause between (issue 41): what a request
        // costs the server when it finds its threads parked and its caches cold.
        for (pause, count) in [(2, 300), (10, 150), (50, 60)] {
            var pacedLatencies: [Double] = []
            pacedLatencies.reserveCapacity(count)
            let pacedThreads = server.threadCPU
            try await withTaskExecutorPreference(onOneLoop) {
                for index in 0..<count {
                    try await Task.sleep(for: .milliseconds(pause))
                    let start = ContinuousClock.now
                    _ = try await postOnOneLoop("records/modify", singleWrite("paced-\(pause)-\(index)"))
                    pacedLatencies.append((ContinuousClock.now - start).seconds * 1000)
                }
            }
            pacedLatencies.sort()
            let pacedCPUms = server.cpuMilliseconds(since: pacedThreads) / Double(count)
            print(
                "| request path \(kind.name): single-record writes \(pause) ms apart, 1 connection | \(count) | | | "
                    // At the floor's own pace, the write is also given in paced floors: what it costs beyond waking the server.
                    + "server CPU \(cpu(pacedCPUms, pacedFloor: pause == 10 ? pacedFloor : nil)) a request (the pauses' idle CPU included); "
                    + "latency p50 \(percentile(pacedLatencies, 0.5)) ms, p99 \(percentile(pacedLatencies, 0.99)) ms |")
        }

        // Sixteen connections writing at once: what a write costs when requests overlap (PostgreSQL's round trips are
        // then shared with other work).
        // One at a time first: a credential's first request counts against its address (all of them here share one).
        for writer in others {
            _ = try await post("zones/modify", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Drives"}}}]}"#, as: writer)
        }
        let concurrentCPU = server.cpuSeconds
        let concurrentStart = ContinuousClock.now
        let perConnection = 200
        try await withThrowingTaskGroup(of: Void.self) { group in
            for connection in 0..<16 {
                let writer = others[connection]
                group.addTask {
                    for index in 0..<perConnection { _ = try await post("records/modify", singleWrite("sixteen-\(index)"), as: writer) }
                }
            }
            try await group.waitForAll()
        }
        let concurrentSeconds = (ContinuousClock.now - concurrentStart).seconds
        print(
            "| request path \(kind.name): single-record writes, 16 connections | \(16 * perConnection) | \(format(concurrentSeconds)) | "
                + "\(Int(Double(16 * perConnection) / concurrentSeconds)) requests/s | server CPU "
                + "\(cpu((server.cpuSeconds - concurrentCPU) * 1000 / Double(16 * perConnection))) a request |")

        // Batches of 200 creates of the 1 KB drive, one connection; the bodies are made before the clock starts.
        let bodies = stride(from: 0, to: records, by: batchSize).map { batch in
            let operations = (batch..<min(batch + batchSize, records)).map { index in
                #"{"operationType":"create","record":{"recordName":"drive-\#(index)","recordType":"Drive","fields":\#(fields(index))}}"#
            }
            return #"{"zoneID":{"zoneName":"Drives"},"desiredKeys":[],"operations":[\#(operations.joined(separator: ","))]}"#
        }
        let batchCPU = server.cpuSeconds
        let batchDatabaseCPU = databaseCPU()
        let batchStart = ContinuousClock.now
        var batchLatencies: [Double] = []
        batchLatencies.reserveCapacity(bodies.count)
        try await withTaskExecutorPreference(onOneLoop) {
            for body in bodies {
                let start = ContinuousClock.now
                _ = try await postOnOneLoop("records/modify", body)
                batchLatencies.append((ContinuousClock.now - start).seconds * 1000)
            }
        }
        let batchSeconds = (ContinuousClock.now - batchStart).seconds
        try await oneConnection.shutdown()
        try await oneLoop.shutdownGracefully()
        batchLatencies.sort()
        let batchCPUus = (server.cpuSeconds - batchCPU) * 1_000_000 / Double(records)
        print(
            "| request path \(kind.name): batched writes, 200 a request, 1 connection | \(records) | \(format(batchSeconds)) | "
                + "\(Int(Double(records) / batchSeconds)) | server CPU \(Int(batchCPUus)) µs a record; `desiredKeys: []`; "
                + databaseCPU(since: batchDatabaseCPU, per: records, "µs a record", scale: 1_000_000)
                + (ceiling.map { "\(String(format: "%.2f", Double(records) / batchSeconds / $0)) of the ceiling above; " } ?? "")
                + "a request p50 \(percentile(batchLatencies, 0.5)) ms, p99 \(percentile(batchLatencies, 0.99)) ms, "
                + "slowest \(String(format: "%.1f", batchLatencies.last ?? 0)) ms |")

        // The change feed from a zero token, pages of 200, the client only scanning the bytes for the next token.
        let feedCPU = server.cpuSeconds
        let feedStart = ContinuousClock.now
        var token: String?
        var delivered = 0
        var bytes = 0
        while true {
            let tokenJSON = token.map { #","syncToken":"\#($0)""# } ?? ""
            let page = try await post("changes/zone", #"{"zones":[{"zoneID":{"zoneName":"Drives"},"resultsLimit":200\#(tokenJSON)}]}"#)
            bytes += page.readableBytes
            let scanned = scanFeedPage(page)
            delivered += scanned.records
            token = scanned.syncToken
            if !scanned.moreComing { break }
        }
        let feedSeconds = (ContinuousClock.now - feedStart).seconds
        let feedCPUus = (server.cpuSeconds - feedCPU) * 1_000_000 / Double(delivered)
        print(
            "| request path \(kind.name): change feed from a zero token, pages of 200 | \(delivered) | \(format(feedSeconds)) | "
                + "\(Int(Double(delivered) / feedSeconds)) | server CPU \(String(format: "%.1f", feedCPUus)) µs a record; "
                + "\(bytes / max(delivered, 1)) bytes a record; the client scans bytes |")

        // Query pages: a filter on one field, a sort on another, following the continuation marker.
        let queryCPU = server.cpuSeconds
        let queryStart = ContinuousClock.now
        var marker: String?
        var pages = 0
        repeat {
            let markerJSON = marker.map { #","continuationMarker":"\#($0)""# } ?? ""
            let page = try await post(
                "records/query",
                #"{"zoneID":{"zoneName":"Drives"},"resultsLimit":200\#(markerJSON),"query":{"recordType":"Drive","#
                    + #""filterBy":[{"fieldName":"duration","comparator":"GREATER_THAN","fieldValue":{"value":650,"type":"DOUBLE"}}],"#
                    + #""sortBy":[{"fieldName":"startTime","ascending":false}]}}"#)
            marker = scanString(page, key: "continuationMarker")
            pages += 1
        } while marker != nil && pages < 50
        let querySeconds = (ContinuousClock.now - queryStart).seconds
        print(
            "| request path \(kind.name): query pages, filter and sort, 200 a page | \(pages) pages | \(format(querySeconds)) | | "
                + "\(String(format: "%.1f", querySeconds * 1000 / Double(pages))) ms a page, server CPU "
                + "\(String(format: "%.1f", (server.cpuSeconds - queryCPU) * 1000 / Double(pages))) ms a page |")
        // Last: the subscription and token it makes must not change what the writes above cost.
        try await notificationCosts(
            server: server, container: container, apiToken: apiToken, users: (webToken, others[1], others[0]),
            post: { try await post($0, $1, as: $2) }, cpu: { cpu($0) }, kind: kind)
        print(
            "| request path \(kind.name): server memory after the run | | | | resident \(String(format: "%.0f", server.residentMiB)) MiB, "
                + "peak \(String(format: "%.0f", server.peakResidentMiB)) MiB |")
    }

    /// What delivering a notification costs the server (issue 41): the same small write, paced the same way, by three
    /// users: one nobody waits for, one whose device long-polls (the poll's answer, and the renewed poll the client sends
    /// at once), one whose device holds an event stream. The difference is the delivery's. The three take turns in
    /// rounds, so the machine's drift falls on each alike, and the server's CPU is read per thread in nanoseconds
    /// (`/proc/PID/task/*/schedstat`) rather than in 10 ms ticks.
    static func notificationCosts(
        server: ServerProcess, container: String, apiToken: String, users: (poller: String, streamer: String, quiet: String),
        post: @Sendable (String, String, String) async throws -> ByteBuffer, cpu: (Double) -> String, kind: BenchStore
    ) async throws {
        let http = Self.manyConnections
        func courier(of user: String) async throws -> String {
            _ = try await post(
                "subscriptions/modify",
                #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"all","subscriptionType":"database"}}]}"#, user)
            var request = HTTPClientRequest(
                url: "\(server.url)/device/1/\(container)/development/tokens/create?ckAPIToken=\(apiToken)&ckWebAuthToken=\(user)")
            request.method = .POST
            request.body = .bytes(ByteBuffer(string: "{}"))
            let response = try await http.execute(request, timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 1 << 16)
            guard let courier = try JSONValue(parsing: Array(body.readableBytesView))["webcourierURL"]?.stringValue else {
                throw BenchmarkError("tokens/create: \(String(buffer: body))")
            }
            return courier
        }
        let pollCourier = try await courier(of: users.poller)
        let streamCourier = try await courier(of: users.streamer)
        @Sendable func poll() async throws -> ByteBuffer {
            let response = try await http.execute(HTTPClientRequest(url: pollCourier), timeout: .seconds(60))
            return try await response.body.collect(upTo: 1 << 16)
        }
        var streamRequest = HTTPClientRequest(url: streamCourier)
        streamRequest.headers.add(name: "Accept", value: "text/event-stream")
        let streamResponse = try await http.execute(streamRequest, timeout: .hours(1))
        let (events, arrived) = AsyncStream.makeStream(of: Void.self)
        let reader = Task {
            for try await chunk in streamResponse.body where String(buffer: chunk).contains("id: ") { arrived.yield() }
            arrived.finish()
        }
        defer { reader.cancel() }
        var eventIterator = events.makeAsyncIterator()
        // The first poll looks at the feeds; the ones after it start from there.
        _ = try await http.execute(HTTPClientRequest(url: pollCourier + "?timeout=0"), timeout: .seconds(10)).body.collect(upTo: 1 << 16)
        try await Task.sleep(for: .milliseconds(200))

        let pause = Duration.milliseconds(5)
        let (rounds, perRound) = (10, 30)
        var (quiet, polled, streamed) = (0.0, 0.0, 0.0)
        var pollLatencies: [Double] = []
        var streamLatencies: [Double] = []
        for round in 0..<rounds {
            var snapshot = server.threadCPU
            for index in 0..<perRound {
                try await Task.sleep(for: pause)
                _ = try await post("records/modify", singleWrite("quiet-\(round)-\(index)"), users.quiet)
            }
            quiet += server.cpuMilliseconds(since: snapshot)

            snapshot = server.threadCPU
            for index in 0..<perRound {
                let waiting = Task { try await poll() }
                try await Task.sleep(for: pause)
                let start = ContinuousClock.now
                _ = try await post("records/modify", singleWrite("polled-\(round)-\(index)"), users.poller)
                let answer = try await waiting.value
                pollLatencies.append((ContinuousClock.now - start).seconds * 1000)
                guard answer.readableBytes > 0 else { throw BenchmarkError("a poll answered no notification") }
            }
            polled += server.cpuMilliseconds(since: snapshot)

            snapshot = server.threadCPU
            for index in 0..<perRound {
                try await Task.sleep(for: pause)
                let start = ContinuousClock.now
                _ = try await post("records/modify", singleWrite("streamed-\(round)-\(index)"), users.streamer)
                guard await eventIterator.next() != nil else { throw BenchmarkError("the stream ended") }
                streamLatencies.append((ContinuousClock.now - start).seconds * 1000)
            }
            streamed += server.cpuMilliseconds(since: snapshot)
        }
        let count = Double(rounds * perRound)
        (quiet, polled, streamed) = (quiet / count, polled / count, streamed / count)
        pollLatencies.sort()
        streamLatencies.sort()
        print(
            "| request path \(kind.name): a write 5 ms after the last, nobody waiting | \(rounds * perRound) | | | server CPU \(cpu(quiet)) a write |"
        )
        print(
            "| request path \(kind.name): a notification delivered to a long poll, and the poll renewed | \(rounds * perRound) | | | server CPU "
                + "\(cpu(polled)) with its write; the delivery adds \(cpu(polled - quiet)); write to answer p50 "
                + "\(percentile(pollLatencies, 0.5)) ms, p99 \(percentile(pollLatencies, 0.99)) ms |")
        print(
            "| request path \(kind.name): a notification delivered to an event stream | \(rounds * perRound) | | | server CPU "
                + "\(cpu(streamed)) with its write; the delivery adds \(cpu(streamed - quiet)); write to event p50 "
                + "\(percentile(streamLatencies, 0.5)) ms, p99 \(percentile(streamLatencies, 0.99)) ms |")
    }

    /// A container with an API token and one signed-in user, as a benchmark against a server process uses them.
    static func benchAccount(_ store: any RecordStore) async throws -> (container: String, apiToken: String, webToken: String) {
        let logger = Logger(label: "bench")
        let container = "iCloud.com.example.bench"
        let accounts = AccountService(store: store)
        try await accounts.createContainer(container, logger: logger)
        let apiToken = try await accounts.createAPIToken(container: container, environment: .development, logger: logger)
        let user = try await accounts.createUser(container: container, name: "bench", password: nil, email: nil, logger: logger)
        return (container, apiToken, try await accounts.issueWebAuthToken(for: user, logger: logger))
    }

    /// One small record, created, with no fields asked back.
    /// POSTs `body` and answers the response's bytes; anything but 200 is an error that names the path.
    static func post(_ url: String, _ body: String, with http: HTTPClient) async throws -> ByteBuffer {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await http.execute(request, timeout: .seconds(120))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        guard response.status == .ok else {
            throw BenchmarkError("\(url.split(separator: "?").first ?? ""): \(response.status) \(String(buffer: bytes))")
        }
        return bytes
    }

    static func singleWrite(_ name: String) -> String {
        #"{"zoneID":{"zoneName":"Drives"},"desiredKeys":[],"operations":[{"operationType":"create","record":{"recordName":"\#(name)","#
            + #""recordType":"Note","fields":{"title":{"value":"Groceries","type":"STRING"},"done":{"value":0,"type":"INT64"}}}}]}"#
    }

    static func percentile(_ sorted: [Double], _ p: Double) -> String {
        String(format: "%.2f", sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))])
    }

    /// What a client that does not parse the page needs from it: how many records, the next token, and whether more
    /// come. Counting `"recordName"` keys counts the records (a page has no other).
    static func scanFeedPage(_ page: ByteBuffer) -> (records: Int, syncToken: String?, moreComing: Bool) {
        page.withUnsafeReadableBytes { bytes in
            (
                occurrences(of: #""recordName""#, in: bytes).count, lastString(after: #""syncToken":""#, in: bytes),
                !occurrences(of: #""moreComing":true"#, in: bytes).isEmpty
            )
        }
    }

    /// The string value of the last `"key":"…"` in a page (tokens and markers hold no escapes).
    static func scanString(_ page: ByteBuffer, key: String) -> String? {
        page.withUnsafeReadableBytes { lastString(after: #""\#(key)":""#, in: $0) }
    }

    static func lastString(after needle: String, in bytes: UnsafeRawBufferPointer) -> String? {
        guard let start = occurrences(of: needle, in: bytes).last else { return nil }
        let end = bytes[start...].firstIndex(of: UInt8(ascii: "\"")) ?? bytes.endIndex
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    /// The offsets just past each occurrence of `needle` (found with `memchr` and `memcmp`).
    static func occurrences(of needle: String, in bytes: UnsafeRawBufferPointer) -> [Int] {
        var found: [Int] = []
        var needle = needle
        needle.withUTF8 { needle in
            guard let base = bytes.baseAddress, let needleBase = needle.baseAddress, let first = needle.first else { return }
            var offset = 0
            while offset + needle.count <= bytes.count,
                let hit = memchr(base + offset, Int32(first), bytes.count - offset - needle.count + 1)
            {
                let at = base.distance(to: UnsafeRawPointer(hit))
                if memcmp(hit, needleBase, needle.count) == 0 {
                    found.append(at + needle.count)
                    offset = at + needle.count
                } else {
                    offset = at + 1
                }
            }
        }
        return found
    }
}

extension Benchmarks.ServerProcess {
    /// Each thread's CPU time so far, in nanoseconds (`/proc/PID/task/TID/schedstat`), by thread.
    var threadCPU: [Int: UInt64] {
        let tasks = "/proc/\(process.processIdentifier)/task"
        var times: [Int: UInt64] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? [] {
            guard let thread = Int(name), let stat = try? String(contentsOfFile: "\(tasks)/\(name)/schedstat", encoding: .utf8),
                let nanoseconds = stat.split(separator: " ").first.flatMap({ UInt64($0) })
            else { continue }
            times[thread] = nanoseconds
        }
        return times
    }

    /// The server's CPU time since `snapshot`, in milliseconds: what each thread used since (a thread started since
    /// counts whole; one that ended since is lost, which the pool's threads rarely do within a phase).
    func cpuMilliseconds(since snapshot: [Int: UInt64]) -> Double {
        var total: UInt64 = 0
        for (thread, now) in threadCPU { total += now - min(now, snapshot[thread] ?? 0) }
        return Double(total) / 1_000_000
    }

    /// User and system CPU time the server has used, in seconds (from `/proc/PID/stat`, in clock ticks).
    var cpuSeconds: Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8),
            let afterName = stat.range(of: ") ")
        else { return 0 }
        // Fields after the name: state is field 3; utime and stime are fields 14 and 15.
        let fields = stat[afterName.upperBound...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
