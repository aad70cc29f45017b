import CumulusClient
import CumulusCore
import CumulusModel
import CumulusSyncGRDB
import CumulusTesting
import Foundation
import GRDB
import GhostCarExample
import Hummingbird
import HummingbirdTesting
import Logging
import Synchronization
import Testing

/// Collects what an adapter reports, for assertions.
final class Reports: Sendable {
    private let reports = Mutex<[GRDBSyncAdapter.Report]>([])
    var all: [GRDBSyncAdapter.Report] { reports.withLock { $0 } }
    func record(_ report: GRDBSyncAdapter.Report) { reports.withLock { $0.append(report) } }
}

/// The client against a flaky world: answers lost after the server applied a request, refused records, offline edits
/// of the same record on two devices. A real server on loopback; faults injected in the transport.
@Suite("Sync engine: lost answers, refused records and merges", .timeLimit(.minutes(10)))
struct SyncFaultTests {
    static func isModify(_ request: TransportRequest) -> Bool { request.url.path.hasSuffix("records/modify") }

    /// The user's private database over a transport that injects faults.
    static func flaky(_ container: CloudContainer) -> (CloudDatabase, FaultInjectingTransport) {
        let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
        var flaky = container
        flaky.transport = faults
        return (flaky.privateCloudDatabase, faults)
    }

