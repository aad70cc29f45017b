import CumulusClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStoreSQLite
import CumulusSyncGRDB
import Foundation
import GRDB
import GhostCarExample
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// Devices syncing through a real server on a loopback port, each with its own SQLite file.
@Suite("Sync engine: devices through a real server", .timeLimit(.minutes(10)))
struct SyncEngineTests {
    static func temporaryPath(_ name: String) throws -> String {
        try TestFiles.fresh("\(name).sqlite")
    }

    /// Runs a live server over the world's store and gives a container for a user.
    static func live<T: Sendable>(_ world: TestWorld, _ body: @Sendable (@Sendable (TestUser) -> CloudContainer) async throws -> T) async throws -> T
    {
        try await world.application().test(.live) { client in
            let url = URL(string: "http://127.0.0.1:\(client.port!)")!
            return try await body { user in
                CloudContainer(serverURL: url, containerIdentifier: TestWorld.container, apiToken: world.apiToken, webAuthToken: user.webAuthToken)
            }
        }
    }

    @Test func aDriveRecordedOnOneDeviceAppearsOnTheOtherAndEditsAndDeletesFollow() async throws {
        let world = try await TestWorld.make()
        try await Self.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try Self.temporaryPath("phone"), database: database)
            let tablet = try Device.testing(path: try Self.temporaryPath("tablet"), database: database)

