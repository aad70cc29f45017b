import AsyncHTTPClient
import CumulusCore
import CumulusModel
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// What one holder of an app's API token can do to the server: the peak memory of the worst request bodies, each
/// measured in a fresh server process of its own.
extension Benchmarks {
    /// A body of `size` bytes made of `element` repeated inside `open` … `close`.
    static func repeatedBody(_ open: String, _ element: String, _ close: String, size: Int) -> [UInt8] {
        var body = Array(open.utf8)
        let element = Array(element.utf8)
        let budget = size - open.utf8.count - close.utf8.count
        body.reserveCapacity(size)
        while body.count + element.count + 1 <= budget {
            if body.count > open.utf8.count { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: element)
        }
        body.append(contentsOf: close.utf8)
        return body
    }

    static func hostileBodies() async throws {
        let size = Limits().maximumRequestBodySize - 1024
        let bodies: [(String, [UInt8])] = [
            ("`[{},{},…]`", repeatedBody("[", "{}", "]", size: size)),
            ("`[[],[],…]`", repeatedBody("[", "[]", "]", size: size)),
            ("`[0,0,…]`", repeatedBody("[", "0", "]", size: size)),
            ("`[{\"a\":{}},…]`", repeatedBody("[", #"{"a":{}}"#, "]", size: size)),
            ("`{\"k1\":0,\"k2\":0,…}` (distinct keys)", distinctKeysBody(size: size)),
            ("`[\"…16 MiB…\"]`", Array("[\"".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: size - 4) + Array("\"]".utf8)),
            ("`[[[[…` 64 deep, repeated", repeatedBody("[", String(repeating: "[", count: 62) + String(repeating: "]", count: 62), "]", size: size)),
        ]
        print()
        print("| body (16 MiB) to `public/records/query` | answer | server peak RSS before → after (MiB) | seconds |")
        print("|---|---|---:|---:|")
        for (name, body) in bodies {
            let (store, cleanUp, location) = try await BenchStore.sqlite.makeLocated()
            defer { cleanUp() }
            let logger = Logger(label: "bench")
            let accounts = AccountService(store: store)
            let container = "iCloud.com.example.bench"
            try await accounts.createContainer(container, logger: logger)
            let apiToken = try await accounts.createAPIToken(container: container, environment: .development, logger: logger)
            let server = try ServerProcess.start(store: location)
            defer { server.stop() }
            let before = server.peakResidentMiB
            var request = HTTPClientRequest(url: "\(server.url)/database/1/\(container)/development/public/records/query?ckAPIToken=\(apiToken)")
            request.method = .POST
            request.body = .bytes(ByteBuffer(bytes: body))
            let start = ContinuousClock.now
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(300))
            let answer = try await response.body.collect(upTo: 1 << 20)
            let seconds = (ContinuousClock.now - start).seconds
            let code = (try? JSONValue(parsing: Array(answer.readableBytesView)))?["serverErrorCode"]?.stringValue ?? ""
            print(
                "| \(name) | \(response.status.code) \(code) | \(Int(before)) → \(Int(server.peakResidentMiB)) | \(format(seconds)) |")
        }
    }

    /// The bytes of an SQLite store's database and log files.
    static func fileBytes(_ path: String) -> Int64 {
        [path, path + "-wal"].reduce(0) { total, file in
            total + (((try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? NSNumber)?.int64Value ?? 0)
        }
    }

    /// An object of as many distinct keys as fit: each key costs the parser a dictionary entry.
    static func distinctKeysBody(size: Int) -> [UInt8] {
        var body = Array("{".utf8)
        body.reserveCapacity(size)
        var index = 0
        while body.count + 16 < size {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: "\"k\(index)\":0".utf8)
            index += 1
        }
        body.append(UInt8(ascii: "}"))
        return body
    }

    /// What floods the server while a well-behaved user queries.
    enum Flood: CaseIterable {
        case none
        /// Another signed-in user's queries, with the per-caller limits off.
        case userQueriesUnlimited
        /// Another signed-in user's queries.
        case userQueries
        /// Queries each with a made-up web auth token.
        case forgedWebAuthTokens
        /// Courier polls on made-up push tokens, with no credential at all.
        case forgedCourierPolls
        /// Sign-ins with a wrong password for one name, refused by the sign-in limits after the first ten.
        case refusedSignIns
        /// Another signed-in user's `records/reconcile` of 64 empty ranges past the end of a 50,000-record zone, eight
        /// at once (issue 54: each read the whole zone 64 times on SQLite).
        case emptyReconciliations

        var limits: Bool { self != .userQueriesUnlimited }

        /// Connections the flood keeps busy.
        var connections: Int { self == .emptyReconciliations ? 8 : 512 }

        var name: String {
            switch self {
            case .none: "none"
            case .userQueriesUnlimited: "512 connections of another user, limits off"
            case .userQueries: "512 connections of another user, limits on"
            case .forgedWebAuthTokens: "512 connections, a made-up web auth token each request"
            case .forgedCourierPolls: "512 connections of courier polls on made-up push tokens, no credential"
            case .refusedSignIns: "512 connections of sign-ins with a wrong password, refused after the first ten"
            case .emptyReconciliations: "8 connections of another user's reconciliations, 64 empty ranges of a 50,000-record zone"
            }
        }
    }

    /// A well-behaved user's latency while each flood of ``Flood`` runs from 512 connections, against a baseline
    /// without one.
    static func floodLatency() async throws {
        print()
        print("| well-behaved user's `records/query`, one at a time | flood | p50 ms | p99 ms | flooder's answers |")
        print("|---|---|---:|---:|---|")
        for kind in Flood.allCases {
            let (flood, limits) = (kind != .none, kind.limits)
            let (store, cleanUp, location) = try await BenchStore.sqlite.makeLocated()
            defer { cleanUp() }
            let logger = Logger(label: "bench")
            let accounts = AccountService(store: store, passwordHasher: PasswordHasher(rounds: 1 << 10))
            let container = "iCloud.com.example.bench"
            try await accounts.createContainer(container, logger: logger)
            let apiToken = try await accounts.createAPIToken(container: container, environment: .development, logger: logger)
            var tokens: [String] = []
            for name in ["victim", "flooder"] {
                let user = try await accounts.createUser(container: container, name: name, password: nil, email: nil, logger: logger)
                tokens.append(try await accounts.issueWebAuthToken(for: user, logger: logger))
            }
            let server = try ServerProcess.start(store: location, requestLimits: limits)
            defer { server.stop() }
            let http = Self.manyConnections
            let database = "\(server.url)/database/1/\(container)/development/private"
            // The well-behaved user has a client (and event loop) of its own, as it would on another machine.
            let own = HTTPClient(eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup(numberOfThreads: 1)))
            @Sendable func post(_ operation: String, _ token: String, _ body: String, client: HTTPClient = http) async throws -> Int {
                try await post(url: "\(database)/\(operation)?ckAPIToken=\(apiToken)&ckWebAuthToken=\(token)", body, client: client)
            }
            @Sendable func post(url: String, _ body: String, client: HTTPClient = http) async throws -> Int {
                var request = HTTPClientRequest(url: url)
                request.method = .POST
                request.body = .bytes(ByteBuffer(string: body))
                let response = try await client.execute(request, timeout: .seconds(60))
                _ = try await response.body.collect(upTo: 16 << 20)
                return Int(response.status.code)
            }
            // Each user: 1,000 notes in a zone (the flooder 50,000, for the reconciliations).
            for token in tokens {
                _ = try await post("zones/modify", token, #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Notes"}}}]}"#)
                for batch in 0..<(kind == .emptyReconciliations && token == tokens[1] ? 250 : 5) {
                    let operations = (0..<200).map { index in
                        #"{"operationType":"create","record":{"recordName":"n\#(batch * 200 + index)","recordType":"Note","fields":{"rank":{"value":\#(index)},"title":{"value":"note \#(index)"}}}}"#
                    }
                    _ = try await post(
                        "records/modify", token, #"{"zoneID":{"zoneName":"Notes"},"operations":[\#(operations.joined(separator: ","))]}"#)
                }
            }
            let query =
                #"{"zoneID":{"zoneName":"Notes"},"resultsLimit":50,"query":{"recordType":"Note","filterBy":[{"fieldName":"rank","comparator":"GREATER_THAN","fieldValue":{"value":100}}],"sortBy":[{"fieldName":"rank","ascending":false}]}}"#
            let tally = FloodTally()
            let flooder = tokens[1]
            let emptyRanges = (0..<64).map { index in
                // Names past the zone's last ("z" after "n…"), in their byte order, so the ranges do not overlap.
                #"{"lowerBound":"z\#(1000 + index * 2)","upperBound":"z\#(1001 + index * 2)","fingerprint":"\#(String(repeating: "0", count: 64))","recordCount":0}"#
            }
            let reconcile = #"{"zoneID":{"zoneName":"Notes"},"ranges":[\#(emptyRanges.joined(separator: ","))]}"#
            let signIn = #"{"name":"victim","password":"a wrong guess"}"#
            @Sendable func madeUp(_ length: Int, _ digits: String) -> String { String((0..<length).map { _ in digits.randomElement()! }) }
            @Sendable func floodOnce() async throws -> Int {
                switch kind {
                case .none, .userQueries, .userQueriesUnlimited:
                    return try await post("records/query", flooder, query)
                case .forgedWebAuthTokens:
                    return try await post("records/query", madeUp(43, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"), query)
                case .refusedSignIns:
                    return try await post(url: "\(server.url)/auth/1/\(container)/development/signin?ckAPIToken=\(apiToken)", signIn)
                case .emptyReconciliations:
                    return try await post("records/reconcile", flooder, reconcile)
                case .forgedCourierPolls:
                    let response = try await http.execute(
                        HTTPClientRequest(url: "\(server.url)/courier/1/\(container)/development/\(madeUp(64, "0123456789abcdef"))?timeout=30"),
                        timeout: .seconds(60))
                    _ = try await response.body.collect(upTo: 1 << 20)
                    return Int(response.status.code)
                }
            }
            let flooders = Task {
                guard flood else { return }
                await withTaskGroup(of: Void.self) { group in
                    for _ in 0..<kind.connections {
                        group.addTask {
                            while !tally.stopped {
                                tally.count((try? await floodOnce()) ?? 0)
                            }
                        }
                    }
                }
            }
            if flood { try await Task.sleep(for: .seconds(2)) }
            let storeBytes = Self.fileBytes(location)
            var latencies: [Double] = []
            let until = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < until {
                let start = ContinuousClock.now
                let status = try await post("records/query", tokens[0], query, client: own)
                guard status == 200 else { throw BenchmarkError("the well-behaved user got \(status)") }
                latencies.append((ContinuousClock.now - start).seconds * 1000)
                try await Task.sleep(for: .milliseconds(20))
            }
            tally.stop()
            await flooders.value
            try await own.shutdown()
            latencies.sort()
            func percentile(_ p: Double) -> String { String(format: "%.1f", latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]) }
            let grown = Double(Self.fileBytes(location) - storeBytes) / 1_048_576
            let answers = tally.statuses.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key == 0 ? "failed" : String($0.key))" }
            print(
                "| \(latencies.count) queries | \(kind.name) | \(percentile(0.5)) | \(percentile(0.99)) | \(answers.joined(separator: ", ")); "
                    + "the store's files grew \(String(format: "%.1f", grown)) MiB in the 10 s |")
        }
    }
}

/// The flooder's answers by status (0: the request failed), and when to stop.
final class FloodTally: Sendable {
    private let counts = Mutex([Int: Int]())
    private let stopping = Atomic(false)

    var statuses: [Int: Int] { counts.withLock { $0 } }
    var stopped: Bool { stopping.load(ordering: .relaxed) }

    func count(_ status: Int) { counts.withLock { $0[status, default: 0] += 1 } }
    func stop() { stopping.store(true, ordering: .relaxed) }
}