    @Test func aLostAnswerAfterTheServerAppliedACreateLosesNoLaterEdit() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let (database, faults) = Self.flaky(container(world.alice))
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: container(world.alice).privateCloudDatabase)

            // The server applies the create; its answer is lost; the engine's retry meets EXISTS with its own record.
            let id = try phone.recordDrive(name: "First", distance: 1000, at: 1000)
            faults.inject(.dropAnswer, times: 1, when: Self.isModify)
            try await phone.engine.sendChanges()
            #expect(try await phone.store.pendingRecordZoneChanges().isEmpty)
            #expect(faults.sentPaths.filter { $0.hasSuffix("records/modify") }.count == 2, "sent, lost, sent again")
            let tag = try await phone.queue.read { db in try phone.store.changeTag(for: RecordID(recordName: id, zoneID: GhostCar.zone), in: db) }
            #expect(tag != nil, "the change tag was learned from the EXISTS answer")

            // Two more edits, each sent as an update on that tag: both reach the other device.
            try phone.rename(id, to: "Second", at: 2000)
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names() == [id: "Second"])
            try phone.rename(id, to: "Third", at: 3000)
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names() == [id: "Third"])
            let status = await phone.engine.status
            #expect(status.phase == .idle && status.pendingCount == 0 && status.failedCount == 0)
        }
    }

    @Test func aCreateAppliedWhileTheAppWasKilledIsFollowedByItsLaterEdits() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let (database, faults) = Self.flaky(container(world.alice))
            try await database.save(zones: [GhostCar.zone])
            let path = try SyncEngineTests.temporaryPath("phone")
            var phone: Device? = try Device.testing(path: path, database: database)
            let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: container(world.alice).privateCloudDatabase)

            // Every attempt is applied or not, but no answer arrives; then the app is killed.
            let id = try phone!.recordDrive(name: "Recorded", distance: 1000, at: 1000)
            faults.inject(.dropAnswer, times: 3, when: Self.isModify)
            await #expect(throws: CloudError.self) { try await phone!.engine.sendChanges() }
            phone = nil

            // Relaunched, the user edits twice before the network returns; the device still believes it is creating.
            let relaunched = try Device.testing(path: path, database: database)
            try relaunched.rename(id, to: "Edited once", at: 2000)
            try relaunched.rename(id, to: "Edited twice", at: 3000)
            try await relaunched.engine.sendChanges()
            #expect(try await relaunched.store.pendingRecordZoneChanges().isEmpty)
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names() == [id: "Edited twice"])
            // And the next edit goes through as an ordinary update.
            try relaunched.rename(id, to: "Edited thrice", at: 4000)
            try await relaunched.engine.sendChanges()
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names() == [id: "Edited thrice"])
        }
    }

    @Test func aRefusedRecordIsReportedKeptAndNeverBlocksTheOthers() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let reports = Reports()
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database, onReport: reports.record)

            // One drive the server refuses (its name makes the record larger than 1 MB), one it accepts.
            let good = try phone.recordDrive(name: "Fine", distance: 1, at: 1)
            let huge = try phone.recordDrive(name: String(repeating: "x", count: 1_100_000), distance: 2, at: 2)
            try await phone.engine.sendChanges()
            #expect(try await database.records(named: [good, huge], in: GhostCar.zone).keys.sorted() == [good])
            let status = await phone.engine.status
            #expect(status.failedCount == 1)
            #expect(status.pendingCount == 1)
            let refused = reports.all.compactMap { report -> (RecordID, CloudError, Bool)? in
                if case .refused(let id, let error, let rolledBack) = report { (id, error, rolledBack) } else { nil }
            }
            #expect(refused.count == 1)
            #expect(refused.first?.0.recordName == huge)
            #expect(refused.first?.1.code == .server(.quotaExceeded))
            #expect(refused.first?.2 == false)
            #expect(try phone.names()[huge] != nil, "the device keeps the row")

            // Not retried forever: another send sends nothing.
            try await phone.engine.sendChanges()
            #expect(reports.all.count == 1)

            // The user fixes it: the new edit replaces the refused change and is saved.
            try phone.rename(huge, to: "Shorter", at: 3)
            try await phone.engine.sendChanges()
            let fixed = await phone.engine.status
            #expect(fixed.phase == .idle && fixed.pendingCount == 0 && fixed.failedCount == 0)
            #expect(try await database.records(named: [huge], in: GhostCar.zone)[huge]?.fields["customName"] == .string("Shorter"))
        }
    }

    @Test func aReadOnlyParticipantsEditIsRefusedVisiblyAndRolledBack() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        try await SyncEngineTests.live(world) { container in
            // Alice shares her company zone as a whole, read-only to anyone with the link; Bob joins through it.
            let aliceDatabase = container(alice).privateCloudDatabase
            try await aliceDatabase.save(zones: [GhostCar.zone])
            let owner = try Device.testing(path: try SyncEngineTests.temporaryPath("owner"), database: aliceDatabase)
            let id = try owner.recordDrive(name: "Company car", distance: 100, at: 1)
            try await owner.engine.sendChanges()
            let share = try await aliceDatabase.save(CloudShare(zoneID: GhostCar.zone, publicPermission: .readOnly))
            try await container(bob).sharedCloudDatabase.acceptShare(try #require(share.shortGUID))

            let reports = Reports()
            let sharedZone = ZoneID(zoneName: GhostCar.zone.zoneName, ownerRecordName: alice.userRecordName)
            let bobDevice = try Device.testing(
                path: try SyncEngineTests.temporaryPath("bob"), database: container(bob).sharedCloudDatabase, scope: "shared", zone: sharedZone,
                onReport: reports.record)
            try await bobDevice.engine.fetchChanges()
            #expect(try bobDevice.names() == [id: "Company car"])

            // Bob edits anyway: the server refuses, the app is told, and the device shows the server's state again.
            try bobDevice.rename(id, to: "Bob's car", at: 2)
            try await bobDevice.engine.sendChanges()
            #expect(try bobDevice.names() == [id: "Company car"])
            let status = await bobDevice.engine.status
            #expect(status.phase == .idle && status.pendingCount == 0 && status.failedCount == 0)
            let refusal = try #require(reports.all.first)
            guard case .refused(let refusedID, let error, let rolledBack) = refusal else {
                Issue.record("expected a refusal, got \(refusal)")
                return
            }
            #expect(refusedID.recordName == id)
            #expect(error.code == .server(.accessDenied))
            #expect(rolledBack)
            #expect(try await aliceDatabase.records(named: [id], in: GhostCar.zone)[id]?.fields["customName"] == .string("Company car"))
        }
    }

    @Test func offlineEditsOfDifferentFieldsOnTwoDevicesAreBothKept() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let reports = Reports()
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: database, onReport: reports.record)
            let id = try phone.recordDrive(name: "Original", distance: 1000, at: 1000)
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()

            // Apart, the phone renames the drive and the tablet corrects its distance.
            try phone.rename(id, to: "Renamed on the phone", at: 2000)
            try tablet.setDistance(id, to: 1234, at: 3000)
            try await phone.engine.sendChanges()
            try await tablet.engine.sendChanges()
            try await phone.engine.fetchChanges()
            try await tablet.engine.fetchChanges()
            for device in [phone, tablet] {
                #expect(try device.names() == [id: "Renamed on the phone"])
                #expect(try device.distances() == [id: 1234])
            }
            let server = try await database.records(named: [id], in: GhostCar.zone)[id]
            #expect(server?.fields["customName"] == .string("Renamed on the phone"))
            #expect(server?.fields["distance"] == .double(1234))
            #expect(reports.all.isEmpty, "nothing was discarded")

            // The same field on both: the later edit wins, and the device whose value lost is told.
            try phone.rename(id, to: "Phone, later", at: 5000)
            try tablet.rename(id, to: "Tablet, earlier", at: 4000)
            try await phone.engine.sendChanges()
            try await tablet.engine.sendChanges()
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names() == [id: "Phone, later"])
            #expect(reports.all.contains(.discardedLocalValues(recordID: RecordID(recordName: id, zoneID: GhostCar.zone), fields: ["customName"])))
        }
    }
}

