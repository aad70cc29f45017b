import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1
import Prometheus
import Synchronization
import Testing

/// `/metrics` in Prometheus's text format: requests, records, feed pages and refusals, without naming who.
@Suite("Metrics", .timeLimit(.minutes(10)))
struct MetricsTests {
    func metricsText(_ client: CloudKitTestClient) async throws -> String {
        let response = try await client.client.execute(uri: "/metrics", method: .get)
        #expect(response.status == .ok)
        #expect(response.headers[.contentType]?.hasPrefix("text/plain; version=0.0.4") == true)
        return String(buffer: response.body)
    }

    /// The value of the sample whose line starts with `series` (name and labels), if any.
    func sample(_ series: String, in text: String) -> Double? { metricSample(series, in: text) }

    /// Devices that name themselves: how many were active in the last hour, and how far behind each fetch found them.
    @Test func devicesAreCountedAndTheirLagObservedWithoutNamingThem() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let phone: HTTPFields = [HTTPField.Name("X-Cumulus-Device")!: "phone-7"]
            _ = try await client.send(
                "records/modify", as: .user(world.alice),
                body:
                    #"{"zoneID":{"zoneName":"_defaultZone"},"operations":[{"operationType":"create","record":{"recordName":"a","recordType":"T"}}]}"#)
            let fetched = try await client.send("changes/database", as: .user(world.alice), body: "{}", headers: phone)
            #expect(fetched.status == 200)
            let text = try await metricsText(client)
            #expect(sample("cumulus_devices_active", in: text) == 1)
            #expect(sample("cumulus_device_changes_behind_count", in: text) == 1)
            #expect(sample(#"cumulus_device_changes_behind_bucket{le="0.0"}"#, in: text) == 0, "it had one change to fetch: \(text)")
            #expect(!text.contains("phone-7"))
        }
    }

    @Test func requestsRecordsAndFeedPagesAreCountedWithoutNamingTheCaller() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let zone = try await client.send(
                "zones/modify", as: .user(world.alice),
                body: #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Groceries"}}}]}"#)
            #expect(zone.status == 200)
            let saved = try await client.send(
                "records/modify", as: .user(world.alice),
                body: #"""
                    {"zoneID":{"zoneName":"Groceries"},"operations":[
                    {"operationType":"create","record":{"recordName":"milk","recordType":"Item","fields":{"n":{"value":1}}}},
                    {"operationType":"create","record":{"recordName":"eggs","recordType":"Item","fields":{"n":{"value":2}}}}]}
                    """#)
            #expect(saved.status == 200)
            let feed = try await client.send("changes/zone", as: .user(world.alice), body: #"{"zones":[{"zoneID":{"zoneName":"Groceries"}}]}"#)
            #expect(feed.status == 200)
            let lookup = try await client.send(
                "records/lookup", as: .user(world.alice), body: #"{"zoneID":{"zoneName":"Groceries"},"records":[{"recordName":"milk"}]}"#)
            #expect(lookup.status == 200)
            _ = try await client.send("records/lookup", as: .none, body: "{}")

            let text = try await metricsText(client)
            let modify =
                #"cumulus_requests_total{route="/database/1/{container}/{environment}/{database}/records/modify",method="POST",status="200"}"#
            #expect(sample(modify, in: text) == 1)
            #expect(
                sample(
                    #"cumulus_requests_total{route="/database/1/{container}/{environment}/{database}/records/lookup",method="POST",status="401"}"#,
                    in: text)
                    ?? sample(
                        #"cumulus_requests_total{route="/database/1/{container}/{environment}/{database}/records/lookup",method="POST",status="421"}"#,
                        in: text)
                    == 1)
            #expect(sample("cumulus_records_written_total", in: text) == 2)
            #expect(sample(#"cumulus_records_read_total{operation="changes"}"#, in: text) == 2)
            #expect(sample(#"cumulus_records_read_total{operation="lookup"}"#, in: text) == 1)
            #expect(sample("cumulus_change_feed_pages_total", in: text) == 1)
            #expect(
                text.contains(#"cumulus_request_duration_seconds_bucket{route="/database/1/{container}/{environment}/{database}/records/modify",le="#)
            )
            #expect(
                sample(#"cumulus_request_duration_seconds_count{route="/database/1/{container}/{environment}/{database}/records/modify"}"#, in: text)
                    == 1)

            // No container, user, token or record in any label.
            for secret in [TestWorld.container, world.alice.userRecordName, world.apiToken, world.alice.webAuthToken, "Groceries", "milk"] {
                #expect(!text.contains(secret), "/metrics shows \(secret)")
            }
        }
    }

    @Test func refusalsByTheRequestLimitAreCounted() async throws {
        var configured = try await TestWorld.make()
        configured.configuration.requestLimits = RequestLimits(requestsPerSecond: 0.01, burst: 1, refusalDelay: .zero)
        let world = configured
        try await world.test { client in
            var statuses: [Int] = []
            for _ in 0..<4 {
                statuses.append(try await client.send("zones/list", as: .user(world.alice), method: .get).status)
            }
            // One request a hundred seconds, a burst of one. The token's first request counts against the address (it has
            // not been seen to work yet); then it has its own bucket: one more passes, and the others are refused.
            #expect(statuses == [200, 200, 429, 429], "\(statuses)")
            let refused = statuses.filter { $0 != 200 }.count
            #expect(sample(#"cumulus_limit_refusals_total{limit="requests"}"#, in: try await metricsText(client)) == Double(refused))
        }
    }

    @Test func refusedSignInsAndOpenConnectionsAreCounted() async throws {
        var configured = try await TestWorld.make()
        configured.configuration.signInLimits = SignInLimits(attemptsPerAccount: 2)
        let world = configured
        try await world.test { client in
            let signIn = "/auth/1/\(TestWorld.container)/development/signin?ckAPIToken=\(world.apiToken)"
            var statuses: [Int] = []
            for _ in 0..<4 {
                statuses.append(try await client.raw(signIn, body: #"{"name":"alice","password":"not her password"}"#).status)
            }
            #expect(statuses == [401, 401, 429, 429], "\(statuses)")
            let text = try await metricsText(client)
            #expect(sample(#"cumulus_limit_refusals_total{limit="sign_in"}"#, in: text) == 2)
            // The test client's own connection is open while it asks.
            #expect((sample("cumulus_open_connections", in: text) ?? 0) >= 1, "\(text)")
        }
    }

    @Test func aMetricsPortServesThemThereAndNotOnTheMainPort() async throws {
        var world = try await TestWorld.make()
        world.configuration.metricsPort = 0
        let metricsURL = Mutex<String?>(nil)
        let app = buildApplication(
            configuration: world.configuration, store: world.store, logger: .testServer, clock: world.clock,
            onMetricsServerRunning: { url in metricsURL.withLock { $0 = url } })
        try await app.test(.live) { client in
            #expect(try await client.execute(uri: "/health", method: .get).status == .ok)
            #expect(try await client.execute(uri: "/metrics", method: .get).status == .notFound)
            var url: String?
            for _ in 0..<500 where url == nil {
                url = metricsURL.withLock { $0 }
                if url == nil { try await Task.sleep(for: .milliseconds(10)) }
            }
            let base = try #require(url)
            // A generous deadline: a loaded machine may take seconds to answer; only an answer that never comes should fail.
            let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(base)/metrics"), timeout: .seconds(60))
            #expect(response.status == .ok)
            let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
            #expect(text.contains(#"cumulus_requests_total{route="/health",method="GET",status="200"} 1"#))
        }
    }

    @Test(arguments: TestStore.all)
    func theStoreReportsItsOperationsTheirDurationAndItsPool(_ kind: TestStore) async throws {
        let registry = PrometheusCollectorRegistry()
        let storeName = kind.name.hasPrefix("SQLite") ? "sqlite" : "postgres"
        let factory = PrometheusMetricsFactory(registry: registry)
        let store = try await kind.makeMeasured(
            storeName == "sqlite" ? .sqlite(poolSize: 3, factory: factory) : .postgres(poolSize: 3, factory: factory))
        let logger = Logger(label: "test")
        try await store.createContainer("iCloud.com.example.metrics", createdAt: 0, logger: logger)
        #expect(try await store.containerExists("iCloud.com.example.metrics", logger: logger))
        let database = DatabaseRef(container: "iCloud.com.example.metrics", environment: .development, scope: .private, ownerRecordName: "_a")
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z"))], in: database, timestamp: 0, logger: logger)
        let text = String(decoding: registry.emitToBuffer(), as: UTF8.self)
        func value(_ name: String, _ labels: String...) -> Double? {
            let line = text.split(separator: "\n").first { line in
                line.hasPrefix(name + "{") && line.contains(#"store="\#(storeName)""#) && labels.allSatisfy { line.contains($0) }
            }
            return line.flatMap { Double($0.split(separator: " ").last ?? "") }
        }
        let (writing, reading) = storeName == "sqlite" ? ("write", "read") : ("transaction", "query")
        #expect((value("cumulus_store_operation_duration_seconds_count", #"kind="\#(writing)""#) ?? 0) >= 1, "\(text)")
        #expect((value("cumulus_store_operation_duration_seconds_count", #"kind="\#(reading)""#) ?? 0) >= 1, "\(text)")
        #expect(value("cumulus_store_operations_in_flight", #"kind="\#(writing)""#) == 0, "\(text)")
        #expect(value("cumulus_store_pool_size") == 3, "\(text)")
        if storeName == "postgres" {
            #expect((value("cumulus_store_connection_wait_seconds_count") ?? 0) >= 2, "\(text)")
        }
    }
}