            let id = try phone.recordDrive(name: "Morning commute", distance: 12_400, at: 1000)
            try await phone.engine.sendChanges()
            #expect(try await phone.store.pendingRecordZoneChanges().isEmpty)
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names() == [id: "Morning commute"])

            try tablet.rename(id, to: "Commute (fast)", at: 2000)
            try await tablet.engine.sendChanges()
            try await phone.engine.fetchChanges()
            #expect(try phone.names() == [id: "Commute (fast)"])

            try phone.delete(id)
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()
            #expect(try tablet.count() == 0)
            let status = await tablet.engine.status
            #expect(status.phase == .idle && status.pendingCount == 0 && status.failedCount == 0)
        }
    }

    @Test func concurrentEditsConvergeOnTheLaterEdit() async throws {
        let world = try await TestWorld.make()
        try await Self.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try Self.temporaryPath("phone"), database: database)
            let tablet = try Device.testing(path: try Self.temporaryPath("tablet"), database: database)
            let id = try phone.recordDrive(name: "Original", distance: 1000, at: 1000)
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()

            // Apart: the phone edits first, the tablet later; the phone's edit reaches the server first.
            try phone.rename(id, to: "Phone edit", at: 2000)
            try tablet.rename(id, to: "Tablet edit", at: 3000)
            try await phone.engine.sendChanges()
            // The tablet's save conflicts; its later edit wins and is sent on top of the server's record.
            try await tablet.engine.sendChanges()
            #expect(try await tablet.store.pendingRecordZoneChanges().isEmpty)
            try await phone.engine.fetchChanges()
            try await tablet.engine.fetchChanges()
            #expect(try phone.names() == [id: "Tablet edit"])
            #expect(try tablet.names() == [id: "Tablet edit"])
            let server = try await database.records(named: [id], in: GhostCar.zone)[id]
            #expect(server?.fields["customName"] == .string("Tablet edit"))

            // The other way round: an older edit sent last loses, and takes the newer one.
            try tablet.rename(id, to: "Tablet again", at: 5000)
            try phone.rename(id, to: "Phone stale", at: 4000)
            try await tablet.engine.sendChanges()
            try await phone.engine.sendChanges()
            try await phone.engine.fetchChanges()
            #expect(try phone.names() == [id: "Tablet again"])
        }
    }

    @Test func offlineEditsWaitForTheServerAndACrashLosesNothing() async throws {
        let world = try await TestWorld.make()
        let phonePath = try Self.temporaryPath("phone")
        let tabletPath = try Self.temporaryPath("tablet")
        let ids: [String] = try await Self.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: phonePath, database: database)
            let id = try phone.recordDrive(name: "Before", distance: 1, at: 1)
            try await phone.engine.sendChanges()
            return [id]
        }
        // The server is stopped: edits are kept, sending fails after its retries, nothing is lost.
        let offline = CloudContainer(
            serverURL: URL(string: "http://127.0.0.1:9")!, containerIdentifier: TestWorld.container, apiToken: world.apiToken,
            webAuthToken: world.alice.webAuthToken)
        let phone = try Device.testing(path: phonePath, database: offline.privateCloudDatabase)
        let offlineID = try phone.recordDrive(name: "Recorded offline", distance: 2, at: 2)
        await #expect(throws: CloudError.self) { try await phone.engine.sendChanges() }
        #expect(try await phone.store.pendingRecordZoneChanges().count == 1)
        let failed = await phone.engine.status
        guard case .error = failed.phase else { Issue.record("status should show the error"); return }
        #expect(failed.pendingCount == 1)

        // A crash between the local write and the send: the edit and its pending change were one transaction.
        let crashID = try phone.recordDrive(name: "Before the crash", distance: 3, at: 3)
        let reopenedPhone = try Device.testing(path: phonePath, database: offline.privateCloudDatabase)
        #expect(try await reopenedPhone.store.pendingRecordZoneChanges().map(\.change.recordID.recordName).sorted() == [offlineID, crashID].sorted())

        // The server is back (on a new port, over the same data).
        try await Self.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            reopenedPhone.reconnect(database)
            try await reopenedPhone.engine.sendChanges()
            try await reopenedPhone.engine.sendChanges()
            #expect(try await reopenedPhone.store.pendingRecordZoneChanges().isEmpty)
            let tablet = try Device.testing(path: tabletPath, database: database)
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names() == [ids[0]: "Before", offlineID: "Recorded offline", crashID: "Before the crash"])
            // Exactly once: each record was created once on the server.
            let feed = try await database.zoneChanges(GhostCar.zone, since: nil)
            #expect(feed.records.count == 3)
            #expect(feed.records.allSatisfy { $0.recordChangeTag != nil })
        }
    }

    @Test func twoDevicesSyncingByThemselvesConvergeWithoutAFetchCall() async throws {
        let world = try await TestWorld.make()
        try await Self.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try Self.temporaryPath("phone"), database: database)
            let tablet = try Device.testing(path: try Self.temporaryPath("tablet"), database: database)
            /// Waits until the device shows `name` for the drive, looking at its own SQLite file only.
            func eventually(_ device: Device, shows name: String, for id: String) async throws -> Bool {
                for _ in 0..<300 {
                    if try device.names()[id] == name { return true }
                    try await Task.sleep(for: .milliseconds(50))
                }
                return false
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                // No fallback fetch within the test: what reaches a device comes by the courier.
                for device in [phone, tablet] {
                    let engine = device.engine
                    group.addTask { await engine.run(sendDelay: .milliseconds(100), fallbackInterval: .seconds(3600)) }
                }
                let id = try phone.recordDrive(name: "Morning commute", distance: 12_400, at: 1000)
                #expect(try await eventually(tablet, shows: "Morning commute", for: id))
                try tablet.rename(id, to: "Evening commute", at: 2000)
                #expect(try await eventually(phone, shows: "Evening commute", for: id))
                group.cancelAll()
            }
        }
    }

    @Test func positionsTheServerNoLongerAcceptsLeadToAFullFetch() async throws {
        let world = try await TestWorld.make()
        try await Self.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try Self.temporaryPath("phone"), database: database)
            let tablet = try Device.testing(path: try Self.temporaryPath("tablet"), database: database)
            let first = try phone.recordDrive(name: "First", distance: 1, at: 1)
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()

            // The server was restored from a backup and its token secret replaced (docs/DEPLOY.md): it refuses both
            // positions the tablet holds. The tablet starts over, and misses nothing.
            try await tablet.store.setDatabaseToken("signed-with-the-old-secret")
            try await tablet.store.setZoneToken("signed-with-the-old-secret", for: GhostCar.zone)
            let second = try phone.recordDrive(name: "Second", distance: 2, at: 2)
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names() == [first: "First", second: "Second"])
            #expect(try await tablet.store.databaseToken() != "signed-with-the-old-secret")
            try await tablet.engine.fetchChanges()
        }
    }

    @Test func aDeletedZoneDropsItsRowsAndAnUnusableTokenLeadsToAFullFetch() async throws {
        let world = try await TestWorld.make()
        try await Self.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try Self.temporaryPath("phone"), database: database)
            let tablet = try Device.testing(path: try Self.temporaryPath("tablet"), database: database)
            let restored = try Device.testing(path: try Self.temporaryPath("restored"), database: database)
            let kept = try phone.recordDrive(name: "Kept", distance: 1, at: 1)
            _ = try phone.recordDrive(name: "Lost", distance: 2, at: 1)
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()
            try await restored.engine.fetchChanges()
            let oldDatabaseToken = try #require(try await restored.store.databaseToken())

            // The zone is deleted and created again elsewhere, holding one of the drives.
            try await database.delete(zones: [GhostCar.zone])
            try await database.save(zones: [GhostCar.zone])
            var keptRecord = CloudRecord(recordType: "Drive", recordID: RecordID(recordName: kept, zoneID: GhostCar.zone))
            keptRecord.fields = ["customName": .string("Kept"), "modifiedAt": .int64(1)]
            _ = try await database.modifyRecords(saving: [keptRecord], deleting: [], zoneID: GhostCar.zone)

            // The tablet learns the zone was deleted: it drops the zone's rows, then fetches the new zone.
            _ = try tablet.recordDrive(name: "Unsent", distance: 3, at: 5)
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names() == [kept: "Kept"])

            // A device whose database position is newer than its zone position (restored from a backup, say) meets an
            // unusable zone token: it fetches the zone from the start and drops what the server no longer has, keeping
            // an edit that waits to be sent.
            let newDatabaseToken = try await database.databaseChanges(since: oldDatabaseToken).syncToken
            try await restored.store.setDatabaseToken(newDatabaseToken)
            let unsent = try restored.recordDrive(name: "Unsent", distance: 3, at: 5)
            keptRecord.recordChangeTag = try await database.records(named: [kept], in: GhostCar.zone)[kept]?.recordChangeTag
            keptRecord.fields["distance"] = .double(10)
            _ = try await database.modifyRecords(saving: [keptRecord], deleting: [], zoneID: GhostCar.zone)
            try await restored.engine.fetchChanges()
            let restoredNames = try restored.names()
            #expect(restoredNames == [kept: "Kept", unsent: "Unsent"], "\(restoredNames)")
        }
    }

    @Test func tenThousandRecordsSyncIntoAnEmptyDevice() async throws {
        let world = try await TestWorld.make()
        try await Self.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try Self.temporaryPath("phone"), database: database)
            try await phone.queue.write { db in
                for index in 0..<10_000 {
                    let id = String(format: "drive-%05d", index)
                    try db.execute(
                        sql: "INSERT INTO drives (id, distance, customName, modifiedAt) VALUES (?, ?, ?, 1)",
                        arguments: [id, Double(index), "Drive \(index)"])
                    try phone.store.enqueue([.saveRecord(RecordID(recordName: id, zoneID: GhostCar.zone))], in: db)
                }
            }
            try await phone.engine.sendChanges()
            #expect(try await phone.store.pendingRecordZoneChanges().isEmpty)

            let fresh = try Device.testing(path: try Self.temporaryPath("fresh"), database: database)
            try await fresh.engine.fetchChanges()
            #expect(try fresh.count() == 10_000)
            let mismatches = try await fresh.queue.read { db in
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM drives WHERE customName <> 'Drive ' || CAST(distance AS INTEGER)") ?? -1
            }
            #expect(mismatches == 0)
        }
    }

    @Test func aSharedZoneAppearsOnTheParticipantsDeviceAndLeavesWithAccess() async throws {
        let world = try await TestWorld.make()
        try await Self.live(world) { container in
            let alice = container(world.alice)
            let bob = container(world.bob)
            try await alice.privateCloudDatabase.save(zones: [GhostCar.zone])
            let aliceDevice = try Device.testing(path: try Self.temporaryPath("alice"), database: alice.privateCloudDatabase)
            let id = try aliceDevice.recordDrive(name: "Shared run", distance: 5000, at: 1)
            try await aliceDevice.engine.sendChanges()

            var share = CloudShare(zoneID: GhostCar.zone)
            share.addParticipant(.emailAddress("bob@example.com"), permission: .readOnly)
            share = try await alice.privateCloudDatabase.save(share)
            let metadata = try await bob.sharedCloudDatabase.acceptShare(try #require(share.shortGUID))
            #expect(metadata.participantStatus == .accepted)

            // Bob's engine on his shared database: the owner's zone, named with its owner.
            let sharedZone = ZoneID(zoneName: GhostCar.zone.zoneName, ownerRecordName: world.alice.userRecordName)
            let bobDevice = try Device.testing(
                path: try Self.temporaryPath("bob"), database: bob.sharedCloudDatabase, scope: "shared", zone: sharedZone)
            try await bobDevice.engine.fetchChanges()
            #expect(try bobDevice.names() == [id: "Shared run"])

            // The owner removes him: his next fetch drops the zone's rows.
            var current = try #require(try await alice.privateCloudDatabase.share(share.recordID))
            current.removeParticipant(.emailAddress("bob@example.com"))
            _ = try await alice.privateCloudDatabase.save(current)
            try await bobDevice.engine.fetchChanges()
            #expect(try bobDevice.count() == 0)
        }
    }
}