@Suite("Record merge", .timeLimit(.minutes(10)))
struct RecordMergeTests {
    @Test func eachSideKeepsWhatOnlyItChanged() {
        let ancestor: [String: FieldValue] = ["a": .int64(1), "b": .int64(1), "c": .int64(1)]
        let local: [String: FieldValue] = ["a": .int64(2), "b": .int64(1), "c": .int64(5)]
        let server: [String: FieldValue] = ["a": .int64(1), "b": .int64(3), "c": .int64(6)]
        let outcome = RecordMerge.merge(ancestor: ancestor, local: local, server: server) { _, _, _ in .server }
        #expect(outcome.fields == ["a": .int64(2), "b": .int64(3), "c": .int64(6)])
        #expect(outcome.discardedLocalFields == ["c"])
        #expect(outcome.differsFromServer)
        let localWins = RecordMerge.merge(ancestor: ancestor, local: local, server: server) { _, _, _ in .local }
        #expect(localWins.fields["c"] == .int64(5))
        #expect(localWins.discardedLocalFields.isEmpty)
    }

    @Test func aClearedFieldIsAChangeAndUnknownAncestorsAreConflicts() {
        let outcome = RecordMerge.merge(ancestor: ["a": .int64(1)], local: [:], server: ["a": .int64(1)]) { _, _, _ in .server }
        #expect(outcome.fields.isEmpty, "the local clear is kept")
        let same = RecordMerge.merge(ancestor: nil, local: ["a": .int64(1)], server: ["a": .int64(1)]) { _, _, _ in .local }
        #expect(!same.differsFromServer)
        let unknown = RecordMerge.merge(ancestor: nil, local: ["a": .int64(2)], server: ["a": .int64(1)], names: ["a"]) { _, _, _ in .server }
        #expect(unknown.discardedLocalFields == ["a"])
    }
}

/// A participant's shared store holding two owners' zones of the same name, with records of the same name.
@Suite("Sync engine: zones are (name, owner)", .timeLimit(.minutes(10)))
struct SyncZoneIdentityTests {
    static let lists = "Lists"

    static func itemsTable() -> SyncedTable {
        SyncedTable(
            tableName: "items", recordType: "Item", zoneID: ZoneID(zoneName: lists), columns: [SyncedColumn("title", type: .string)],
            modificationColumn: "modifiedAt", ownerColumn: "owner")
    }

    /// The two layouts docs/SYNC.md describes for one record type in several owners' zones.
    enum Layout: String, CaseIterable, Sendable {
        /// One table whose rows carry their owner.
        case ownerColumn
        /// A table per owner, each naming its owner's zone.
        case tablePerOwner
    }

