import CumulusClient
import CumulusModel
import CumulusSyncGRDB
import CumulusTesting
import Foundation
import GRDB
import GhostCarExample
import Testing

/// Sync you can prove: a device compares what its tables hold with the server's zone digest, finds exactly the records
/// that differ (a row deleted, changed or added behind the engine's back, its bookkeeping damaged), and repairs only
/// those, while an edit waiting to be sent survives. A real server on loopback; faults injected in the transport.
@Suite("Sync engine: verify and repair", .timeLimit(.minutes(10)))
struct SyncVerificationTests {
    static func isReconcile(_ request: TransportRequest) -> Bool { request.url.path.hasSuffix("records/reconcile") }

    @Test(arguments: TestStore.all)
    func verifyNamesEachTamperedRowAndRepairFixesOnlyThoseWhileAPendingEditSurvives(_ kind: TestStore) async throws {
        let world = try await TestWorld.make(store: kind)
        try await SyncEngineTests.live(world) { container in
            let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
            var flaky = container(world.alice)
            flaky.transport = faults
            let database = flaky.privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: container(world.alice).privateCloudDatabase)
            for index in 0..<60 { try phone.recordDrive(id: String(format: "drive-%02d", index), name: "Drive \(index)", distance: 1, at: 1) }
            try await phone.engine.sendChanges()
            try await tablet.engine.fetchChanges()

            // In sync: one empty page and its digest, no reconciliation.
            // Every zone of the database is verified: the default zone and the drives' zone.
            let clean = try await tablet.engine.verify()
            #expect(Set(clean.map(\.zoneID.zoneName)) == [ZoneID.defaultZoneName, GhostCar.zone.zoneName])
            #expect(clean.allSatisfy { $0.isInSync && $0.roundTrips == 0 })
            let status = await tablet.engine.status
            #expect(status.lastVerifiedInSync == true && status.lastVerifiedAt != nil && status.lastFetchedAt != nil)

            // Behind the engine's back: a row deleted, a field changed, a row added, change tags damaged, one of
            // them of a record with an edit waiting to be sent.
            try tablet.rename("drive-50", to: "Tablet's name", at: 5000)
            try await tablet.queue.write { db in
                try db.execute(sql: "DELETE FROM drives WHERE id = 'drive-03'")
                try db.execute(sql: "UPDATE drives SET customName = 'Tampered' WHERE id = 'drive-17'")
                try db.execute(sql: "INSERT INTO drives (id, distance, modifiedAt) VALUES ('stray', 5, 1)")
                try db.execute(sql: "UPDATE cumulus_sync_metadata SET change_tag = 'zz' WHERE record_name IN ('drive-42', 'drive-50')")
            }

            // A reconcile answer lost on the way is retried.
            faults.inject(.dropAnswer, times: 1, when: Self.isReconcile)
            let found = try #require(try await tablet.engine.verify(.zoneIDs([GhostCar.zone])).first)
            #expect(found.missing == ["drive-03"])
            #expect(found.extra == ["stray"])
            #expect(found.stale == ["drive-17", "drive-42", "drive-50"])
            #expect(found.pending == ["drive-50"])
            #expect(found.roundTrips >= 1)
            let afterVerify = await tablet.engine.status
            #expect(afterVerify.lastVerifiedInSync == false)

            // The repair touches those rows only; the pending edit is left to the send.
            let before = try tablet.names()
            let after = try #require(try await tablet.engine.repair([found]).first)
            let names = try tablet.names()
            #expect(names["drive-03"] == "Drive 3")
            #expect(names["drive-17"] == "Drive 17")
            #expect(names["stray"] == nil)
            #expect(names["drive-50"] == "Tablet's name", "a pending edit is never overwritten by a repair")
            for (id, name) in before where !["drive-03", "drive-17", "stray", "drive-50"].contains(id) { #expect(names[id] == name) }
            #expect(after.stale == ["drive-50"] && after.missing.isEmpty && after.extra.isEmpty)

            // Sending settles the pending edit (its damaged tag meets a conflict, merged and sent again); then every
            // zone of both devices is in sync.
            try await tablet.engine.sendChanges()
            try await phone.engine.fetchChanges()
            let tabletReports = try await tablet.engine.verify()
            let phoneReports = try await phone.engine.verify()
            #expect(tabletReports.allSatisfy { $0.isInSync }, "\(tabletReports)")
            #expect(phoneReports.allSatisfy { $0.isInSync }, "\(phoneReports)")
            #expect(try tablet.names()["drive-50"] == "Tablet's name")
        }
    }

    @Test func verifyWithNoNetworkFailsAndSucceedsOnceItReturns() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
            var flaky = container(world.alice)
            flaky.transport = faults
            try await flaky.privateCloudDatabase.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: flaky.privateCloudDatabase)
            try phone.recordDrive(id: "one", name: "One", distance: 1, at: 1)
            faults.inject(.failBeforeSending, times: 100)
            await #expect(throws: CloudError.self) { try await phone.engine.verify() }
            faults.heal()
            try await phone.engine.sendChanges()
            let reports = try await phone.engine.verify()
            #expect(reports.allSatisfy { $0.isInSync }, "\(reports)")
        }
    }

    @Test func resyncKeepsPendingEditsAndDropsWhatTheServerNoLongerHas() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            for id in ["a", "b", "c"] { try phone.recordDrive(id: id, name: id, distance: 1, at: 1) }
            try await phone.engine.sendChanges()
            try await phone.queue.write { db in try db.execute(sql: "INSERT INTO drives (id, distance, modifiedAt) VALUES ('ghost', 1, 1)") }
            try phone.rename("b", to: "unsent", at: 9)
            try await phone.engine.resync(GhostCar.zone)
            let names = try phone.names()
            #expect(names["ghost"] == nil)
            #expect(names["b"] == "unsent")
            #expect(Set(names.keys) == ["a", "b", "c"])
            #expect(try await phone.store.pendingRecordZoneChanges().count == 1)
        }
    }
}
