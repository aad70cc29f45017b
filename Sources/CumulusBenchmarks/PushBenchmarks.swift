import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusServerHTTP
import CumulusStore
import CumulusStorePostgres
import CumulusStoreSQLite
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import Synchronization

/// Push delivery, measured against a server in a process of its own (so its memory is its own): write-to-notification
/// latency with many connected subscribers, notifications delivered per second, and the server's memory with many idle
/// streams.
extension Benchmarks {
    /// The server side: `CumulusBenchmarks --serve STORE [--request-limits]` runs Cumulus on a store the benchmark
    /// prepared and prints its URL; with `--request-limits`, the database API's per-caller limits are a deployment's.
    static func serve(_ location: String, requestLimits: RequestLimits, fanOut: ChangeFanOut = .notify) async throws {
        // As `cumulus serve` does.
        MemoryAllocatorTuning.apply(environment: ProcessInfo.processInfo.environment)
        // `cumulus serve`'s log handler (swift-log's default formats every metadata change as it is made).
        var logger = Logger(label: "bench-server") { StructuredLogHandler(label: $0, format: .logfmt) }
        logger.logLevel = .warning
        var configuration = ServerConfiguration(port: 0, pushLimits: PushLimits(maximumConnections: 50_000))
        // Every simulated client comes from this machine's one address.
        configuration.connectionLimits = ConnectionLimits(maximumConnections: 60_000, maximumConnectionsPerAddress: 60_000)
        configuration.requestLimits = requestLimits
        // The asset benchmark streams a 1 GiB upload.
        configuration.assetLimits.maximumSize = 4 << 30
        if location.hasPrefix("postgres") {
            let postgres = try PostgresLocation(url: location)
            let client = PostgresClient(configuration: postgres.clientConfiguration(maximumConnections: 20))
            configuration.assetStorage = PostgresAssetStorage(client: client)
            let app = buildApplication(
                configuration: configuration, store: PostgresRecordStore(client: client, fanOut: fanOut), logger: logger,
                onServerRunning: { url in announce(url) })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                group.addTask { try await app.runService() }
                try await group.next()
                group.cancelAll()
            }
        } else {
            let app = buildApplication(
                configuration: configuration, store: try SQLiteRecordStore(path: location), logger: logger,
                onServerRunning: { url in announce(url) })
            try await app.runService()
        }
    }

    /// Tells the benchmark where the server listens, unbuffered (standard output is a pipe).
    static func announce(_ url: String) {
        FileHandle.standardOutput.write(Data("URL \(url)\n".utf8))
    }

    /// A server process of this executable's own.
    struct ServerProcess {
        let process: Process
        let url: String

        static func start(store: String, requestLimits: Bool = false, watching: Bool = false) throws -> ServerProcess {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            process.arguments = ["--serve", store] + (requestLimits ? ["--request-limits"] : []) + (watching ? ["--fan-out-watch"] : [])
            let text = try firstLine(of: process)
            guard let range = text.range(of: "URL ") else { throw CancellationError() }
            return ServerProcess(process: process, url: String(text[range.upperBound...].prefix { !$0.isWhitespace }))
        }

        /// Starts `process` and returns the first line it writes on its standard output (where a server says its URL).
        static func firstLine(of process: Process) throws -> String {
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let chunk = output.fileHandleForReading.availableData
                guard !chunk.isEmpty else { throw CancellationError() }
                line.append(chunk)
            }
            return String(decoding: line, as: UTF8.self)
        }

        /// `cumulus serve` as an operator runs it, on the store the benchmark prepared: the `cumulus` executable built
        /// beside this one (`swift build -c release --product cumulus`), with its default limits and log level; only the
        /// per-user request rate is raised, since one benchmark user sends every request. `nil` when no `cumulus` was
        /// built beside the benchmark.
        static func startDeployed(store: String, databaseConnections: Int? = nil, arguments more: [String] = []) throws -> ServerProcess? {
            let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
                .appendingPathComponent("cumulus")
            guard FileManager.default.isExecutableFile(atPath: executable.path) else { return nil }
            let process = Process()
            process.executableURL = executable
            let location =
                store.hasPrefix("postgres")
                ? ["--database", store] : ["--data", URL(fileURLWithPath: store).deletingLastPathComponent().path]
            process.arguments =
                ["serve", "--port", "0", "--requests-per-second", "1000000"] + location
                + (databaseConnections.map { ["--database-connections", "\($0)"] } ?? []) + more
            // The access log, one line a request, is written as deployed, and dropped here.
            process.standardError = FileHandle.nullDevice
            let url = try firstLine(of: process).prefix { !$0.isWhitespace }
            guard url.hasPrefix("http") else { throw BenchmarkError("cumulus serve printed \(url)") }
            return ServerProcess(process: process, url: String(url))
        }

        /// Resident memory now, in MiB.
        var residentMiB: Double { status("VmRSS:") }

        /// The most resident memory the process has had, in MiB.
        var peakResidentMiB: Double { status("VmHWM:") }

        private func status(_ field: String) -> Double {
            guard let status = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8),
                let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
                let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "")
            else { return 0 }
            return kilobytes / 1024
        }

        func stop() {
            process.terminate()
            process.waitUntilExit()
        }
    }

    /// A client that opens as many connections as it is asked to (the shared one keeps 8 per host), for the life of
    /// the process.
    static let manyConnections: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(600), concurrentHTTP1ConnectionsPerHostSoftLimit: 30_000)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    /// A user of the push benchmark: signed in, with a zone and a database subscription.
    struct Subscriber: Sendable {
        var webToken: String
        var courier: String = ""
    }

    ///
    /// With `instances: 2` (PostgreSQL), a second server joins: every other subscriber's stream is held by it, writes go
    /// through the first, and the latencies are of the notifications that cross from one instance to the other.
    ///
    /// With `watching`, the instances wake each other by watching their connections' databases instead of `NOTIFY`.
    static func push(subscribers count: Int, idleStreams: Int, on kind: BenchStore, instances: Int = 1, watching: Bool = false) async throws {
        let (store, cleanUp, location) = try await kind.makeLocated()
        defer { cleanUp() }
        let logger = Logger(label: "bench")
        let container = "iCloud.com.example.bench"
        let accounts = AccountService(store: store)
        try await accounts.createContainer(container, logger: logger)
        let apiToken = try await accounts.createAPIToken(container: container, environment: .development, logger: logger)
        var subscribers: [Subscriber] = []
        for index in 0..<count {
            let user = try await accounts.createUser(container: container, name: "user\(index)", password: nil, email: nil, logger: logger)
            subscribers.append(Subscriber(webToken: try await accounts.issueWebAuthToken(for: user, logger: logger)))
        }
        let server = try ServerProcess.start(store: location, watching: watching)
        defer { server.stop() }
        let second = instances > 1 ? try ServerProcess.start(store: location, watching: watching) : nil
        defer { second?.stop() }
        progress("push: \(count) users made; server at \(server.url)")
        /// Where a subscriber's stream is held: every other one on the second instance, when there is one.
        func holds(_ index: Int) -> Bool { second != nil && index % 2 == 1 }

        let http = Self.manyConnections
        let base = server.url
        @Sendable func post(_ path: String, _ subscriber: Subscriber, _ body: String) async throws -> JSONValue {
            let separator = path.contains("?") ? "&" : "?"
            var request = HTTPClientRequest(url: "\(base)\(path)\(separator)ckAPIToken=\(apiToken)&ckWebAuthToken=\(subscriber.webToken)")
            request.method = .POST
            request.body = .bytes(ByteBuffer(string: body))
            let response = try await http.execute(request, timeout: .seconds(120))
            let bytes = try await response.body.collect(upTo: 1 << 20)
            guard response.status == .ok else { throw BenchmarkError("\(path): \(response.status) \(String(buffer: bytes))") }
            return try JSONValue(parsing: Array(bytes.readableBytesView))
        }
        let database = "/database/1/\(container)/development/private"

        // Each subscriber: a zone, a database subscription, a push token.
        try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for (index, subscriber) in subscribers.enumerated() {
                if index >= 16 { if let (done, courier) = try await group.next() { subscribers[done].courier = courier } }
                let courierBase = holds(index) ? second?.url : nil
                group.addTask {
                    _ = try await post(
                        "\(database)/zones/modify", subscriber,
                        #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Drives"}}}]}"#)
                    _ = try await post(
                        "\(database)/subscriptions/modify", subscriber,
                        #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"all","subscriptionType":"database"}}]}"#)
                    let token = try await post("/device/1/\(container)/development/tokens/create", subscriber, "{}")
                    let courier = token["webcourierURL"]?.stringValue ?? ""
                    guard let courierBase, courier.hasPrefix(base) else { return (index, courier) }
                    return (index, courierBase + courier.dropFirst(base.count))
                }
            }
            for try await (done, courier) in group { subscribers[done].courier = courier }
        }
        let baseline = server.residentMiB
        progress("push: subscribed")
        let streaming = subscribers

        // Every subscriber holds a stream open; each event's arrival is reported with the subscriber's index.
        let (arrivals, arrived) = AsyncStream.makeStream(of: (Int, ContinuousClock.Instant).self)
        let connected = Counter()
        let events = Counter()
        let lastEvent = LastEvent()
        let readers = Task {
            await withTaskGroup(of: Void.self) { group in
                for (index, subscriber) in streaming.enumerated() {
                    group.addTask {
                        var request = HTTPClientRequest(url: subscriber.courier)
                        request.headers.add(name: "Accept", value: "text/event-stream")
                        guard let response = try? await http.execute(request, timeout: .hours(1)) else { return }
                        connected.increment()
                        do {
                            for try await chunk in response.body {
                                // One event per chunk in practice; count each `id:` line.
                                let text = String(buffer: chunk)
                                var from = text.startIndex
                                while let range = text.range(of: "id: ", range: from..<text.endIndex) {
                                    let now = ContinuousClock.now
                                    arrived.yield((index, now))
                                    events.increment()
                                    lastEvent.set(now)
                                    from = range.upperBound
                                }
                            }
                        } catch {}
                    }
                }
            }
        }
        defer { readers.cancel() }
        while connected.value < count { try await Task.sleep(for: .milliseconds(50)) }
        // Let every stream finish its opening checks and wait.
        try await Task.sleep(for: .seconds(2))
        var iterator = arrivals.makeAsyncIterator()
        progress("push: \(count) streams open")

        // Latency: one write at a time, each to another subscriber, timed from sending the write to the event.
        var latencies: [Double] = []
        var writeTimes: [Double] = []
        let samples = min(500, count)
        for sample in 0..<samples {
            var target = (sample * 7919) % count
            // Across instances: only notifications that cross.
            if second != nil, !holds(target) { target = (target + 1) % count }
            let start = ContinuousClock.now
            _ = try await post(
                "\(database)/records/modify", streaming[target],
                #"{"zoneID":{"zoneName":"Drives"},"operations":[{"operationType":"create","record":{"recordName":"l\#(sample)","recordType":"Drive","fields":{"n":{"value":\#(sample)}}}}]}"#
            )
            writeTimes.append((ContinuousClock.now - start).seconds * 1000)
            if sample % 100 == 0 { progress("push: latency sample \(sample)") }
            while let (index, at) = await iterator.next() {
                if index == target {
                    latencies.append((at - start).seconds * 1000)
                    break
                }
            }
        }
        latencies.sort()
        writeTimes.sort()
        func percentile(_ values: [Double], _ p: Double) -> String {
            String(format: "%.1f", values[min(values.count - 1, Int(Double(values.count) * p))])
        }
        let across = second == nil ? "" : watching ? " across two instances, watching every 25 ms" : " across two instances, NOTIFY"
        print(
            "| push \(kind.name): write to notification, \(count) subscribers streaming\(across) | \(samples) writes | "
                + "p50 \(percentile(latencies, 0.5)) ms | p99 \(percentile(latencies, 0.99)) ms | "
                + "the write's own round trip p50 \(percentile(writeTimes, 0.5)) ms, p99 \(percentile(writeTimes, 0.99)) ms |")

        // Throughput: 16 writers, each write to another subscriber; every write is one notification.
        let writes = min(4 * count, 4_000)
        let before = events.value
        let throughputStart = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<16 {
                group.addTask {
                    for write in stride(from: writer, to: writes, by: 16) {
                        _ = try await post(
                            "\(database)/records/modify", streaming[write % count],
                            #"{"zoneID":{"zoneName":"Drives"},"operations":[{"operationType":"forceUpdate","record":{"recordName":"t\#(write)","recordType":"Drive","fields":{"n":{"value":\#(write)}}}}]}"#
                        )
                    }
                }
            }
            try await group.waitForAll()
        }
        let written = ContinuousClock.now
        // Delivery is done when no event came for a second.
        var delivered = -1
        while events.value != delivered {
            delivered = events.value
            try await Task.sleep(for: .seconds(1))
        }
        delivered -= before
        let seconds = (lastEvent.value - throughputStart).seconds
        print(
            "| push \(kind.name): notifications delivered, 16 writers to \(count) subscribers\(across) | \(writes) writes | "
                + "\(format(seconds)) | \(Int(Double(delivered) / seconds)) notifications/s | "
                + "\(delivered) notifications (writes to one subscriber between its checks coalesce); writes done after "
                + "\(format((written - throughputStart).seconds)) s |")

        // Memory: many more streams, idle.
        guard idleStreams > 0, second == nil else { return }
        let perUser = max(1, (idleStreams + count - 1) / count)
        let idleReady = Counter()
        let settled = Counter()
        let owners = (0..<idleStreams).map { streaming[($0 / perUser) % count] }
        let idle = Task {
            await withTaskGroup(of: Void.self) { group in
                // In waves of 200: a client opening thousands of connections at once times out on its own pool.
                for (index, subscriber) in owners.enumerated() {
                    group.addTask {
                        let response: HTTPClientResponse
                        do {
                            let token = try await post("/device/1/\(container)/development/tokens/create", subscriber, "{}")
                            var request = HTTPClientRequest(url: token["webcourierURL"]?.stringValue ?? "")
                            request.headers.add(name: "Accept", value: "text/event-stream")
                            response = try await http.execute(request, timeout: .hours(1))
                        } catch {
                            progress("push: an idle stream failed to open: \(error)")
                            settled.increment()
                            return
                        }
                        idleReady.increment()
                        settled.increment()
                        do { for try await _ in response.body {} } catch {}
                    }
                    while settled.value <= index - 200 { try? await Task.sleep(for: .milliseconds(10)) }
                }
            }
        }
        defer { idle.cancel() }
        // Until every stream is open, or no more open for ten seconds (the client or the server refusing more).
        var open = -1
        var quietSince = ContinuousClock.now
        while idleReady.value < idleStreams, ContinuousClock.now - quietSince < .seconds(10) {
            if idleReady.value != open {
                open = idleReady.value
                quietSince = ContinuousClock.now
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        progress("push: \(idleReady.value) idle streams open")
        try await Task.sleep(for: .seconds(3))
        let total = server.residentMiB
        let streams = idleReady.value + count
        print(
            "| push \(kind.name): server memory with \(streams) open streams | \(streams) streams | — | — | "
                + "\(Int(total)) MiB resident in total (\(Int(baseline)) MiB before the streams opened; "
                + "\(String(format: "%.1f", (total - baseline) * 1024 / Double(streams))) KiB per stream) |")
    }
}

struct BenchmarkError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A count tasks add to.
final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    func increment() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// A line on standard error: where a long benchmark is.
func progress(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// When the last event came.
final class LastEvent: Sendable {
    private let instant = Mutex(ContinuousClock.now)
    func set(_ value: ContinuousClock.Instant) { instant.withLock { $0 = value } }
    var value: ContinuousClock.Instant { instant.withLock { $0 } }
}