    @Test(arguments: Layout.allCases)
    func twoOwnersSameNamedZonesStayApartThroughFetchSendConflictsAndDeletion(_ layout: Layout) async throws {
        let world = try await TestWorld.make()
        let carol = try await world.user("carol")
        let (alice, bob) = (world.alice, world.bob)
        try await SyncEngineTests.live(world) { container in
            // Alice and Carol each have a zone "Lists" with a record "item-1", and share the zone with Bob.
            let zone = ZoneID(zoneName: Self.lists)
            for (owner, title) in [(alice, "Alice's"), (carol, "Carol's")] {
                let database = container(owner).privateCloudDatabase
                try await database.save(zones: [zone])
                var item = CloudRecord(recordType: "Item", recordID: RecordID(recordName: "item-1", zoneID: zone))
                item.fields = ["title": .string(title), "modifiedAt": .int64(1)]
                _ = try await database.modifyRecords(saving: [item], deleting: [], zoneID: zone)
                var share = CloudShare(zoneID: zone)
                share.addParticipant(.emailAddress("bob@example.com"), permission: .readWrite)
                share = try await database.save(share)
                try await container(bob).sharedCloudDatabase.acceptShare(try #require(share.shortGUID))
            }

            let queue = try DatabaseQueue(path: try SyncEngineTests.temporaryPath("bob-shared"))
            let owners = [alice.userRecordName, carol.userRecordName]
            /// Each owner's table, by owner: one shared table, or one of its own.
            let tableNames = Dictionary(
                uniqueKeysWithValues: zip(owners, layout == .ownerColumn ? ["items", "items"] : ["alice_items", "carol_items"]))
            let tables: [SyncedTable]
            switch layout {
            case .ownerColumn:
                tables = [Self.itemsTable()]
                try await queue.write { db in
                    try db.execute(
                        sql: """
                            CREATE TABLE items (id TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '', title TEXT, modifiedAt INTEGER NOT NULL DEFAULT 0,
                                                PRIMARY KEY (owner, id))
                            """)
                }
            case .tablePerOwner:
                tables = owners.map { owner in
                    SyncedTable(
                        tableName: tableNames[owner]!, recordType: "Item", zoneID: ZoneID(zoneName: Self.lists, ownerRecordName: owner),
                        columns: [SyncedColumn("title", type: .string)], modificationColumn: "modifiedAt")
                }
                try await queue.write { db in
                    for name in tableNames.values {
                        try db.execute(sql: "CREATE TABLE \(name) (id TEXT PRIMARY KEY NOT NULL, title TEXT, modifiedAt INTEGER NOT NULL DEFAULT 0)")
                    }
                }
            }
            let store = try GRDBSyncStore(writer: queue, scope: "shared")
            let reports = Mutex<[GRDBSyncAdapter.Report]>([])
            let adapter = try GRDBSyncAdapter(
                writer: queue, store: store, tables: tables, onReport: { report in reports.withLock { $0.append(report) } })
            let engine = SyncEngine(
                Device.configuration(database: container(bob).sharedCloudDatabase, store: store, adapter: adapter))
            /// Each owner's titles, read from that owner's rows of that owner's table.
            func titles() throws -> [String: [String: String]] {
                try queue.read { db in
                    var titles: [String: [String: String]] = [:]
                    for owner in owners {
                        let condition = layout == .ownerColumn ? " WHERE owner = ?" : ""
                        let rows = try Row.fetchAll(
                            db, sql: "SELECT id, title FROM \(tableNames[owner]!)\(condition)",
                            arguments: layout == .ownerColumn ? [owner] : [])
                        if !rows.isEmpty { titles[owner] = Dictionary(uniqueKeysWithValues: rows.map { ($0[0] as String, $0[1] as String) }) }
                    }
                    return titles
                }
            }

            // Fetch: one row per owner, though zone and record names are the same.
            try await engine.fetchChanges()
            #expect(try titles() == [alice.userRecordName: ["item-1": "Alice's"], carol.userRecordName: ["item-1": "Carol's"]])

            // Send: Bob's edit of Carol's item reaches Carol's zone only.
            let carolItem = RecordID(recordName: "item-1", zoneID: ZoneID(zoneName: Self.lists, ownerRecordName: carol.userRecordName))
            let aliceItem = RecordID(recordName: "item-1", zoneID: ZoneID(zoneName: Self.lists, ownerRecordName: alice.userRecordName))
            func edit(_ id: RecordID, _ title: String, at time: Int64) throws {
                let owner = id.zoneID.ownerRecordName!
                try queue.write { db in
                    if layout == .ownerColumn {
                        try db.execute(
                            sql: "UPDATE items SET title = ?, modifiedAt = ? WHERE owner = ? AND id = ?",
                            arguments: [title, time, owner, id.recordName])
                    } else {
                        try db.execute(
                            sql: "UPDATE \(tableNames[owner]!) SET title = ?, modifiedAt = ? WHERE id = ?", arguments: [title, time, id.recordName])
                    }
                    try store.enqueue([.saveRecord(id)], in: db)
                }
            }
            try edit(carolItem, "Carol's, edited by Bob", at: 2)
            try await engine.sendChanges()
            let carolServer = try await container(carol).privateCloudDatabase.records(named: ["item-1"], in: zone)["item-1"]
            let aliceServer = try await container(alice).privateCloudDatabase.records(named: ["item-1"], in: zone)["item-1"]
            #expect(carolServer?.fields["title"] == .string("Carol's, edited by Bob"))
            #expect(aliceServer?.fields["title"] == .string("Alice's"))

            // Conflict: Alice edits her item while Bob edits his copy of it; the later edit wins in Alice's zone alone.
            var aliceEdit = try #require(aliceServer)
            aliceEdit.fields = ["title": .string("Alice, earlier"), "modifiedAt": .int64(3)]
            _ = try await container(alice).privateCloudDatabase.modifyRecords(saving: [aliceEdit], deleting: [], zoneID: zone)
            try edit(aliceItem, "Bob, later", at: 4)
            try await engine.sendChanges()
            try await engine.fetchChanges()
            #expect(try titles() == [alice.userRecordName: ["item-1": "Bob, later"], carol.userRecordName: ["item-1": "Carol's, edited by Bob"]])
            #expect(
                try await container(alice).privateCloudDatabase.records(named: ["item-1"], in: zone)["item-1"]?.fields["title"]
                    == .string("Bob, later"))

            // A record of a type no table holds is reported, and written nowhere.
            var note = CloudRecord(recordType: "Note", recordID: RecordID(recordName: "note-1", zoneID: zone))
            note.fields = ["title": .string("not synced here")]
            _ = try await container(carol).privateCloudDatabase.modifyRecords(saving: [note], deleting: [], zoneID: zone)
            try await engine.fetchChanges()
            #expect(reports.withLock { $0 }.contains { if case .unplaced(let id, "Note") = $0 { id.recordName == "note-1" } else { false } })
            #expect(try titles()[carol.userRecordName] == ["item-1": "Carol's, edited by Bob"])

            // Deletion: Alice stops sharing; Bob's device drops her rows and keeps Carol's.
            _ = try await container(alice).privateCloudDatabase.modifyRecords(
                saving: [], deleting: [RecordID(recordName: ShareRecord.zoneWideRecordName, zoneID: zone)], zoneID: zone)
            try await engine.fetchChanges()
            #expect(try titles() == [carol.userRecordName: ["item-1": "Carol's, edited by Bob"]])
        }
    }
}

