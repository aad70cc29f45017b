import CumulusClient
import CumulusModel
import CumulusSyncGRDB
import CumulusTesting
import Foundation
import GRDB
import SplitCostsExample
import Testing

/// Seed 001's cost-splitting app, two people and three devices, through a real server.
@Suite("Sync engine: the cost-splitting app, shared as a hierarchy", .timeLimit(.minutes(10)))
struct SplitCostsTests {
    static func device(_ container: CloudContainer, _ name: String, path: String? = nil) throws -> SplitCosts {
        try SplitCosts(container: container, path: try path ?? SyncEngineTests.temporaryPath(name)) { configuration in
            configuration.retryPolicy = RetryPolicy(maximumAttempts: 3, initialDelay: .milliseconds(10))
            configuration.sleep = { try await Task.sleep(for: min($0, .milliseconds(50))) }
        }
    }

    @Test func aParticipantAddsAndEditsCostsUnderASharedGroupAndLosesItWhenRemoved() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        try await SyncEngineTests.live(world) { container in
            let alicePhone = try Self.device(container(alice), "alice-phone")
            let aliceTablet = try Self.device(container(alice), "alice-tablet")
            let bobPhone = try Self.device(container(bob), "bob-phone")
            try await alicePhone.prepare()
            try await bobPhone.prepare()

            // Alice plans a trip with a first cost, and shares the group with Bob.
            let trip = try alicePhone.createGroup("Lisbon trip")
            let fuel = try alicePhone.addCost("Fuel", amount: 80, paidBy: "Alice", to: trip)
            try await alicePhone.sync()
            let share = try await alicePhone.share(group: trip, with: ["bob@example.com"])
            let url = try #require(share.url?.absoluteString)

            // Bob keeps a group of his own, accepts the link, and sees the trip beside it.
            let flat = try bobPhone.createGroup("Flat")
            try bobPhone.addCost("Rent", amount: 900, paidBy: "Bob", to: flat)
            try await bobPhone.accept(url)
            try await bobPhone.sync()
            #expect(try bobPhone.groups() == ["Flat": "", "Lisbon trip": alice.userRecordName])
            #expect(try bobPhone.costs() == ["Rent": 900, "Fuel": 80])

            // Under the shared group, Bob adds a cost and corrects another: no zone, owner or database in his code.
            let snacks = try bobPhone.addCost("Snacks", amount: 12.5, paidBy: "Bob", to: trip)
            try bobPhone.setAmount(85, ofCost: fuel)
            try await bobPhone.sync()
            let routed = try await bobPhone.database.read { db in try bobPhone.router.place(snacks, in: SplitCosts.costs, db) }
            #expect(routed.scope == .shared && routed.recordID.zoneID.ownerRecordName == alice.userRecordName)
            // His own group went to his private database, as before.
            let bobsOwn = try await container(bob).privateCloudDatabase.records(named: [flat], in: SplitCosts.zone)
            #expect(bobsOwn[flat] != nil)

            // Both of Alice's devices receive both changes, the new cost under the trip.
            try await alicePhone.sync()
            try await aliceTablet.sync()
            for device in [alicePhone, aliceTablet] {
                #expect(try device.costs() == ["Fuel": 85, "Snacks": 12.5])
            }
            let stored = try await container(alice).privateCloudDatabase.records(named: [snacks], in: SplitCosts.zone)[snacks]
            #expect(stored?.parent == trip)

            // Alice removes Bob: his device drops the trip and its costs, and keeps his own flat.
            try await alicePhone.remove("bob@example.com", fromGroup: trip)
            try await bobPhone.sync()
            #expect(try bobPhone.groups() == ["Flat": ""])
            #expect(try bobPhone.costs() == ["Rent": 900])
            #expect(await bobPhone.privateEngine.status.pendingCount == 0)
            #expect(await bobPhone.sharedEngine.status.pendingCount == 0)
        }
    }

    @Test func aParticipantInTwoGroupsOfOneZoneRemovedFromOneDropsExactlyThatGroup() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        try await SyncEngineTests.live(world) { container in
            let alicePhone = try Self.device(container(alice), "alice-phone")
            let bobPhone = try Self.device(container(bob), "bob-phone")
            try await alicePhone.prepare()
            let trip = try alicePhone.createGroup("Lisbon trip")
            try alicePhone.addCost("Fuel", amount: 80, paidBy: "Alice", to: trip)
            let dinner = try alicePhone.createGroup("Dinner club")
            try alicePhone.addMember("Bob", to: dinner)
            try alicePhone.addCost("Wine", amount: 30, paidBy: "Alice", to: dinner)
            try await alicePhone.sync()

            // One group shared first, the second later: the zone is already on Bob's device when it arrives.
            try await bobPhone.accept(try #require(try await alicePhone.share(group: trip, with: ["bob@example.com"]).url?.absoluteString))
            try await bobPhone.sync()
            #expect(try bobPhone.groups() == ["Lisbon trip": alice.userRecordName])
            try await bobPhone.accept(try #require(try await alicePhone.share(group: dinner, with: ["bob@example.com"]).url?.absoluteString))
            try await bobPhone.sync()
            #expect(try bobPhone.groups() == ["Lisbon trip": alice.userRecordName, "Dinner club": alice.userRecordName])
            #expect(try bobPhone.costs() == ["Fuel": 80, "Wine": 30])

            // Removed from the dinner club only: its group, member and cost go; the trip stays, and still syncs.
            try await alicePhone.remove("bob@example.com", fromGroup: dinner)
            try await bobPhone.sync()
            #expect(try bobPhone.groups() == ["Lisbon trip": alice.userRecordName])
            #expect(try bobPhone.costs() == ["Fuel": 80])
            let members = try await bobPhone.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM members") }
            #expect(members == 0)
            try bobPhone.addCost("Tolls", amount: 9, paidBy: "Bob", to: trip)
            try await bobPhone.sync()
            try await alicePhone.sync()
            #expect(try alicePhone.costs() == ["Fuel": 80, "Wine": 30, "Tolls": 9])
        }
    }

    /// A child routed to a shared zone survives a lost answer (the engine's retry meets its own earlier write) and a
    /// crash between the edit and the send (the pending change was written with the row).
    @Test func aCostAddedUnderASharedGroupSurvivesALostAnswerAndACrash() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        try await SyncEngineTests.live(world) { container in
            let alicePhone = try Self.device(container(alice), "alice-phone")
            try await alicePhone.prepare()
            let trip = try alicePhone.createGroup("Lisbon trip")
            try await alicePhone.sync()
            let url = try #require(try await alicePhone.share(group: trip, with: ["bob@example.com"]).url?.absoluteString)

            let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
            var flaky = container(bob)
            flaky.transport = faults
            let path = try SyncEngineTests.temporaryPath("bob-phone")
            var bobPhone: SplitCosts? = try Self.device(flaky, "bob-phone", path: path)
            try await bobPhone?.accept(url)
            try await bobPhone?.sync()

            // The server applies the new cost; the answer is lost on the way back.
            let snacks = try #require(try bobPhone?.addCost("Snacks", amount: 12.5, paidBy: "Bob", to: trip))
            faults.inject(.dropAnswer, times: 1) { $0.url.path.hasSuffix("shared/records/modify") }
            try await bobPhone?.sync()
            #expect(faults.sentPaths.filter { $0.hasSuffix("shared/records/modify") }.count == 2, "sent, lost, sent again")

            // An edit, then the app is killed before it syncs; reopened, it sends the edit as an update.
            try bobPhone?.setAmount(14, ofCost: snacks)
            bobPhone = nil
            let reopened = try Self.device(flaky, "bob-phone", path: path)
            try await reopened.sync()
            #expect(await reopened.sharedEngine.status.pendingCount == 0)
            #expect(await reopened.sharedEngine.status.failedCount == 0)

            try await alicePhone.sync()
            #expect(try alicePhone.costs() == ["Snacks": 14])
        }
    }
}
