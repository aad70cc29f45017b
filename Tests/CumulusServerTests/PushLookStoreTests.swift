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
    static let alice = DatabaseRef(container: container, environment: .development, scope: .private, ownerRecordName: "_alice")

    /// An SQLite store whose operations are counted, with Alice's database subscription and her push token `t` in it.
    struct Fixture {
        let registry = PrometheusCollectorRegistry()
        let store: any RecordStore
        let push: PushService
        let logger = Logger(label: "test")

        init(zones: Int = 0) async throws {
            store = try await TestStore.sqlite.makeMeasured(.sqlite(poolSize: 3, factory: PrometheusMetricsFactory(registry: registry)))
            push = PushService(store: store)
            try await store.createContainer(PushLookStoreTests.container, createdAt: 0, logger: logger)
            if zones > 0 {
                _ = try await store.modifyZones(
                    (0..<zones).map { ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z\($0)")) }, in: PushLookStoreTests.alice,
                    timestamp: 0, logger: logger)
            }
            let subscription = Array(#"{"subscriptionID":"all","subscriptionType":"database"}"#.utf8)
            try await store.modifySubscriptions(
                of: SubscriptionOwner(container: PushLookStoreTests.container, environment: .development, scope: .private, userRecordName: "_alice"),
                saving: [StoredSubscription(subscriptionID: "all", json: subscription, createdAt: 0)], deleting: [], logger: logger)
            try await store.savePushToken(
                StoredPushToken(
                    token: "t", container: PushLookStoreTests.container, environment: .development, userRecordName: "_alice", createdAt: 0),
                logger: logger)
        }

        /// How many operations of this kind (`read`, `write`) the store has run.
        func operations(_ kind: String) -> Double {
            let text = String(decoding: registry.emitToBuffer(), as: UTF8.self)
            let line = text.split(separator: "\n").first {
                $0.hasPrefix("cumulus_store_operation_duration_seconds_count{") && $0.contains(#"kind="\#(kind)""#)
            }
            return line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
        }

        func check(afterWakeUp: Bool) async throws -> PushService.Check {
            try await push.check("t", container: PushLookStoreTests.container, environment: .development, afterWakeUp: afterWakeUp, logger: logger)
        }

        /// A record saved in a zone of Alice's: a commit her subscription is told of.
        func commit(in zone: String = "_defaultZone") async throws {
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: PushLookStoreTests.alice, zoneName: zone, atomic: true,
                    operations: [RecordModification(operationType: .create, recordName: "n", recordType: "Note")], author: "_alice", deviceID: "d",
                    timestamp: 1), logger: logger)
        }
    }

    @Test func aLookAfterAWakeUpIsOneWriteAndOtherLooksWriteOnlyWhatMoved() async throws {
        let fixture = try await Fixture()

        // The token's first look starts its positions from now: read, then saved.
        #expect(try await fixture.check(afterWakeUp: false).notification == nil)
        // Looks that find nothing new (a re-check, a connection's first look) read and write nothing.
        let (reads, writes) = (fixture.operations("read"), fixture.operations("write"))
        for _ in 0..<5 { #expect(try await fixture.check(afterWakeUp: false).notification == nil) }
        #expect(fixture.operations("write") == writes && fixture.operations("read") == reads + 5)

        // A commit, then the look its wake-up brings: one write transaction and no read, and it finds the notification.
        try await fixture.commit()
        let (readsBefore, writesBefore) = (fixture.operations("read"), fixture.operations("write"))
        #expect(try await fixture.check(afterWakeUp: true).notification != nil)
        #expect(fixture.operations("write") == writesBefore + 1 && fixture.operations("read") == readsBefore)
        // Its positions were stored with it: a look after another wake-up finds nothing more (and writes nothing new).
        #expect(try await fixture.check(afterWakeUp: true).notification == nil)
        #expect(try await fixture.check(afterWakeUp: false).notification == nil)
    }

    /// A token that watches more than ``PushService/largestWatchInAWrite`` subscriptions times zones is passed over off the
    /// writer even after a wake-up: its pass, and its positions' JSON, grow with the watch.
    @Test func aLargeWatchIsPassedOverOffTheWriter() async throws {
        let fixture = try await Fixture(zones: PushService.largestWatchInAWrite)
        // The default zone and the ones made: one zone more than a write passes over.
        #expect(try await fixture.store.zones(in: Self.alice, logger: fixture.logger).count == PushService.largestWatchInAWrite + 1)
        _ = try await fixture.check(afterWakeUp: false)
        try await fixture.commit(in: "Z7")
        let (reads, writes) = (fixture.operations("read"), fixture.operations("write"))
        #expect(try await fixture.check(afterWakeUp: true).notification != nil)
        // The write transaction read the feeds, saw the watch, and stored nothing; the feeds were read again and passed over
        // off the writer, and the positions saved in a write of their own.
        #expect(fixture.operations("read") == reads + 1 && fixture.operations("write") == writes + 2)
    }
}
