import CumulusClient
import CumulusCore
import CumulusModel
import CumulusStore
import CumulusSyncGRDB
import CumulusTesting
import Foundation
import GRDB
import GhostCarExample
import HTTPTypes
import Logging
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

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

    /// A value given behind the engine's back to a column whose field the server's version lacks is a difference, and
    /// the repair gives the column its default back (a field a record lacks is the column's default, as in a new row).
    @Test func aValueInAColumnTheServerLeftEmptyIsADifference() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [GhostCar.zone])
            let phone = try Device.testing(path: try SyncEngineTests.temporaryPath("phone"), database: database)
            try phone.recordDrive(id: "unnamed", name: nil, distance: 3, at: 1)
            try phone.recordDrive(id: "named", name: "Named", distance: 4, at: 1)
            try await phone.engine.sendChanges()
            let stored = try #require(try await database.records(named: ["unnamed"], in: GhostCar.zone)["unnamed"])
            #expect(stored.fields["customName"] == nil, "the server's version has no name")
            #expect(try await phone.engine.verify().allSatisfy(\.isInSync))

            try await phone.queue.write { db in try db.execute(sql: "UPDATE drives SET customName = 'Sneaky' WHERE id = 'unnamed'") }
            let found = try #require(try await phone.engine.verify(.zoneIDs([GhostCar.zone])).first)
            #expect(found.stale == ["unnamed"] && found.missing.isEmpty && found.extra.isEmpty, "\(found)")
            let after = try #require(try await phone.engine.repair([found]).first)
            #expect(after.isInSync, "\(after)")
            #expect(try phone.names()["unnamed"] == .some(nil), "the column is empty again, as the server's version")
            #expect(try phone.names()["named"] == "Named")
        }
    }

    static func isReport(_ request: TransportRequest) -> Bool { request.url.path.hasSuffix("devices/verification") }

    /// A device tells the server what it verified: the console flags a tampered device (its user's page and the
    /// overview, in a real browser) and `/metrics` counts it; a report whose answer is lost is sent again, one that
    /// cannot be sent goes with the next fetch, and an in-sync report takes the flag away.
    @Test(arguments: TestStore.all)
    func aTamperedDeviceIsFlaggedInTheConsoleOnceItReportsItsVerification(_ kind: TestStore) async throws {
        let world = try await TestWorld.make(store: kind)
        try await SyncEngineTests.live(world) { container in
            let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
            var flaky = container(world.alice)
            flaky.transport = faults
            flaky.deviceID = "tablet-7"
            flaky.deviceName = "Alice's tablet"
            try await flaky.privateCloudDatabase.save(zones: [GhostCar.zone])
            let tablet = try Device.testing(path: try SyncEngineTests.temporaryPath("tablet"), database: flaky.privateCloudDatabase)
            for index in 0..<5 { try tablet.recordDrive(id: "drive-\(index)", name: "Drive \(index)", distance: 1, at: 1) }
            try await tablet.engine.sendChanges()

            // The first report's answer is lost: sent again, and kept once.
            faults.inject(.dropAnswer, times: 1, when: Self.isReport)
            #expect(try await tablet.engine.verify().allSatisfy(\.isInSync))
            #expect(await tablet.engine.status.lastVerificationReported == true)

            // Behind the engine's back: a row deleted, one changed. The report cannot reach the server now.
            try await tablet.queue.write { db in
                try db.execute(sql: "DELETE FROM drives WHERE id = 'drive-1'")
                try db.execute(sql: "UPDATE drives SET customName = 'Tampered' WHERE id = 'drive-3'")
            }
            faults.inject(.failBeforeSending, times: 1_000, when: Self.isReport)
            let found = try #require(try await tablet.engine.verify(.zoneIDs([GhostCar.zone])).first)
            #expect(found.missing == ["drive-1"] && found.stale == ["drive-3"], "\(found)")
            #expect(await tablet.engine.status.lastVerificationReported == false, "the verification stands; its report waits")
            faults.heal()
            // The next fetch carries it.
            try await tablet.engine.fetchChanges()
            #expect(await tablet.engine.status.lastVerificationReported == true)

            let base = flaky.serverURL.absoluteString
            func rendered(_ path: String) async throws -> String {
                let token = try await world.accounts.createConsoleSignIn(container: TestWorld.container, logger: Logger(label: "test"))
                return try await LinkPageBrowserTests.runChromium(["--dump-dom", "\(base)/console/signin?token=\(token)&next=\(path)"])
            }
            let user = try await rendered("/console/development/users/\(world.alice.userRecordName)")
            let row = try #require(user.components(separatedBy: "<tr>").first { $0.contains("tablet-7") }, "\(user)")
            #expect(row.contains(#"<td class="flag">OUT OF SYNC: 1 missing, 1 stale in Drives, "#), "\(row)")
            let overview = try await rendered("/console/development")
            #expect(overview.contains("<b>1</b>devices out of sync"), "\(overview)")
            let listed = try #require(overview.components(separatedBy: "<tr>").first { $0.contains("tablet-7") }, "\(overview)")
            #expect(listed.contains(">alice</a>") && listed.contains("1 missing, 1 stale in Drives"), "\(listed)")
            #expect(overview.contains(#"id="chart-verifications""#) && overview.contains("1 out of sync and 2 in sync in the hour"), "\(overview)")

            let (metrics, _) = try await URLSession.shared.data(from: URL(string: "\(base)/metrics")!)
            let text = String(decoding: metrics, as: UTF8.self)
            #expect(metricSample(#"cumulus_device_verifications_total{result="out_of_sync"}"#, in: text) == 1, "\(text)")
            #expect(!text.contains("tablet-7"), "metrics name no device")
            // (The lost answer's report counted twice: the server cannot tell a report sent again from a new one.)
            // Repaired and verified again (the zone it repaired): in sync, off the list.
            _ = try await tablet.engine.repair([found])
            let repaired = await tablet.engine.status
            #expect(repaired.lastVerifiedInSync == true && repaired.lastVerificationReported == true)
            let after = try await rendered("/console/development")
            #expect(after.contains("<b>0</b>devices out of sync") && !after.contains("OUT OF SYNC"), "\(after)")
            let again = try await rendered("/console/development/users/\(world.alice.userRecordName)")
            let fixed = try #require(again.components(separatedBy: "<tr>").first { $0.contains("tablet-7") })
            #expect(fixed.contains("<td>in sync (1 zone), "), "\(fixed)")
        }
    }

    /// `devices/verification` refuses what it cannot keep, naming the field.
    @Test func aVerificationReportIsRefusedWithItsReason() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let device: HTTPFields = [HTTPField.Name("X-Cumulus-Device")!: "phone"]
            let valid = #"{"zones":[{"zoneID":{"zoneName":"Drives"},"missing":1}]}"#
            let anonymousDevice = try await client.send("devices/verification", as: .user(world.alice), body: valid)
            #expect(anonymousDevice.status == 400 && anonymousDevice.reason?.contains("X-Cumulus-Device") == true, "\(anonymousDevice.json)")
            let negative = try await client.send(
                "devices/verification", as: .user(world.alice), body: #"{"zones":[{"zoneID":{"zoneName":"Drives"},"stale":-1}]}"#, headers: device)
            #expect(negative.status == 400 && negative.reason?.contains("zones[0].stale") == true, "\(negative.json)")
            // A count past 32 bits is refused by name; counts that add up past it are kept as the most a store holds (a sum
            // that overflowed would stop the server).
            let huge = try await client.send(
                "devices/verification", as: .user(world.alice), body: #"{"zones":[{"zoneID":{"zoneName":"A"},"missing":2147483648}]}"#,
                headers: device)
            #expect(huge.status == 400 && huge.reason?.contains("zones[0].missing") == true, "\(huge.json)")
            let many = (0..<3).map { #"{"zoneID":{"zoneName":"Z\#($0)"},"extra":2147483647}"# }.joined(separator: ",")
            let summed = try await client.send("devices/verification", as: .user(world.alice), body: #"{"zones":[\#(many)]}"#, headers: device)
            #expect(summed.status == 200, "\(summed.json)")
            let phone = try #require(
                try await world.store.devices(
                    container: TestWorld.container, userRecordName: world.alice.userRecordName, logger: Logger(label: "test")
                )
                .first { $0.deviceID == "phone" })
            #expect(phone.verification?.extra == 2_147_483_647 && phone.verification?.zones == 3, "\(String(describing: phone.verification))")
            let noZones = try await client.send("devices/verification", as: .user(world.alice), body: "{}", headers: device)
            #expect(noZones.status == 400 && noZones.reason?.contains("zones") == true, "\(noZones.json)")
            let publicDatabase = try await client.send(
                "devices/verification", as: .user(world.alice), database: "public", body: valid, headers: device)
            #expect(publicDatabase.status == 400, "\(publicDatabase.json)")
            let anonymous = try await client.send("devices/verification", as: .anonymous, body: valid, headers: device)
            #expect(anonymous.status == 421 || anonymous.status == 401, "\(anonymous.json)")
            let kept = try await client.send("devices/verification", as: .user(world.alice), body: valid, headers: device)
            #expect(kept.status == 200 && kept.json["inSync"] == .bool(false), "\(kept.json)")
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