@Suite("CloudShare: a typed share", .timeLimit(.minutes(10)))
struct CloudShareTests {
    @Test func createInviteAcceptChangeRemoveLeaveAndStop() async throws {
        let world = try await TestWorld.make()
        let carol = try await world.user("carol")
        let (alice, bob) = (world.alice, world.bob)
        try await SyncEngineTests.live(world) { container in
            let zone = ZoneID(zoneName: "Groups")
            let owner = container(alice).privateCloudDatabase
            try await owner.save(zones: [zone])
            let group = CloudRecord(recordType: "Group", recordID: RecordID(recordName: "trip", zoneID: zone), fields: ["name": .string("Trip")])
            _ = try await owner.modifyRecords(saving: [group], deleting: [], zoneID: zone)

            // Create, inviting one user by email and one by user record name.
            var share = CloudShare(rootRecord: group.recordID, title: "Weekend trip")
            share.addParticipant(.emailAddress("bob@example.com"), permission: .readWrite)
            share.addParticipant(.userRecordName(carol.userRecordName), permission: .readOnly)
            share = try await owner.save(share)
            let url = try #require(share.url)
            #expect(share.shortGUID != nil && url.absoluteString.hasSuffix("/share/\(share.shortGUID!)"))
            #expect(share.title == "Weekend trip")
            #expect(share.owner?.userRecordName == alice.userRecordName)
            #expect(share.participants.count == 3)

            // Both accept, Bob by the URL, Carol by the short GUID.
            let metadata = try await container(bob).sharedCloudDatabase.acceptShare(url.absoluteString)
            #expect(metadata.participantStatus == .accepted)
            #expect(metadata.zoneID == ZoneID(zoneName: "Groups", ownerRecordName: alice.userRecordName))
            try await container(carol).sharedCloudDatabase.acceptShare(try #require(share.shortGUID))

            // The participant's view: the share with their own participation.
            let bobShared = container(bob).sharedCloudDatabase
            let seen = try #require(try await bobShared.share(RecordID(recordName: share.recordID.recordName, zoneID: metadata.zoneID)))
            #expect(seen.currentUserParticipant?.userRecordName == bob.userRecordName)
            #expect(seen.currentUserParticipant?.acceptanceStatus == .accepted)

            // The owner reads it back, removes Carol and makes Bob read-only: one save.
            var current = try #require(try await owner.share(share.recordID))
            current.removeParticipant(.userRecordName(carol.userRecordName))
            current.addParticipant(.emailAddress("bob@example.com"), permission: .readOnly)
            current = try await owner.save(current)
            #expect(current.participants.compactMap(\.userRecordName).sorted() == [alice.userRecordName, bob.userRecordName].sorted())
            #expect(current.participants.first { $0.userRecordName == bob.userRecordName }?.permission == .readOnly)
            #expect(current.participants.first { $0.userRecordName == bob.userRecordName }?.acceptanceStatus == .accepted)
            await #expect(throws: CloudError.self) {
                _ = try await container(carol).sharedCloudDatabase.records(named: ["trip"], in: metadata.zoneID)
            }
            #expect(try await bobShared.records(named: ["trip"], in: metadata.zoneID).keys.sorted() == ["trip"])

            // Bob leaves; then Alice stops sharing, and the link leads nowhere.
            try await bobShared.delete(seen)
            await #expect(throws: CloudError.self) { _ = try await bobShared.records(named: ["trip"], in: metadata.zoneID) }
            try await owner.delete(current)
            await #expect(throws: CloudError.self) { _ = try await container(bob).sharedCloudDatabase.shareMetadata(for: url.absoluteString) }
        }
    }
}

