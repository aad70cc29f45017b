import CumulusClient
import CumulusCore
import CumulusModel
import CumulusStore
import CumulusSyncGRDB
import Foundation
import GhostCarExample
import Logging
import SplitCostsExample
import Synchronization
import Testing

/// Time travel (issue 37): a zone restored to a past moment as ordinary changes, which a device that synced before
/// fetches from its old token; its unsent edit meets the restored record as a conflict; the restore undone by a second.
/// A real server on loopback, over both stores; the server's clock is set by hand, so moments are exact.
@Suite("Zone restore and undelete", .timeLimit(.minutes(10)))
struct ZoneRestoreTests {
    /// A wall clock a test moves by hand.
    final class ManualClock: Sendable {
        let milliseconds = Mutex<Int64>(1_780_000_000_000)
        var clock: WallClock { WallClock { Date(timeIntervalSince1970: Double(self.milliseconds.withLock { $0 }) / 1000) } }
        func advance(seconds: Int64) { milliseconds.withLock { $0 += seconds * 1000 } }
        var now: Int64 { milliseconds.withLock { $0 } }
    }

    static func names(_ database: CloudDatabase, _ ids: [String]) async throws -> [String: String?] {
        let found = try await database.records(named: ids, in: GhostCar.zone)
        var names: [String: String?] = [:]
        for (id, record) in found {
            if case .string(let name)? = record["customName"] { names[id] = name } else { names[id] = .some(nil) }
        }
        return names
    }

    @Test(arguments: TestStore.all)
    func aZoneRestoredToAMomentBetweenReachesADeviceAsChangesAndASecondRestoreUndoesIt(_ kind: TestStore) async throws {
        let time = ManualClock()
        let world = try await TestWorld.make(store: kind, clock: time.clock)
        let service = DatabaseService(store: world.store, clock: time.clock)
        let logger = Logger(label: "test")
        let zone = DatabaseRef(
            container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: world.alice.userRecordName)
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("restore-phone"), database: database)
            let tablet = try Device.testing(
                path: try SyncEngineTests.temporaryPath("restore-tablet"), database: container(world.alice).privateCloudDatabase)
            for index in 0..<6 { try phone.recordDrive(id: "drive-\(index)", name: "Drive \(index)", distance: 1, at: 1) }
            try await phone.engine.sendChanges()

