import CumulusModel
import CumulusStore
import Logging
import Testing

/// Change feeds and queries, against every store implementation.
@Suite("RecordStore conformance: feeds and queries", .timeLimit(.minutes(10)))
struct ChangeFeedConformanceTests {
    let logger = Logger(label: "test")
    let alice = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice")

    private func store(_ factory: StoreFactory) async throws -> any RecordStore {
        let store = try await factory.make()
        try await store.createContainer("c", createdAt: 0, logger: logger)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z"))], in: alice, timestamp: 0, logger: logger)
        return store
    }

    private func write(_ store: any RecordStore, _ operations: [RecordModification], zone: String = "Z") async throws {
        _ = try await store.modifyRecords(
            RecordBatch(database: alice, zoneName: zone, atomic: false, operations: operations, author: "_alice", deviceID: "d", timestamp: 1),
            logger: logger
        )
    }

    @Test(arguments: StoreFactory.all)
    func zoneFeedReturnsLatestStatesAndTombstonesInCommitOrder(_ factory: StoreFactory) async throws {
        let store = try await store(factory)
        try await write(store, (0..<5).map { RecordModification(operationType: .create, recordName: "r\($0)", recordType: "T") })
        try await write(
            store,
            [
                RecordModification(operationType: .forceUpdate, recordName: "r1", fields: ["x": .int64(1)]),
                RecordModification(operationType: .forceDelete, recordName: "r2"),
            ])
        let page = try await store.zoneChanges(
            ZoneChangeRequest(database: alice, zoneName: "Z", incarnation: nil, after: 0, limit: 10), logger: logger)
        #expect(!page.moreComing)
        #expect(page.sequence == 7)
        let names = page.changes.map { change -> String in
            switch change {
            case .changed(let record): record.header.recordName
            case .deleted(let name, _): "-" + name
            }
        }
        #expect(names == ["r0", "r3", "r4", "r1", "-r2"])

        let first = try await store.zoneChanges(
            ZoneChangeRequest(database: alice, zoneName: "Z", incarnation: nil, after: 0, limit: 2), logger: logger)
        #expect(first.moreComing)
        #expect(first.changes.count == 2)
        let rest = try await store.zoneChanges(
            ZoneChangeRequest(database: alice, zoneName: "Z", incarnation: page.zone.incarnation, after: first.sequence, limit: 10), logger: logger
        )
        #expect(rest.changes.count == 3)
        #expect(rest.sequence == 7)

        let typed = try await store.zoneChanges(
            ZoneChangeRequest(database: alice, zoneName: "Z", incarnation: nil, after: 0, limit: 10, recordTypes: ["Other"]), logger: logger
        )
        #expect(typed.changes.isEmpty)
        #expect(typed.sequence == 7, "the position still advances past other types")

        let wrongIncarnation = await #expect(throws: StoreError.self) {
            try await store.zoneChanges(ZoneChangeRequest(database: alice, zoneName: "Z", incarnation: -1, after: 0, limit: 10), logger: logger)
        }
        #expect(wrongIncarnation?.code == .invalidState)
    }

    @Test(arguments: StoreFactory.all)
    func databaseFeedListsZonesByLatestChange(_ factory: StoreFactory) async throws {
        let store = try await store(factory)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Y"))], in: alice, timestamp: 0, logger: logger)
        try await write(store, [RecordModification(operationType: .create, recordName: "a", recordType: "T")], zone: "Z")
        let page = try await store.databaseChanges(in: alice, after: 0, limit: 10, logger: logger)
        #expect(page.zones.map(\.zoneName) == ["Y", "Z"])
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .delete, zoneID: ZoneID(zoneName: "Y"))], in: alice, timestamp: 0, logger: logger)
        let next = try await store.databaseChanges(in: alice, after: page.sequence, limit: 10, logger: logger)
        #expect(next.zones == [.deleted(alice.zoneID("Y"))])
        let limited = try await store.databaseChanges(in: alice, after: 0, limit: 1, logger: logger)
        #expect(limited.moreComing)
        #expect(limited.zones.count == 1)
    }

    @Test(arguments: StoreFactory.all)
    func queriesFilterSortAndResume(_ factory: StoreFactory) async throws {
        let store = try await store(factory)
        try await write(
            store,
            (0..<9).map { RecordModification(operationType: .create, recordName: "r\($0)", recordType: "T", fields: ["n": .int64(Int64($0 % 3))]) })
        let query = RecordQuery(
            database: alice, zoneName: "Z", recordType: "T",
            filters: [QueryFilter(comparator: .lessThan, field: .field("n"), value: .int64(2))],
            sorts: [QuerySort(field: .field("n"), ascending: false), QuerySort(field: .system(.recordName))], limit: 4
        )
        let first = try await store.queryRecords(query, logger: logger)
        #expect(first.records.map(\.header.recordName) == ["r1", "r4", "r7", "r0"])
        var next = query
        next.after = first.cursor
        let second = try await store.queryRecords(next, logger: logger)
        #expect(second.records.map(\.header.recordName) == ["r3", "r6"])
        #expect(second.cursor == nil)
    }
}

extension DatabaseZoneChange {
    var zoneName: String {
        switch self {
        case .changed(let zone): zone.zoneID.zoneName
        case .deleted(let zoneID): zoneID.zoneName
        }
    }
}