/// Feed pages are requested ahead while the previous one is applied: lost answers and an interrupted fetch still
/// leave exactly the applied pages on the device, and the next fetch resumes after them.
@Suite("Sync engine: pipelined feed pages", .timeLimit(.minutes(10)))
struct PipelinedFetchTests {
    static func isLaterPage(_ request: TransportRequest) -> Bool {
        request.url.path.hasSuffix("changes/zone") && String(decoding: request.body ?? Data(), as: UTF8.self).contains("syncToken")
    }

    @Test func aLostPageIsRetriedAndAnInterruptedFetchResumesAfterTheAppliedPages() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            try await phone.recordNumberedDrives(1_000)
            try await phone.engine.sendChanges()

            // A lost answer of a page requested ahead: retried, nothing missing.
            let (flaky, faults) = SyncFaultTests.flaky(container(world.alice))
            let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: flaky)
            faults.inject(.dropAnswer, times: 1, when: Self.isLaterPage)
            try await tablet.engine.fetchChanges()
            #expect(try tablet.count() == 1_000)

            // The network goes after the first page: the fetch fails, with exactly that page applied and its token kept
            // (the next fetch asks for the rest only).
            let laptop = try Device.testing(path: try SyncEngineTests.temporaryPath("laptop"), database: flaky)
            faults.inject(.failBeforeSending, times: 1_000, when: Self.isLaterPage)
            await #expect(throws: CloudError.self) { try await laptop.engine.fetchChanges() }
            #expect(try laptop.count() == 200)
            faults.heal()
            let before = faults.sentPaths.count
            try await laptop.engine.fetchChanges()
            #expect(try laptop.count() == 1_000)
            let zoneRequests = faults.sentPaths.dropFirst(before).filter { $0.hasSuffix("changes/zone") }.count
            #expect(zoneRequests == 4, "the remaining 800 records, in pages of 200")
        }
    }
}

/// Forwards to a delegate and keeps the account changes it passes on.
final class AccountChangeRecorder: SyncEngineDelegate, @unchecked Sendable {
    let wrapped: any SyncEngineDelegate
    private let lock = NSLock()
    private var recorded: [AccountChange] = []

    init(_ wrapped: any SyncEngineDelegate) { self.wrapped = wrapped }

