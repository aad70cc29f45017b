import CumulusClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusStoreSQLite
import Foundation
import GRDB
import Logging
import SplitCostsExample
import Testing

/// The right to be forgotten (issue 37): `cumulus users erase` on a user who owns a shared zone and takes part in
/// someone else's share. Real devices on loopback, over both stores; over SQLite, the data directory is searched byte
/// for byte afterwards.
@Suite("Erasing a user", .timeLimit(.minutes(10)))
struct UserErasureTests {
    /// Strings only the erased user's own data holds.
    static let hers = ["Trip-AliceUnique-7Q9", "Cost-AliceUnique-4X2", "Public-AliceUnique-Z8", "Asset-AliceUnique-K3", "alice@example.com"]

    /// Which of `strings` some file under `directory` holds, byte for byte.
    static func found(_ strings: [String], under directory: URL) throws -> [String: [String]] {
        var found: [String: [String]] = [:]
        let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey])
        while let file = files?.nextObject() as? URL {
            guard (try? file.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true else { continue }
            let bytes = try Data(contentsOf: file)
            for string in strings where bytes.range(of: Data(string.utf8)) != nil { found[string, default: []].append(file.lastPathComponent) }
        }
        return found
    }

    @Test(arguments: TestStore.allAndSharded)
    func anErasedOwnerAndParticipantLeavesNoTraceAndTheOthersKeepTheirOwn(_ kind: TestStore) async throws {
        let directory = URL(fileURLWithPath: try TestFiles.fresh("data")).deletingLastPathComponent()
        let storeKind =
            kind.name == TestStore.sqlite.name
            ? TestStore(name: kind.name) { _ in try SQLiteRecordStore(path: directory.appendingPathComponent("cumulus.sqlite").path) } : kind
        var configured = try await TestWorld.make(store: storeKind)
        let assets = try FileAssetStorage(directory: directory.appendingPathComponent("assets"))
        configured.configuration.assetStorage = assets
        let world = configured
        let carol = try await world.user("carol")
        let (alice, bob) = (world.alice, world.bob)
        let logger = Logger(label: "test")
        try await SyncEngineTests.live(world) { container in
            let alicePhone = try SplitCostsTests.device(container(alice), "erase-alice")
            let bobPhone = try SplitCostsTests.device(container(bob), "erase-bob")
            let carolPhone = try SplitCostsTests.device(container(carol), "erase-carol")
            for device in [alicePhone, bobPhone, carolPhone] { try await device.prepare() }

            // Alice shares a trip with Bob; Carol shares her flat with Alice, who adds a cost under it.
            let trip = try alicePhone.createGroup(Self.hers[0])
            try alicePhone.addCost(Self.hers[1], amount: 80, paidBy: "A", to: trip)
            try await alicePhone.sync()
            let tripURL = try #require(try await alicePhone.share(group: trip, with: ["bob@example.com"]).url?.absoluteString)
            try bobPhone.addCost("Bob's own", amount: 3, paidBy: "B", to: try bobPhone.createGroup("Bob's group"))
            try await bobPhone.accept(tripURL)
            try await bobPhone.sync()
            #expect(try bobPhone.costs()[Self.hers[1]] == 80)
            let flat = try carolPhone.createGroup("Flat")
            try carolPhone.addCost("Rent", amount: 900, paidBy: "C", to: flat)
            try await carolPhone.sync()
            let flatURL = try #require(try await carolPhone.share(group: flat, with: ["alice@example.com"]).url?.absoluteString)
            try await alicePhone.accept(flatURL)
            try await alicePhone.sync()
            try alicePhone.addCost("Snacks", amount: 5, paidBy: "A", to: flat)
            try await alicePhone.sync()
            try await carolPhone.sync()
            #expect(try carolPhone.costs() == ["Rent": 900, "Snacks": 5])

            // A public record and a photo of hers.
            var note = CloudRecord(recordType: "Note", recordID: RecordID(recordName: "note", zoneID: ZoneID(zoneName: ZoneID.defaultZoneName)))
            note["text"] = .string(Self.hers[2])
            _ = try await container(alice).publicCloudDatabase.modifyRecords(
                saving: [note], deleting: [], zoneID: ZoneID(zoneName: ZoneID.defaultZoneName))
            let photos = ZoneID(zoneName: "Photos")
            try await container(alice).privateCloudDatabase.save(zones: [photos])
            let file = directory.appendingPathComponent("upload.bin")
            try Data(String(repeating: Self.hers[3], count: 100).utf8).write(to: file)
            var photo = CloudRecord(recordType: "Photo", recordID: RecordID(recordName: "photo", zoneID: photos))
            photo[asset: "image"] = CloudAsset(fileURL: file)
            let saved = try await container(alice).privateCloudDatabase.modifyRecords(saving: [photo], deleting: [], zoneID: photos)
            #expect(saved.failedSaves.isEmpty)
            try FileManager.default.removeItem(at: file)

            let receipt = try await world.accounts.eraseUser(container: TestWorld.container, name: "alice", assets: assets, logger: logger)
            #expect(receipt.publicRecords == 1 && receipt.participations == 1 && receipt.sharesStopped == 1, "\(receipt)")
            #expect(receipt.zones >= 2 && receipt.records >= 3 && receipt.assetFiles.count == 1 && receipt.webAuthTokens >= 1, "\(receipt)")
            #expect(receipt.recordsAnonymized >= 1, "her cost under Carol's flat stays, by no one")
            #expect(receipt.filesScrubbed == (kind.name == TestStore.sqlite.name))

            // Bob's device drops her trip and keeps his own group; Carol keeps her flat, with the cost Alice added in it.
            try await bobPhone.sync()
            #expect(try bobPhone.costs() == ["Bob's own": 3])
            #expect(try bobPhone.groups() == ["Bob's group": ""])
            try await carolPhone.sync()
            #expect(try carolPhone.costs() == ["Rent": 900, "Snacks": 5])
            let snacks = try await container(carol).privateCloudDatabase.records(
                named: try carolPhone.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM costs") }, in: SplitCosts.zone)
            #expect(snacks.values.allSatisfy { $0.created?.userRecordName != alice.userRecordName }, "her authorship is gone")
            // Her credentials no longer open anything (a server that cached one forgets it within its cache lifetime).
            await #expect(throws: CumulusError.self) {
                try await world.accounts.authenticate(webAuthToken: alice.webAuthToken, container: TestWorld.container, logger: logger)
            }
            #expect(try await world.store.user(userRecordName: alice.userRecordName, logger: logger) == nil)
        }
        // Over SQLite: none of her strings is in the data directory's files (database, log, assets).
        if kind.name == TestStore.sqlite.name {
            #expect(try Self.found(Self.hers, under: directory).isEmpty)
            #expect(try Self.found(["Rent", "Bob's own"], under: directory).count == 2, "the search finds what stays")
        }
    }
}