/// The client API in process (no socket), through ``InProcessTransport``.
@Suite("Client API in process", .timeLimit(.minutes(10)))
struct ClientInProcessTests {
    @Test func theClientAPIWorksAgainstTheServerInProcess() async throws {
        let world = try await TestWorld.make()
        try await world.application().test(.router) { client in
            let container = CloudContainer(
                serverURL: URL(string: "http://localhost")!, containerIdentifier: TestWorld.container, apiToken: world.apiToken,
                webAuthToken: world.alice.webAuthToken, transport: InProcessTransport(client: client)
            )
            let database = container.privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            #expect(try await database.allZones().map(\.zoneName) == ["_defaultZone", "Drives"])
            var drive = CloudRecord(recordType: "Drive", recordID: RecordID(recordName: "d1", zoneID: GhostCar.zone))
            drive["distance"] = .double(12_400)
            let saved = try await database.modifyRecords(saving: [drive], deleting: [], zoneID: GhostCar.zone)
            let tag = try #require(saved.saved.first?.recordChangeTag)

            // A stale save comes back as CONFLICT with the server's record.
            var stale = drive
            stale.recordChangeTag = "stale"
            stale["distance"] = .double(1)
            let conflict = try await database.modifyRecords(saving: [stale], deleting: [], zoneID: GhostCar.zone)
            #expect(conflict.failedSaves.first?.error.code == .server(.conflict))
            #expect(conflict.failedSaves.first?.error.serverRecord?.recordChangeTag == tag)

            let found = try await database.query(
                recordType: "Drive", filters: [QueryFilter(comparator: .greaterThan, field: .field("distance"), value: .double(100))],
                zoneID: GhostCar.zone
            )
            #expect(found.records.map(\.recordID.recordName) == ["d1"])
            let changes = try await database.zoneChanges(GhostCar.zone, since: nil)
            #expect(changes.records.map(\.recordID.recordName) == ["d1"])

            // Errors keep CloudKit's code.
            let anonymous = CloudContainer(
                serverURL: URL(string: "http://localhost")!, containerIdentifier: TestWorld.container, apiToken: world.apiToken,
                transport: InProcessTransport(client: client)
            )
            let error = await #expect(throws: CloudError.self) { try await anonymous.privateCloudDatabase.allZones() }
            #expect(error?.code == .server(.authenticationRequired))

            // Sign-in gives a container that acts as the user.
            let carol = try await anonymous.signUp(name: "carol", password: "correct horse")
            #expect(try await carol.privateCloudDatabase.allZones().map(\.zoneName) == ["_defaultZone"])
        }
    }