    var changes: [AccountChange] { lock.withLock { recorded } }

    func nextRecordZoneChangeBatch(_ pending: [PendingRecordZoneChange], syncEngine: SyncEngine) async throws -> RecordZoneChangeBatch? {
        try await wrapped.nextRecordZoneChangeBatch(pending, syncEngine: syncEngine)
    }

    func handleEvent(_ event: SyncEngine.Event, syncEngine: SyncEngine) async throws {
        if case .accountChange(let change) = event { lock.withLock { recorded.append(change) } }
        try await wrapped.handleEvent(event, syncEngine: syncEngine)
    }
}

@Suite("Sync engine: account changes", .timeLimit(.minutes(10)))
struct SyncAccountChangeTests {
    static func engine(_ device: Device, _ container: CloudContainer) -> (SyncEngine, AccountChangeRecorder) {
        var configuration = Device.configuration(database: container.privateCloudDatabase, store: device.store, adapter: device.adapter)
        let recorder = AccountChangeRecorder(device.adapter)
        configuration.delegate = recorder
        return (SyncEngine(configuration), recorder)
    }

    @Test func switchingUsersDropsThePreviousUsersRowsAndPendingEditsAndSigningOutToo() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        try await SyncEngineTests.live(world) { container in
            for user in [alice, bob] { try await container(user).privateCloudDatabase.save(zones: [GhostCar.zone]) }
            let bobsTablet = try Device.testing(path: try SyncEngineTests.temporaryPath("bob-tablet"), database: container(bob).privateCloudDatabase)
            let bobsDrive = try bobsTablet.recordDrive(name: "Bob's drive", distance: 5, at: 5)
            try await bobsTablet.engine.sendChanges()

            // The first sync of a device is a sign-in; its answer lost once, the check is retried.
            let (flakyAlice, faults) = SyncFaultTests.flaky(container(alice))
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: flakyAlice)
            var (engine, recorder) = Self.engine(phone, flakyAlice.container)
            faults.inject(.dropAnswer, times: 1) { $0.url.path.hasSuffix("users/caller") }
            let alicesDrive = try phone.recordDrive(name: "Alice's drive", distance: 1, at: 1)
            try await engine.sendChanges()
            try await engine.fetchChanges()
            #expect(recorder.changes == [.signIn(currentUser: alice.userRecordName)])
            #expect(faults.sentPaths.filter { $0.hasSuffix("users/caller") }.count == 2)
            // An edit Alice never sent.
            try phone.rename(alicesDrive, to: "Alice's unsent edit", at: 2)

            // Bob signs in on the same device: Alice's rows and her unsent edit are gone, and never reach Bob's data.
            (engine, recorder) = Self.engine(phone, container(bob))
            try await engine.fetchChanges()
            try await engine.sendChanges()
            #expect(recorder.changes == [.switchAccounts(previousUser: alice.userRecordName, currentUser: bob.userRecordName)])
            #expect(try phone.names() == [bobsDrive: "Bob's drive"])
            let bobsServer = try await container(bob).privateCloudDatabase.zoneChanges(GhostCar.zone, since: nil)
            #expect(bobsServer.records.map(\.recordID.recordName) == [bobsDrive])
            let alicesServer = try await container(alice).privateCloudDatabase.records(named: [alicesDrive], in: GhostCar.zone)
            #expect(alicesServer[alicesDrive]?.fields["customName"] == .string("Alice's drive"))

            // An expired or revoked token is not a sign-out: the sync fails, and nothing is forgotten.
            var expired = container(bob)
            expired.webAuthToken = "no-longer-valid-token"
            try phone.rename(bobsDrive, to: "Bob, offline edit", at: 6)
            (engine, recorder) = Self.engine(phone, expired)
            await #expect(throws: CloudError.self) { try await engine.fetchChanges() }
            #expect(recorder.changes.isEmpty)
            #expect(try phone.names() == [bobsDrive: "Bob, offline edit"])
            #expect(try await phone.store.pendingRecordZoneChanges().count == 1)

