import CumulusModel
import CumulusStore
import CumulusStorePostgres
import Foundation
import HTTPTypes
import Logging
import PostgresNIO
import Synchronization
import Testing

/// PostgreSQL stopping under writers, through a proxy the test controls: closed at once (as `pg_ctl -m immediate` or
/// `fast` closes every session), or silent (a machine gone, a partition). Every request gets an answer within the
/// store's bounds; what was answered as saved is there afterwards, and what was answered as refused is not.
@Suite(
    "PostgreSQL outages under writers",
    .enabled(if: TestStore.postgresURL != nil, "needs CUMULUS_TEST_POSTGRES (see README)"),
    // A request that never gets an answer would hang the test: that is the failure this bounds. Alone the test takes
    // under a minute; beside the whole suite on two cores it took 244–303 s (CI), so the bound is the suite's usual.
    .timeLimit(.minutes(10)))
struct PostgresOutageTests {
    /// A value the writers and the test share.
    final class Shared<Value: Sendable>: Sendable {
        private let value: Mutex<Value>
        init(_ value: Value) { self.value = Mutex(value) }
        func withLock<T>(_ body: (inout Value) -> T) -> T { value.withLock { body(&$0) } }
    }

    enum Outage: String, CaseIterable, Sendable {
        /// Every connection closed at once.
        case closed
        /// Connections left open, nothing answered.
        case silent
    }

    @Test(arguments: Outage.allCases)
    func everyRequestInFlightIsAnsweredAndNothingRefusedIsWritten(_ outage: Outage) async throws {
        let server = try PostgresLocation(url: try #require(TestStore.postgresURL))
        let proxy = try await TCPProxy(to: server.host, port: server.port)
        let store = TestStore(name: "PostgreSQL behind a proxy") { _ in
            // A fresh database each time: a world whose making was refused half-way is made again from nothing.
            var location = try await TestStore.makePostgresDatabase()
            location.port = proxy.port
            var configuration = location.clientConfiguration(maximumConnections: 4)
            configuration.options.connectionIdleTimeout = .seconds(2)
            let client = PostgresClient(configuration: configuration)
            Task { await client.run() }
            try await PostgresMigrations.migrate(client, logger: Logger(label: "postgres-test"))
            return PostgresRecordStore(client: client, connectionWait: .seconds(2), operationTimeout: .seconds(2))
        }
        // The store's 2-second waits for a connection can refuse the world's setup on a loaded machine (the rest of the
        // suite holds PostgreSQL busy): it is tried again, as a client would.
        var made: TestWorld?
        for attempt in 1...10 where made == nil {
            do {
                made = try await TestWorld.make(store: store)
            } catch let error as StoreError where error.code == .unavailable && attempt < 10 {
                try await Task.sleep(for: .milliseconds(500))
            }
        }
        let world = try #require(made)
        try await world.test { client in
            // The store's 2-second timeouts can refuse the zone too on a loaded machine: it is made before anything else.
            var zoneExists = false
            for _ in 0..<120 where !zoneExists {
                _ = try await client.createZone("Z", as: world.alice)
                let zones = try await client.send("zones/list", as: .user(world.alice), method: .get)
                zoneExists = zones.zones.contains { $0["zoneID"]?["zoneName"]?.stringValue == "Z" }
                if !zoneExists { try await Task.sleep(for: .milliseconds(250)) }
            }
            try #require(zoneExists, "the zone could not be made before the outage")
            /// Every answer each writer got: the record it wrote, the status, and the reason of a refusal.
            let answers = Shared<[(name: String, status: Int, reason: String?)]>([])
            let outageBegan = Shared(false)
            func refusedDuringOutage() -> Int { answers.withLock { $0.filter { $0.status != 200 }.count } }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<8 {
                    group.addTask {
                        var index = 0
                        // Each writer writes until it has been refused twice, and at most 400 times.
                        while index < 400, answers.withLock({ $0.filter { $0.name.hasPrefix("w\(writer)-") && $0.status != 200 }.count }) < 2 {
                            let name = "w\(writer)-\(index)"
                            let answer = try await client.modify([operation("forceUpdate", name)], as: .user(world.alice))
                            let status = answer.status == 200 && answer.records.first?["serverErrorCode"] != nil ? 500 : answer.status
                            answers.withLock { $0.append((name, status, answer.reason)) }
                            index += 1
                        }
                    }
                }
                group.addTask {
                    // A few writes land first, then PostgreSQL goes.
                    while answers.withLock({ $0.count }) < 16 { try await Task.sleep(for: .milliseconds(10)) }
                    outageBegan.withLock { $0 = true }
                    switch outage {
                    case .closed: proxy.cut()
                    case .silent: proxy.stall()
                    }
                }
                try await group.waitForAll()
            }
            #expect(outageBegan.withLock { $0 })
            let all = answers.withLock { $0 }
            // Every write was answered (none hung): refused ones are 503 TRY_AGAIN_LATER.
            #expect(refusedDuringOutage() >= 16, "\(all.filter { $0.status != 200 })")
            for refused in all where refused.status != 200 {
                #expect(refused.status == 503, "\(refused)")
            }

            proxy.cut()
            proxy.restore()
            var recovered = false
            for _ in 0..<120 where !recovered {
                recovered = try await client.modify([operation("forceUpdate", "after")], as: .user(world.alice)).status == 200
                if !recovered { try await Task.sleep(for: .milliseconds(250)) }
            }
            #expect(recovered, "the store did not come back")
            let found = try await client.lookup(all.map(\.name), as: .user(world.alice))
            let present = Set(found.records.filter { $0["serverErrorCode"] == nil }.compactMap { $0["recordName"]?.stringValue })
            for answer in all {
                if answer.status == 200 {
                    #expect(present.contains(answer.name), "\(answer.name) was answered as saved")
                } else if answer.reason?.contains("unknown") != true {
                    #expect(!present.contains(answer.name), "\(answer.name) was answered as refused: \(answer.reason ?? "")")
                }
            }
        }
        try await proxy.close()
    }
}