    @Test func scopedSendsAndFetchesCoverOnlyTheirZones() async throws {
        let world = try await TestWorld.make()
        try await world.application().test(.live) { client in
            let container = CloudContainer(
                serverURL: URL(string: "http://127.0.0.1:\(client.port!)")!, containerIdentifier: TestWorld.container, apiToken: world.apiToken,
                webAuthToken: world.alice.webAuthToken
            )
            let database = container.privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            let first = try phone.recordDrive(name: "One", distance: 1, at: 1)
            let second = try phone.recordDrive(name: "Two", distance: 2, at: 2)
            try await phone.engine.sendChanges(.recordIDs([RecordID(recordName: first, zoneID: GhostCar.zone)]))
            #expect(try await phone.store.pendingRecordZoneChanges().map(\.change.recordID.recordName) == [second])
            try await phone.engine.sendChanges(.zoneIDs([ZoneID(zoneName: "Elsewhere")]))
            #expect(try await phone.store.pendingRecordZoneChanges().count == 1)
            try await phone.engine.sendChanges()
            let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: database)
            try await tablet.engine.fetchChanges(.allExcluding([GhostCar.zone]))
            #expect(try tablet.count() == 0)
            try await tablet.engine.fetchChanges(.zoneIDs([GhostCar.zone]))
            #expect(try tablet.count() == 2)
        }
    }
}
