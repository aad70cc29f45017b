import CumulusClient
import CumulusModel
import CumulusSyncGRDB
import CumulusTesting
import Foundation
import GRDB
import GhostCarExample
import HummingbirdTesting
import Synchronization
import Testing

/// `run()` and the courier in a world that fails: no network at start, a change made as another device starts, the
/// courier's connection cut or its answer lost, access to a zone ended. A real server on loopback; the fallback fetch is
/// an hour away, so whatever arrives came through push (or the fetch the engine makes each time push becomes live).
@Suite("Sync engine: push that never stalls", .timeLimit(.minutes(10)))
struct SyncPushTests {
    /// Polls `condition` every 20 ms until it holds or `seconds` pass (a bound for a loaded machine, not a measure).
    static func eventually(within seconds: Double = 60, _ condition: () async throws -> Bool) async rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try await condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return try await condition()
    }

    /// Runs `device`'s engine by itself for the length of `body`.
    static func running<T: Sendable>(_ device: Device, _ body: () async throws -> T) async throws -> T {
        let engine = device.engine
        let task = Task { await engine.run(sendDelay: .milliseconds(50), fallbackInterval: .seconds(3600)) }
        defer { task.cancel() }
        let result = try await body()
        task.cancel()
        await task.value
        return result
    }

    static func isPushLive(_ device: Device) async -> Bool { await device.engine.status.isPushLive }

    @Test func anEngineStartedWithoutNetworkUsesPushOnceTheNetworkReturns() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let phoneDatabase = container(world.alice).privateCloudDatabase
            try await phoneDatabase.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: phoneDatabase)
            let (laptopDatabase, faults) = SyncFaultTests.flaky(container(world.alice))
            // No network: every request of the laptop fails before it leaves.
            faults.inject(.failBeforeSending, times: .max)
            let laptop = try Device.testing(path: try SyncEngineTests.temporaryPath("laptop"), database: laptopDatabase)
            try await Self.running(laptop) {
                // The engine tried to set up its courier more than once, and failed.
                #expect(await Self.eventually { faults.sentPaths.filter { $0.hasSuffix("subscriptions/modify") }.count >= 3 })
                #expect(await !Self.isPushLive(laptop))
                let early = try phone.recordDrive(name: "While the laptop was offline", distance: 1, at: 1)
                try await phone.engine.sendChanges()

                faults.heal()
                // Push comes back by itself, and what happened while it was away is fetched then.
                #expect(await Self.eventually { await Self.isPushLive(laptop) })
                #expect(try await Self.eventually { try laptop.names()[early] != nil })
                // Later edits come by push alone.
                for (index, name) in ["First after", "Second after"].enumerated() {
                    let id = try phone.recordDrive(name: name, distance: Double(index), at: Int64(10 + index))
                    try await phone.engine.sendChanges()
                    #expect(try await Self.eventually { try laptop.names()[id] == name }, "\(name)")
                }
            }
        }
    }

    /// A commit between another device's first fetch and its push token was never told; the engine now fetches once
    /// as soon as its courier is live. The token's request is slowed so that the commit lands, every time, after the
    /// tablet's first fetch and before its token exists.
    @Test func aChangeSavedAsAnotherDeviceStartsArrivesWithoutTheFallback() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            for run in 0..<50 {
                let (tabletDatabase, faults) = SyncFaultTests.flaky(container(world.alice))
                faults.inject(.delay(.milliseconds(150))) { $0.url.path.hasSuffix("tokens/create") }
                let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet-\(run)"), database: tabletDatabase)
                try await Self.running(tablet) {
                    // The first fetch is over; the token is on its way.
                    let fetched = await Self.eventually {
                        let phase = await tablet.engine.status.phase
                        return faults.sentPaths.contains { $0.hasSuffix("changes/zone") } && phase == .idle
                    }
                    #expect(fetched)
                    let id = try phone.recordDrive(name: "Saved in run \(run)", distance: 1, at: Int64(run))
                    try await phone.engine.sendChanges()
                    #expect(try await Self.eventually { try tablet.names()[id] != nil }, "run \(run)")
                }
            }
        }
    }

    /// The courier's connection is cut (a server restarting, a proxy's idle timeout) while a poll waits, and changes
    /// are made while the device cannot reach the server: it reconnects and misses nothing.
    @Test func aCutCourierReconnectsAndNothingIsMissed() async throws {
        let world = try await TestWorld.make()
        try await world.application().test(.live) { client in
            let port = try #require(client.port)
            let proxy = try await TCPProxy(to: "127.0.0.1", port: port)
            func account(_ port: Int) -> CloudContainer {
                CloudContainer(
                    serverURL: URL(string: "http://127.0.0.1:\(port)")!, containerIdentifier: TestWorld.container, apiToken: world.apiToken,
                    webAuthToken: world.alice.webAuthToken)
            }
            let phoneDatabase = account(port).privateCloudDatabase
            try await phoneDatabase.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: phoneDatabase)
            let laptop = try Device.testing(path: try SyncEngineTests.temporaryPath("laptop"), database: account(proxy.port).privateCloudDatabase)
            try await Self.running(laptop) {
                #expect(await Self.eventually { await Self.isPushLive(laptop) })
                proxy.cut()
                #expect(await Self.eventually { await !Self.isPushLive(laptop) })
                let during = try phone.recordDrive(name: "While cut", distance: 1, at: 1)
                try await phone.engine.sendChanges()
                proxy.restore()
                #expect(try await Self.eventually { try laptop.names()[during] != nil })
                #expect(await Self.eventually { await Self.isPushLive(laptop) })
                let after = try phone.recordDrive(name: "After", distance: 2, at: 2)
                try await phone.engine.sendChanges()
                #expect(try await Self.eventually { try laptop.names()[after] != nil })
            }
            try await proxy.close()
        }
    }

    /// The poll that carried a notification is answered, and the answer lost on the way: the engine polls again and
    /// fetches, so the change arrives all the same.
    @Test func aLostNotificationIsMadeUpFor() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let phoneDatabase = container(world.alice).privateCloudDatabase
            try await phoneDatabase.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: phoneDatabase)
            let (laptopDatabase, faults) = SyncFaultTests.flaky(container(world.alice))
            let laptop = try Device.testing(path: try SyncEngineTests.temporaryPath("laptop"), database: laptopDatabase)
            func polls() -> Int { faults.sentPaths.filter { $0.contains("/courier/") }.count }
            try await Self.running(laptop) {
                #expect(await Self.eventually { await Self.isPushLive(laptop) && polls() >= 1 })
                // The poll waiting now is answered normally; the next one's answer is lost.
                faults.inject(.dropAnswer, times: 1) { $0.url.path.contains("/courier/") }
                let first = try phone.recordDrive(name: "Told", distance: 1, at: 1)
                try await phone.engine.sendChanges()
                #expect(try await Self.eventually { try laptop.names()[first] != nil })
                #expect(await Self.eventually { polls() >= 2 })
                let second = try phone.recordDrive(name: "Told, answer lost", distance: 2, at: 2)
                try await phone.engine.sendChanges()
                #expect(try await Self.eventually { try laptop.names()[second] != nil })
            }
        }
    }

    /// A participant's engine downloads assets on fetch; when the owner removes them, and when a share stops, the files
    /// go with the rows.
    @Test func aParticipantsAssetFilesGoWhenAccessEnds() async throws {
        let world = try await TestWorld.make()
        let carol = try await world.user("carol")
        let (alice, bob) = (world.alice, world.bob)
        try await SyncEngineTests.live(world) { container in
            let owner = container(alice).privateCloudDatabase
            let photos = ZoneID(zoneName: "Photos")
            let albums = ZoneID(zoneName: "Albums")
            var shares: [ZoneID: CloudShare] = [:]
            for zone in [photos, albums] {
                try await owner.save(zones: [zone])
                var record = CloudRecord(recordType: "Photo", recordID: RecordID(recordName: "p-\(zone.zoneName)", zoneID: zone))
                record.setAsset(fileAt: try AssetClientTests.file(Array("a photo in \(zone.zoneName)".utf8)), forKey: "image")
                _ = try await owner.modifyRecords(saving: [record], deleting: [], zoneID: zone)
                var share = CloudShare(zoneID: zone)
                share.addParticipant(.emailAddress("bob@example.com"), permission: .readOnly)
                share.addParticipant(.emailAddress("carol@example.com"), permission: .readOnly)
                share = try await owner.save(share)
                shares[zone] = share
                for user in [bob, carol] { try await container(user).sharedCloudDatabase.acceptShare(try #require(share.shortGUID)) }
            }
            let downloads = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-bob-assets-\(UUID().uuidString)")
            let queue = try DatabaseQueue(path: try SyncEngineTests.temporaryPath("bob"))
            let delegate = AssetClientTests.ReceiptsDelegate()
            let engine = SyncEngine(
                SyncEngine.Configuration(
                    database: container(bob).sharedCloudDatabase, stateStore: try GRDBSyncStore(writer: queue, scope: "shared"),
                    delegate: delegate, sleep: { _ in }, assetDownloads: .onFetch(directory: downloads)))
            func files() -> [String] {
                let enumerator = FileManager.default.enumerator(at: downloads, includingPropertiesForKeys: nil)
                return (enumerator?.allObjects as? [URL] ?? []).filter { !$0.hasDirectoryPath }.map(\.path).sorted()
            }
            try await engine.fetchChanges()
            let downloaded = delegate.fetched.withLock { $0.values.flatMap { $0.downloadedAssets.values.map(\.path) } }.sorted()
            #expect(downloaded.count == 2 && files() == downloaded, "\(files())")

            // The owner removes Bob from the photos share: its file goes, the album's stays.
            let photoShareID = try #require(shares[photos]).recordID
            var photoShare = try #require(try await owner.share(photoShareID))
            photoShare.removeParticipant(.userRecordName(bob.userRecordName))
            _ = try await owner.save(photoShare)
            try await engine.fetchChanges()
            #expect(files().count == 1 && files().allSatisfy { $0.contains("Albums") }, "\(files())")

            // The owner stops sharing the albums: nothing is left.
            let albumShareID = try #require(shares[albums]).recordID
            try await owner.delete(try #require(try await owner.share(albumShareID)))
            try await engine.fetchChanges()
            #expect(files().isEmpty, "\(files())")
        }
    }
}
