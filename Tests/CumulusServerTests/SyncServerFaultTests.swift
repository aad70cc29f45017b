import CumulusClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusSyncGRDB
import Foundation
import GRDB
import GhostCarExample
import Hummingbird
import Logging
import ServiceLifecycle
import Synchronization
import Testing

@testable import CumulusStoreSQLite

/// The sync engine against faults the real server makes, not ones a transport makes up: its own `429` and `503`
/// answers with their `retryAfter`, a restart in the middle of a paged fetch, a full disk, a device whose clock is
/// hours off.
@Suite("Sync engine: the server's own faults", .timeLimit(.minutes(10)))
struct SyncServerFaultTests {
    /// Forwards to the network, keeps every answer's status and `retryAfter`, and can act before a request goes out.
    final class ObservedTransport: Transport {
        struct Answer: Sendable {
            var path: String
            var status: Int
            var retryAfter: Int?
        }

        private let wrapped = URLSessionTransport()
        private let answers = Mutex<[Answer]>([])
        private let beforeSending: @Sendable (TransportRequest) async throws -> Void

        init(beforeSending: @escaping @Sendable (TransportRequest) async throws -> Void = { _ in }) {
            self.beforeSending = beforeSending
        }

        var recorded: [Answer] { answers.withLock { $0 } }

        func send(_ request: TransportRequest) async throws -> TransportResponse {
            try await beforeSending(request)
            let response = try await wrapped.send(request)
            var retryAfter: Int?
            if case .number(let text)? = (try? JSONValue(parsing: Array(response.body)))?["retryAfter"] { retryAfter = Int(text) }
            answers.withLock { $0.append(Answer(path: request.url.path, status: response.status, retryAfter: retryAfter)) }
            return response
        }
    }

    /// The waits an engine was told to make.
    final class Sleeps: Sendable {
        private let durations = Mutex<[Duration]>([])
        var recorded: [Duration] { durations.withLock { $0 } }
        func record(_ duration: Duration) { durations.withLock { $0.append(duration) } }
    }

    /// An engine for a device whose waits go through `sleep`, retrying up to `attempts` times.
    static func engine(
        _ device: Device, _ database: CloudDatabase, attempts: Int = 10, sleep: @escaping @Sendable (Duration) async throws -> Void
    ) -> SyncEngine {
        SyncEngine(
            SyncEngine.Configuration(
                database: database, stateStore: device.store, delegate: device.adapter,
                retryPolicy: RetryPolicy(maximumAttempts: attempts, initialDelay: .milliseconds(10)), sleep: sleep))
    }

    static func database(_ world: TestWorld, _ url: URL, _ user: TestUser, transport: (any Transport)? = nil) -> CloudDatabase {
        var container = CloudContainer(
            serverURL: url, containerIdentifier: TestWorld.container, apiToken: world.apiToken, webAuthToken: user.webAuthToken)
        if let transport { container.transport = transport }
        return container.privateCloudDatabase
    }

    // MARK: - 429