            // An hour of edits, then the moment to go back to, then a bad hour.
            time.advance(seconds: 3600)
            try phone.rename("drive-1", to: "Renamed once", at: 2)
            try phone.delete("drive-3")
            try await phone.engine.sendChanges()
            time.advance(seconds: 1800)
            let moment = time.now
            time.advance(seconds: 1800)
            try phone.rename("drive-1", to: "Bad rename", at: 3)
            try phone.delete("drive-4")
            try phone.recordDrive(id: "drive-new", name: "Created later", distance: 1, at: 3)
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names()["drive-4"] == nil && tablet.names()["drive-new"] == "Created later")
            // The tablet edits a record offline; the edit waits to be sent.
            try tablet.rename("drive-2", to: "Tablet's edit", at: 4)

            // A dry run lists the differences and changes nothing.
            time.advance(seconds: 600)
            var listed: [String] = []
            let dry = try await service.history.restoreZone(GhostCar.zone.zoneName, in: zone, to: moment, dryRun: true, logger: logger) {
                listed.append("\($0)".prefix(7) + " " + $0.recordName)
            }
            #expect(dry.changed == 1 && dry.deleted == 1 && dry.created == 1)
            #expect(listed.map { $0.split(separator: " ").last.map(String.init) ?? "" } == ["drive-1", "drive-4", "drive-new"])
            #expect(try await Self.names(database, ["drive-new"]).keys.contains("drive-new"), "a dry run changes nothing")

            // The restore: lookups show the zone as it was at the moment.
            let report = try await service.history.restoreZone(GhostCar.zone.zoneName, in: zone, to: moment, dryRun: false, logger: logger)
            #expect(report.changed == 1 && report.deleted == 1 && report.created == 1 && report.failures.isEmpty)
            let restored = try await Self.names(database, (0..<6).map { "drive-\($0)" } + ["drive-new"])
            #expect(restored["drive-1"] == "Renamed once")
            #expect(restored["drive-4"] == "Drive 4", "deleted since: back")
            #expect(restored["drive-new"] == nil, "created since: deleted")
            #expect(restored["drive-3"] == nil, "deleted before the moment: stays deleted")
            #expect(restored["drive-2"] == "Drive 2")

            // The tablet synced before the restore: it fetches the restoration from its old token, with no reset.
            try await tablet.engine.fetchChanges()
            let names = try tablet.names()
            #expect(names["drive-1"] == "Renamed once")
            #expect(names["drive-4"] == "Drive 4")
            #expect(names["drive-new"] == nil)
            #expect(names["drive-2"] == "Tablet's edit", "an unsent edit is not overwritten by the restore")
            // Its unsent edit meets the restored record as an ordinary conflict and survives it.
            try await tablet.engine.sendChanges()
            #expect(try await Self.names(database, ["drive-2"])["drive-2"] == "Tablet's edit")
            let reports = try await tablet.engine.verify()
            #expect(reports.allSatisfy { $0.isInSync }, "\(reports)")
            try await phone.engine.fetchChanges()
            #expect(try phone.names() == tablet.names())

            // The restore undone: back to the moment before it.
            time.advance(seconds: 60)
            let undo = try await service.history.restoreZone(
                GhostCar.zone.zoneName, in: zone, to: report.startedAt - 1, dryRun: false, logger: logger)
            #expect(undo.failures.isEmpty)
            let undone = try await Self.names(database, ["drive-1", "drive-4", "drive-new", "drive-2"])
            #expect(undone["drive-1"] == "Bad rename")
            #expect(undone["drive-4"] == nil)
            #expect(undone["drive-new"] == "Created later")
            #expect(undone["drive-2"] == "Drive 2", "the tablet's edit came after the restore: undoing it goes back before the edit too")
            try await tablet.engine.fetchChanges()
            #expect(try tablet.names()["drive-new"] == "Created later")
        }
    }

    /// An edit waiting to be sent, of a record a restore deletes (created after the moment), ends the same way whether
    /// the device fetches the deletion first or sends the edit first: the edit wins and re-creates the record, and the
    /// app is told (`recreatedDeletedRecord`). Before, fetching first dropped the edit with no word.
    @Test(arguments: TestStore.all)
    func anUnsentEditOfARecordTheRestoreDeletesEndsTheSameWhicheverComesFirst(_ kind: TestStore) async throws {
        let time = ManualClock()
        let world = try await TestWorld.make(store: kind, clock: time.clock)
        let service = DatabaseService(store: world.store, clock: time.clock)
        let zone = DatabaseRef(
            container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: world.alice.userRecordName)
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let fetcherReports = Mutex<[GRDBSyncAdapter.Report]>([])
            let senderReports = Mutex<[GRDBSyncAdapter.Report]>([])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("first-phone"), database: database)
            let fetcher = try Device.testing(
                path: try SyncEngineTests.temporaryPath("fetcher"), database: container(world.alice).privateCloudDatabase,
                onReport: { report in fetcherReports.withLock { $0.append(report) } })
            let sender = try Device.testing(
                path: try SyncEngineTests.temporaryPath("sender"), database: container(world.alice).privateCloudDatabase,
                onReport: { report in senderReports.withLock { $0.append(report) } })
            try phone.recordDrive(id: "early", name: "Early", distance: 1, at: 1)
            try await phone.engine.sendChanges()
            time.advance(seconds: 3600)
            let moment = time.now
            time.advance(seconds: 60)
            try phone.recordDrive(id: "late-1", name: "Late 1", distance: 1, at: 2)
            try phone.recordDrive(id: "late-2", name: "Late 2", distance: 1, at: 2)
            try await phone.engine.sendChanges()
            try await fetcher.engine.fetchChanges()
            try await sender.engine.fetchChanges()
            // Offline, each edits a record created after the moment.
            try fetcher.rename("late-1", to: "Fetcher's edit", at: 10)
            try sender.rename("late-2", to: "Sender's edit", at: 10)
            time.advance(seconds: 60)
            let report = try await service.history.restoreZone(
                GhostCar.zone.zoneName, in: zone, to: moment, dryRun: false, logger: Logger(label: "test"))
            #expect(report.created == 2 && report.failures.isEmpty, "\(report)")

            // The fetcher fetches first: the deletion meets its unsent edit, which stays and goes as a new record.
            try await fetcher.engine.fetchChanges()
            #expect(try fetcher.names()["late-1"] == "Fetcher's edit")
            #expect(fetcherReports.withLock { $0 }.contains(.recreatedDeletedRecord(recordID: RecordID(recordName: "late-1", zoneID: GhostCar.zone))))
            try await fetcher.engine.sendChanges()
            // The sender sends first: its update meets NOT_FOUND and goes again as a new record.
            try await sender.engine.sendChanges()
            #expect(senderReports.withLock { $0 }.contains(.recreatedDeletedRecord(recordID: RecordID(recordName: "late-2", zoneID: GhostCar.zone))))
            #expect(try await Self.names(database, ["late-1", "late-2"]) == ["late-1": "Fetcher's edit", "late-2": "Sender's edit"])

            // Every device ends with the same records, and verifies in sync.
            for device in [fetcher, sender, phone] { try await device.engine.fetchChanges() }
            let (fetched, sent, written) = (try fetcher.names(), try sender.names(), try phone.names())
            #expect(fetched == sent && sent == written, "\(written)")
            for device in [fetcher, sender, phone] {
                let reports = try await device.engine.verify()
                #expect(reports.allSatisfy { $0.isInSync }, "\(reports)")
            }
        }
    }

    @Test(arguments: TestStore.all)
    func aRecordDeletedWithinTheWindowComesBackAloneAndAMomentOutsideTheWindowIsRefused(_ kind: TestStore) async throws {
        let time = ManualClock()
        let world = try await TestWorld.make(store: kind, clock: time.clock)
        let service = DatabaseService(store: world.store, clock: time.clock, historyRetention: .seconds(3600))
        let logger = Logger(label: "test")
        let zone = DatabaseRef(
            container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: world.alice.userRecordName)
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("undelete-phone"), database: database)
            for index in 0..<3 { try phone.recordDrive(id: "drive-\(index)", name: "Drive \(index)", distance: 1, at: 1) }
            try await phone.engine.sendChanges()
            time.advance(seconds: 60)
            try phone.rename("drive-1", to: "Last name", at: 2)
            try await phone.engine.sendChanges()
            time.advance(seconds: 60)
            try phone.delete("drive-1")
            try phone.delete("drive-2")
            try await phone.engine.sendChanges()
            time.advance(seconds: 60)

            let deleted = try await service.history.deletedRecords(GhostCar.zone.zoneName, in: zone, logger: logger)
            #expect(Set(deleted.map(\.record.header.recordName)) == ["drive-1", "drive-2"])
            let results = try await service.history.undeleteRecords(
                ["drive-1", "drive-0"], zoneName: GhostCar.zone.zoneName, in: zone, logger: logger)
            guard case .saved(let record) = results.first, case .failed(let refused) = results.last else {
                Issue.record("\(results)")
                return
            }
            #expect(record.header.modified.deviceID == HistoryService.restoreDeviceID)
            #expect(refused.code == .notFound && refused.reason.contains("drive-0"))
            #expect(try await Self.names(database, ["drive-1", "drive-2"]) == ["drive-1": "Last name"])
            try await phone.engine.fetchChanges()
            #expect(try phone.names()["drive-1"] == "Last name")
            #expect(try phone.names()["drive-2"] == nil)

            // Outside the window (an hour here): refused with the reason, nothing written.
            time.advance(seconds: 3600)
            await #expect(throws: CumulusError.self) {
                try await service.history.restoreZone(GhostCar.zone.zoneName, in: zone, to: time.now - 3_700_000, dryRun: false, logger: logger)
            }
            #expect(
                try await service.history.deletedRecords(GhostCar.zone.zoneName, in: zone, logger: logger).isEmpty, "deletions older than the window")
            // Pruning drops what the window no longer reaches.
            #expect(try await service.history.prune(logger: logger) > 0)
        }
    }

    /// A shared zone is restored by its owner; a participant's device follows through its shared database.
    @Test(arguments: TestStore.all)
    func aParticipantsDeviceFollowsItsOwnersRestore(_ kind: TestStore) async throws {
        let time = ManualClock()
        let world = try await TestWorld.make(store: kind, clock: time.clock)
        let service = DatabaseService(store: world.store, clock: time.clock)
        let zone = DatabaseRef(
            container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: world.alice.userRecordName)
        try await SyncEngineTests.live(world) { container in
            let alicePhone = try SplitCostsTests.device(container(world.alice), "restore-shared-alice")
            let bobPhone = try SplitCostsTests.device(container(world.bob), "restore-shared-bob")
            try await alicePhone.prepare()
            try await bobPhone.prepare()
            let trip = try alicePhone.createGroup("Trip")
            let fuel = try alicePhone.addCost("Fuel", amount: 80, paidBy: "A", to: trip)
            let hotel = try alicePhone.addCost("Hotel", amount: 200, paidBy: "A", to: trip)
            try await alicePhone.sync()
            let url = try #require(try await alicePhone.share(group: trip, with: ["bob@example.com"]).url?.absoluteString)
            try await bobPhone.accept(url)
            try await bobPhone.sync()
            #expect(try bobPhone.costs() == ["Fuel": 80, "Hotel": 200])

            time.advance(seconds: 60)
            let moment = time.now
            time.advance(seconds: 60)
            try alicePhone.deleteCost(hotel)
            try alicePhone.setAmount(999, ofCost: fuel)
            try await alicePhone.sync()
            try await bobPhone.sync()
            #expect(try bobPhone.costs() == ["Fuel": 999])

            time.advance(seconds: 60)
            let report = try await service.history.restoreZone(
                SplitCosts.zone.zoneName, in: zone, to: moment, dryRun: false, logger: Logger(label: "test"))
            #expect(report.changed == 1 && report.deleted == 1 && report.failures.isEmpty, "\(report)")
            try await bobPhone.sync()
            #expect(try bobPhone.costs() == ["Fuel": 80, "Hotel": 200], "the participant's device follows the owner's restore")
            try await alicePhone.sync()
            #expect(try alicePhone.costs() == ["Fuel": 80, "Hotel": 200])
        }
    }
}
