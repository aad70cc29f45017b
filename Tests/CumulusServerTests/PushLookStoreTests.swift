import CumulusModel
import CumulusStore
import Logging
import Prometheus
import Testing

@testable import CumulusCore

/// What a look at a push token's feeds asks of SQLite: after a wake-up, one write transaction (the feeds read and the
/// positions stored together) and no read; otherwise reads, and a write only when the positions moved, so looks that
/// find nothing never queue on the writer.
@Suite("Push: a look's store work", .timeLimit(.minutes(10)))
struct PushLookStoreTests {
    static let container = "iCloud.com.example.looks"

    /// A token that watches more than ``PushService/largestWatchInAWrite`` subscriptions times zones is passed over off the
    /// writer even after a wake-up: its pass, and its positions' JSON, grow with the watch.
    @Test func aLargeWatchIsPassedOverOffTheWriter() async throws {
        let registry = PrometheusCollectorRegistry()
        let store = try await TestStore.sqlite.makeMeasured(.sqlite(poolSize: 3, factory: PrometheusMetricsFactory(registry: registry)))
        let logger = Logger(label: "test")
        let push = PushService(store: store)
        try await store.createContainer(Self.container, createdAt: 0, logger: logger)
        let alice = DatabaseRef(container: Self.container, environment: .development, scope: .private, ownerRecordName: "_alice")
        _ = try await store.modifyZones(
            (0..<PushService.largestWatchInAWrite).map { ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z\($0)")) }, in: alice,
            timestamp: 0, logger: logger)
        try await store.modifySubscriptions(
            of: SubscriptionOwner(container: Self.container, environment: .development, scope: .private, userRecordName: "_alice"),
            saving: [
                StoredSubscription(subscriptionID: "all", json: Array(#"{"subscriptionID":"all","subscriptionType":"database"}"#.utf8), createdAt: 0)
            ],
            deleting: [], logger: logger)
        try await store.savePushToken(
            StoredPushToken(token: "t", container: Self.container, environment: .development, userRecordName: "_alice", createdAt: 0), logger: logger)
        // The default zone and the ones made: one zone more than a write passes over.
        #expect(try await store.zones(in: alice, logger: logger).count == PushService.largestWatchInAWrite + 1)
        _ = try await push.check("t", container: Self.container, environment: .development, afterWakeUp: false, logger: logger)
        _ = try await store.modifyRecords(
            RecordBatch(
                database: alice, zoneName: "Z7", atomic: true,
                operations: [RecordModification(operationType: .create, recordName: "n", recordType: "Note")],
                author: "_alice", deviceID: "d", timestamp: 1), logger: logger)
        let (reads, writes) = (Self.operations("read", registry), Self.operations("write", registry))
        let found = try await push.check("t", container: Self.container, environment: .development, afterWakeUp: true, logger: logger)
        #expect(found.notification != nil)
        // The write transaction read the feeds, saw the watch, and stored nothing; the feeds were read again and passed over
        // off the writer, and the positions saved in a write of their own.
        #expect(Self.operations("read", registry) == reads + 1 && Self.operations("write", registry) == writes + 2)
    }

    static func operations(_ kind: String, _ registry: PrometheusCollectorRegistry) -> Double {
        let text = String(decoding: registry.emitToBuffer(), as: UTF8.self)
        let line = text.split(separator: "\n").first {
            $0.hasPrefix("cumulus_store_operation_duration_seconds_count{") && $0.contains(#"kind="\#(kind)""#)
        }
        return line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
    }

    @Test func aLookAfterAWakeUpIsOneWriteAndOtherLooksWriteOnlyWhatMoved() async throws {
        let registry = PrometheusCollectorRegistry()
        let store = try await TestStore.sqlite.makeMeasured(.sqlite(poolSize: 3, factory: PrometheusMetricsFactory(registry: registry)))
        let logger = Logger(label: "test")
        let push = PushService(store: store)
        func operations(_ kind: String) -> Double { Self.operations(kind, registry) }
        try await store.createContainer(Self.container, createdAt: 0, logger: logger)
        let alice = DatabaseRef(container: Self.container, environment: .development, scope: .private, ownerRecordName: "_alice")
        try await store.modifySubscriptions(
            of: SubscriptionOwner(container: Self.container, environment: .development, scope: .private, userRecordName: "_alice"),
            saving: [
                StoredSubscription(subscriptionID: "all", json: Array(#"{"subscriptionID":"all","subscriptionType":"database"}"#.utf8), createdAt: 0)
            ],
            deleting: [], logger: logger)
        try await store.savePushToken(
            StoredPushToken(token: "t", container: Self.container, environment: .development, userRecordName: "_alice", createdAt: 0), logger: logger)
        func check(afterWakeUp: Bool) async throws -> PushService.Check {
            try await push.check("t", container: Self.container, environment: .development, afterWakeUp: afterWakeUp, logger: logger)
        }

        // The token's first look starts its positions from now: read, then saved.
        #expect(try await check(afterWakeUp: false).notification == nil)
        // Looks that find nothing new (a re-check, a connection's first look) read and write nothing.
        let (reads, writes) = (operations("read"), operations("write"))
        for _ in 0..<5 { #expect(try await check(afterWakeUp: false).notification == nil) }
        #expect(operations("write") == writes && operations("read") == reads + 5)

        // A commit, then the look its wake-up brings: one write transaction and no read, and it finds the notification.
        _ = try await store.modifyRecords(
            RecordBatch(
                database: alice, zoneName: "_defaultZone", atomic: true,
                operations: [RecordModification(operationType: .create, recordName: "n", recordType: "Note")], author: "_alice", deviceID: "d",
                timestamp: 1), logger: logger)
        let (readsBefore, writesBefore) = (operations("read"), operations("write"))
        let found = try await check(afterWakeUp: true)
        #expect(found.notification != nil)
        #expect(operations("write") == writesBefore + 1 && operations("read") == readsBefore)
        // Its positions were stored with it: a look after another wake-up finds nothing more (and writes nothing new).
        #expect(try await check(afterWakeUp: true).notification == nil)
        #expect(try await check(afterWakeUp: false).notification == nil)
    }
}