    /// The server's request throttle answers `429 THROTTLED` with a `retryAfter`: the engine waits that long before it
    /// tries again (the wait really happens, and the server then lets it through), and every drive arrives.
    @Test(arguments: TestStore.all)
    func throttledRequestsAreWaitedOutAsToldAndLoseNothing(_ store: TestStore) async throws {
        var world = try await TestWorld.make(store: store)
        // One request a second on average, three at once; the test empties the bucket before each round, so however
        // slowly a loaded machine runs, the engine's requests meet the limit.
        world.configuration.requestLimits = RequestLimits(requestsPerSecond: 1, burst: 3, concurrentRequests: 8, refusalDelay: .zero)
        let alice = world.alice
        try await SyncEngineTests.live(world) { container in
            var throughObserver = container(alice)
            let transport = ObservedTransport()
            throughObserver.transport = transport
            let database = throughObserver.privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let sleeps = Sleeps()
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            phone.engine = Self.engine(phone, database) { duration in
                sleeps.record(duration)
                try await Task.sleep(for: duration)
            }
            let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: database)
            tablet.engine = Self.engine(tablet, database) { duration in
                sleeps.record(duration)
                try await Task.sleep(for: duration)
            }
            /// Spends the user's requests until the server refuses one (through a client of its own, not counted above).
            @Sendable func emptyTheBucket() async {
                let plain = container(alice).privateCloudDatabase
                for _ in 0..<10 {
                    do { _ = try await plain.allZones() } catch { return }
                }
            }
            var ids: [String] = []
            // Three rounds, and more while no request met the limit: on a loaded machine a second can pass between
            // emptying the bucket and the engine's request, which then finds a token again.
            var round = 0
            while round < 3 || (round < 20 && !transport.recorded.contains { $0.status == 429 }) {
                for index in 0..<3 {
                    ids.append(try phone.recordDrive(name: "drive \(round)-\(index)", distance: 1000, at: Int64(round * 10 + index)))
                }
                await emptyTheBucket()
                try await phone.engine.sendChanges()
                await emptyTheBucket()
                try await tablet.engine.fetchChanges()
                round += 1
            }
            #expect(try await phone.store.pendingRecordZoneChanges().isEmpty)
            #expect(try tablet.count() == ids.count)
            let throttled = transport.recorded.filter { $0.status == 429 }
            #expect(!throttled.isEmpty, "the server never throttled: the test proves nothing")
            #expect(throttled.allSatisfy { $0.retryAfter != nil }, "every 429 says when to come back")
            // Each refusal was followed by a wait of at least what it said.
            let told = throttled.compactMap(\.retryAfter).map { Duration.seconds($0) }
            let waited = sleeps.recorded
            #expect(waited.count >= told.count)
            #expect(waited.filter { $0 >= (told.min() ?? .zero) }.count >= told.count, "waited \(waited), told \(told)")
        }
    }

    // MARK: - Disk full

    /// SQLite's disk fills while records are written (its page limit stands for the disk: the same `SQLITE_FULL` a full
    /// disk gives): the batch is refused whole with `503 TRY_AGAIN_LATER`, a reason that says so and a `retryAfter`;
    /// nothing of it is written and what was stored stays. The engine keeps its changes, waits as told, and sends them
    /// once space returns.
    @Test func aFullDiskRefusesWholeBatchesAndServiceReturnsWithTheSpace() async throws {
        let store = try SQLiteRecordStore(path: TestFiles.fresh("cumulus.sqlite"))
        let world = try await TestWorld.make(store: TestStore(name: "SQLite file, inspected") { _ in store })
        @Sendable func limitGrowth(_ full: Bool) async throws {
            try await store.writer.writeWithoutTransaction { db in
                let pages = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
                try db.execute(sql: "PRAGMA max_page_count = \(full ? pages : 1 << 30)")
            }
        }
        let alice = world.alice
        try await world.test { client in
            try await client.createZone("Z", as: alice)
            let before = try await client.modify([operation("create", "kept", fields: #"{"text":{"value":"before"}}"#)], as: .user(alice))
            #expect(before.status == 200)

            try await limitGrowth(true)
            let large = String(repeating: "x", count: 20_000)
            let batch = (0..<50).map { operation("create", "big-\($0)", fields: #"{"text":{"value":"\#(large)"}}"#) }
            let refused = try await client.modify(batch, as: .user(alice), extra: #""atomic":true,"#)
            #expect(refused.status == 503, "\(refused.json)")
            #expect(refused.serverErrorCode == "TRY_AGAIN_LATER")
            #expect(refused.reason?.contains("storage is full") == true, "\(refused.reason ?? "")")
            #expect(refused.json["retryAfter"] == .number("30"))
            // The non-atomic form of the same batch: refused as whole, record by record or at once, never half.
            let perRecord = try await client.modify(batch, as: .user(alice))
            #expect(perRecord.status == 503 || perRecord.records.allSatisfy { $0["serverErrorCode"] != nil }, "\(perRecord.status)")
            let lookedUp = try await client.lookup(["kept"] + (0..<50).map { "big-\($0)" }, as: .user(alice))
            #expect(lookedUp.records[0]["fields"]?["text"]?["value"] == .string("before"), "what was stored stays and reads")
            #expect(lookedUp.records.dropFirst().allSatisfy { $0["serverErrorCode"]?.stringValue == "NOT_FOUND" }, "nothing half-written")

            try await limitGrowth(false)
            #expect(try await client.modify(batch, as: .user(alice)).records.allSatisfy { $0["serverErrorCode"] == nil })
        }

        // Through the engine: refused while the disk is full, sent after the wait it was told, once space is back.
        try await limitGrowth(true)
        try await SyncEngineTests.live(world) { container in
            let database = container(alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let sleeps = Sleeps()
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            phone.engine = Self.engine(phone, database) { duration in
                sleeps.record(duration)
                // The operator frees space while the device waits.
                try await limitGrowth(false)
            }
            let long = String(repeating: "a long name ", count: 2_000)
            for index in 0..<20 { try phone.recordDrive(name: "\(long)\(index)", distance: 1000, at: Int64(index)) }
            try await phone.engine.sendChanges()
            #expect(sleeps.recorded == [.seconds(30)], "one wait, as long as the server said")
            #expect(try await phone.store.pendingRecordZoneChanges().isEmpty)
            let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: database)
            try await tablet.engine.fetchChanges()
            #expect(try tablet.count() == 20)
        }
    }

    // MARK: - A restart mid-fetch

    /// A server in this process over an SQLite file, stopped and started again on the same port as an operator's
    /// restart does; the second run opens the file anew.
    final class RestartableServer: Sendable {
        let path: String
        let world: TestWorld
        private let running = Mutex<(group: ServiceGroup, task: Task<Void, any Error>, port: Int)?>(nil)

        init(path: String, world: TestWorld) {
            self.path = path
            self.world = world
        }

        var url: URL { URL(string: "http://127.0.0.1:\(running.withLock { $0?.port ?? 0 })")! }

        func start(port: Int = 0) async throws {
            var configuration = world.configuration
            configuration.port = port
            let store = try SQLiteRecordStore(path: path)
            let (started, continuation) = AsyncStream.makeStream(of: String.self)
            let application = buildApplication(
                configuration: configuration, store: store, logger: .testServer, onServerRunning: { continuation.yield($0) })
            let group = ServiceGroup(configuration: .init(services: [application], logger: .testServer))
            let task = Task { try await group.run() }
            var iterator = started.makeAsyncIterator()
            let address = try #require(await iterator.next())
            let bound = try #require(URL(string: address)?.port)
            running.withLock { $0 = (group, task, bound) }
        }

        /// Shuts the server down as `SIGTERM` does, and returns once its port refuses connections: every connection of
        /// the old run, kept-alive ones included, is closed.
        func stop() async {
            guard let (group, task, port) = running.withLock({ $0 }) else { return }
            await group.triggerGracefulShutdown()
            _ = await task.result
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline, let socket = try? RawHTTPClient.openConnection(port: port) {
                RawHTTPClient.closeConnection(socket)
                try? await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    /// The server stops as the device asks for the second page of a fetch and starts again while the engine waits to
    /// retry: the fetch finishes by itself, with every record once, the first page never asked again.
    @Test func aServerRestartedInTheMiddleOfAPagedFetchLosesAndRepeatsNothing() async throws {
        let path = try TestFiles.fresh("cumulus.sqlite")
        let first = try SQLiteRecordStore(path: path)
        let world = try await TestWorld.make(store: TestStore(name: "SQLite file") { _ in first })
        let server = RestartableServer(path: path, world: world)
        try await server.start()
        let port = server.url.port ?? 0
        let alice = world.alice
        let database = Self.database(world, server.url, alice)
        try await database.save(zones: [GhostCar.zone])
        let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
        try await phone.recordNumberedDrives(1_000)
        try await phone.engine.sendChanges()

        let stopped = Mutex(false)
        let transport = ObservedTransport { request in
            // The second page: the server goes away before it is asked for.
            guard PipelinedFetchTests.isLaterPage(request), !stopped.withLock({ $0 }) else { return }
            stopped.withLock { $0 = true }
            await server.stop()
        }
        let restarted = Mutex(false)
        let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: database)
        let flaky = Self.database(world, server.url, alice, transport: transport)
        tablet.engine = Self.engine(tablet, flaky, attempts: 20) { _ in
            // Back while the engine waits to retry (on the same port, as behind the same address).
            let first = restarted.withLock { done in
                defer { done = true }
                return !done
            }
            if first { try await server.start(port: port) }
            try await Task.sleep(for: .milliseconds(20))
        }
        try await tablet.engine.fetchChanges()
        #expect(stopped.withLock { $0 } && restarted.withLock { $0 }, "the server was restarted during the fetch")
        #expect(try tablet.count() == 1_000)
        let pages = transport.recorded.filter { $0.path.hasSuffix("changes/zone") }
        #expect(pages.count == 5, "five pages of 200, each answered once: \(pages.count)")
        await server.stop()
    }

    // MARK: - A device clock hours off

    /// A device whose clock is six hours fast: what the server decides (record stamps, change tokens, sign-in) does not
    /// read it, and offline edits of different fields from that device and a correct one are both kept (the merge
    /// compares with the last server version, not clocks).
    @Test(arguments: TestStore.all)
    func aDeviceClockHoursOffChangesNothingTheServerDecides(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let sixHours: Int64 = 6 * 3600 * 1000
            let fast = try Device.testing(path: try SyncEngineTests.temporaryPath("fast"), database: database)
            let right = try Device.testing(path: try SyncEngineTests.temporaryPath("right"), database: database)

            let id = try fast.recordDrive(name: "From the future", distance: 1000, at: now + sixHours)
            try await fast.engine.sendChanges()
            let stored = try #require(try await database.records(named: [id], in: GhostCar.zone)[id])
            for stamp in [stored.created, stored.modified] {
                let timestamp = try #require(stamp?.timestamp)
                #expect(abs(timestamp - now) < 3600 * 1000, "the server stamps with its own clock, not the device's")
            }
            try await right.engine.fetchChanges()
            #expect(try right.names() == [id: "From the future"])

            // Offline on both: the fast device renames, the right one changes the distance.
            try fast.rename(id, to: "Renamed ahead", at: now + sixHours + 1000)
            try right.setDistance(id, to: 2000, at: now + 1000)
            try await right.engine.sendChanges()
            try await fast.engine.sendChanges()
            try await right.engine.fetchChanges()
            try await fast.engine.fetchChanges()
            for device in [fast, right] {
                #expect(try device.names() == [id: "Renamed ahead"])
                #expect(try device.distances() == [id: 2000])
            }

            // Change tokens are positions in the feed, not times: a fetch from the right device's token finds exactly
            // the fast device's next change, then nothing.
            let second = try fast.recordDrive(name: "Second", distance: 10, at: now + sixHours + 2000)
            try await fast.engine.sendChanges()
            let before = try right.count()
            try await right.engine.fetchChanges()
            #expect(try right.count() == before + 1)
            #expect(try right.names()[second] == "Second")
        }
    }
}