            // Signing out (no token): Bob's rows go too, and sync asks for a sign-in.
            var signedOut = container(bob)
            signedOut.webAuthToken = nil
            (engine, recorder) = Self.engine(phone, signedOut)
            await #expect(throws: CloudError.self) { try await engine.fetchChanges() }
            #expect(recorder.changes == [.signOut(previousUser: bob.userRecordName)])
            #expect(try phone.count() == 0)
            #expect(try await phone.store.pendingRecordZoneChanges().isEmpty)
        }
    }
}

@Suite("GRDB sync store: the server's fields, the ancestor of merges", .timeLimit(.minutes(10)))
struct ServerFieldsTests {
    /// Large values are kept as digests: the ancestor still tells an unchanged value from a changed one, field by field.
    @Test func largeValuesAreKeptAsDigestsThatStillTellChangesApart() async throws {
        let queue = try DatabaseQueue()
        let store = try GRDBSyncStore(writer: queue, scope: "private")
        let id = RecordID(recordName: "r", zoneID: ZoneID(zoneName: "Z"))
        let route = Data((0..<675).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let note = String(repeating: "long note ", count: 20)
        var record = CloudRecord(recordType: "T", recordID: id)
        record.fields = ["route": .bytes(route), "note": .string(note), "short": .bytes(Data([1, 2]))]
        let stored = record
        try await queue.write { db in try store.setServerRecords([stored], in: db) }
        let size = try await queue.read { db in try Int.fetchOne(db, sql: "SELECT length(server_fields) FROM cumulus_sync_metadata") }
        #expect(try #require(size) < 200)
        let ancestor = try #require(try await queue.read { db in try store.lastServerFields(for: id, in: db) })
        #expect(ancestor.holds("route", .bytes(route)))
        #expect(!ancestor.holds("route", .bytes(route.dropLast())))
        #expect(!ancestor.holds("route", .string(String(decoding: route, as: UTF8.self))))
        #expect(!ancestor.holds("route", nil))
        #expect(ancestor.holds("note", .string(note)))
        #expect(!ancestor.holds("note", .string(note + ".")))
        #expect(ancestor.holds("short", .bytes(Data([1, 2]))))
        #expect(ancestor.holds("missing", nil))

        // A merge against it: the device changed the note, the server the route; both are kept.
        let newRoute = Data(route.reversed())
        let outcome = RecordMerge.merge(
            ancestorHolds: ancestor.holds, local: ["route": .bytes(route), "note": .string("mine")],
            server: ["route": .bytes(newRoute), "note": .string(note)], names: ["route", "note"]
        ) { _, _, _ in .server }
        #expect(outcome.fields == ["route": .bytes(newRoute), "note": .string("mine")])
        #expect(outcome.discardedLocalFields.isEmpty)
    }

    @Test func everyFieldTypeReadsBackAsStoredAndOlderJSONRowsStillRead() async throws {
        let queue = try DatabaseQueue()
        let store = try GRDBSyncStore(writer: queue, scope: "private")
        let id = RecordID(recordName: "r", zoneID: ZoneID(zoneName: "Z"))
        var record = CloudRecord(recordType: "T", recordID: id)
        record.fields = [
            "s": .string("héllo \"quoted\""), "i": .int64(-42), "d": .double(2.5), "t": .timestamp(1_700_000_000_123),
            "b": .bytes(Data([0, 1, 2, 255])), "r": .reference(Reference(recordName: "other", action: .deleteSelf)),
            "l": .location(Location(latitude: 51.5, longitude: -0.12)), "list": .list(.int64, [.int64(1), .int64(2)]), "": .string("empty name"),
        ]
        record.recordChangeTag = "tag-1"
        let stored = record
        try await queue.write { db in try store.setServerRecords([stored], in: db) }
        let read = try await queue.read { db in try store.lastServerFields(for: id, in: db) }
        #expect(read == ServerFields(stored.fields))

        // Rows written before the binary form hold canonical JSON.
        try await queue.write { db in
            try db.execute(
                sql: "UPDATE cumulus_sync_metadata SET server_fields = ?",
                arguments: [Data(RecordFieldsCoding.canonical(["s": .string("old"), "i": .int64(7)]))])
        }
        let legacy = try await queue.read { db in try store.lastServerFields(for: id, in: db) }
        #expect(legacy == ServerFields(["s": .string("old"), "i": .int64(7)]))
        #expect(try await queue.read { db in try store.changeTag(for: id, in: db) } == "tag-1")
    }
}
