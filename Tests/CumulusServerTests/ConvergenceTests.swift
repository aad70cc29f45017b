import CumulusClient
import CumulusModel
import CumulusSyncGRDB
import CumulusTesting
import Foundation
import GRDB
import GhostCarExample
import Testing

/// Sync you can prove, at random: two users, three devices and one shared zone go through a few hundred random edits,
/// sends and fetches, with devices offline for a while, answers dropped after the server applied them, and apps
/// restarted. At the end, once every device is online and has sent and fetched, every device's rows equal the
/// server's records and every `verify()` is in sync. Seeded; a failure names its seed (`CUMULUS_CONVERGENCE_SEED`
/// replays it).
@Suite("Sync engine: random convergence", .timeLimit(.minutes(10)))
struct ConvergenceTests {
    /// One device of the story: its app, its transport's faults, how to start it again.
    final class Phone: @unchecked Sendable {
        // Driven by one task, one step at a time.
        let name: String
        let faults: FaultInjectingTransport
        let make: () throws -> Device
        var device: Device
        var offline = false

        init(name: String, faults: FaultInjectingTransport, make: @escaping () throws -> Device) throws {
            self.name = name
            self.faults = faults
            self.make = make
            self.device = try make()
        }

        /// The rows as (name, distance), by id.
        func rows() throws -> [String: String] {
            try device.queue.read { db in
                Dictionary(
                    uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, customName, distance FROM drives").map {
                        ($0[0] as String, "\($0[1] as String? ?? "-")|\($0[2] as Double)")
                    })
            }
        }
    }

    @Test func twoUsersThreeDevicesAndASharedZoneConvergeThroughFaults() async throws {
        let seed = ProcessInfo.processInfo.environment["CUMULUS_CONVERGENCE_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 0..<UInt64.max)
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        try await SyncEngineTests.live(world) { container in
            var random = SeededRandomNumberGenerator(seed: seed)
            let aliceDatabase = container(alice).privateCloudDatabase
            try await aliceDatabase.save(zones: [GhostCar.zone])
            let share = try await aliceDatabase.save(CloudShare(zoneID: GhostCar.zone, publicPermission: .readWrite))
            _ = try await container(bob).sharedCloudDatabase.acceptShare(try #require(share.shortGUID))
            let sharedZone = ZoneID(zoneName: GhostCar.zone.zoneName, ownerRecordName: alice.userRecordName)

            func phone(_ name: String, user: TestUser, shared: Bool) throws -> Phone {
                let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
                var flaky = container(user)
                flaky.transport = faults
                let path = try SyncEngineTests.temporaryPath(name)
                let database = shared ? flaky.sharedCloudDatabase : flaky.privateCloudDatabase
                return try Phone(name: name, faults: faults) {
                    try Device.testing(
                        path: path, database: database, scope: shared ? "shared" : "private", zone: shared ? sharedZone : GhostCar.zone)
                }
            }
            let phones = [
                try phone("alice-phone", user: alice, shared: false), try phone("alice-tablet", user: alice, shared: false),
                try phone("bob-phone", user: bob, shared: true),
            ]
            var time: Int64 = 1
            var created = 0
            var log: [String] = []
            for step in 0..<300 {
                let phone = phones.randomElement(using: &random)!
                time += 1
                let roll = Int.random(in: 0..<100, using: &random)
                do {
                    switch roll {
                    case 0..<20:
                        created += 1
                        try phone.device.recordDrive(id: "drive-\(created)", name: "d\(created)", distance: Double(step), at: time)
                        log.append("\(step) \(phone.name) create drive-\(created)")
                    case 20..<35:
                        guard let id = try phone.rows().keys.sorted().randomElement(using: &random) else { continue }
                        try phone.device.rename(id, to: "\(phone.name)@\(step)", at: time)
                        log.append("\(step) \(phone.name) rename \(id)")
                    case 35..<45:
                        guard let id = try phone.rows().keys.sorted().randomElement(using: &random) else { continue }
                        try phone.device.setDistance(id, to: Double(step), at: time)
                        log.append("\(step) \(phone.name) distance \(id)")
                    case 45..<52:
                        guard let id = try phone.rows().keys.sorted().randomElement(using: &random) else { continue }
                        try phone.device.delete(id)
                        log.append("\(step) \(phone.name) delete \(id)")
                    case 52..<70:
                        // Sometimes the server applies the batch and its answer is lost.
                        if Int.random(in: 0..<4, using: &random) == 0 { phone.faults.inject(.dropAnswer, when: SyncFaultTests.isModify) }
                        log.append("\(step) \(phone.name) send")
                        try await phone.device.engine.sendChanges()
                    case 70..<88:
                        if Int.random(in: 0..<5, using: &random) == 0 { phone.faults.inject(.dropAnswer) }
                        log.append("\(step) \(phone.name) fetch")
                        try await phone.device.engine.fetchChanges()
                    case 88..<94:
                        phone.offline.toggle()
                        if phone.offline { phone.faults.inject(.failBeforeSending, times: 1_000_000) } else { phone.faults.heal() }
                        log.append("\(step) \(phone.name) \(phone.offline ? "offline" : "online")")
                    default:
                        // The app is killed and started again: only what its database holds survives.
                        phone.device = try phone.make()
                        log.append("\(step) \(phone.name) restart")
                    }
                } catch is CloudError {
                    // Offline, or a fault the engine's retries did not outlast: the edits wait.
                    continue
                }
            }

            // Everyone online; sends and fetches until nothing moves.
            for phone in phones {
                phone.faults.heal()
                phone.offline = false
            }
            for _ in 0..<3 {
                for phone in phones { try await phone.device.engine.sendChanges() }
                for phone in phones { try await phone.device.engine.fetchChanges() }
            }
            var server: [String: String] = [:]
            var token: String?
            repeat {
                let page = try await aliceDatabase.zoneChanges(GhostCar.zone, since: token)
                for record in page.records where record.recordType == "Drive" {
                    let name: String =
                        if case .string(let text)? = record.fields["customName"] { text } else { "-" }
                    let distance: Double =
                        if case .double(let value)? = record.fields["distance"] { value } else { 0 }
                    server[record.recordID.recordName] = "\(name)|\(distance)"
                }
                for deletion in page.deletions { server[deletion.recordID.recordName] = nil }
                token = page.moreComing ? page.syncToken : nil
            } while token != nil
            #expect(server.count > 5, "the story should leave records on the server (seed \(seed))")
            let context = "seed \(seed) (CUMULUS_CONVERGENCE_SEED=\(seed) replays it); last steps:\n\(log.suffix(30).joined(separator: "\n"))"
            for phone in phones {
                let rows = try phone.rows()
                #expect(rows == server, "\(phone.name) differs from the server: \(context)")
                #expect(try await phone.device.store.pendingRecordZoneChanges().isEmpty, "\(phone.name) still has pending changes: \(context)")
                let reports = try await phone.device.engine.verify()
                #expect(reports.allSatisfy { $0.isInSync }, "\(phone.name): \(reports) \(context)")
            }
        }
    }
}
