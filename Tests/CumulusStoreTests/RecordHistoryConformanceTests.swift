import CumulusModel
import CumulusStore
import CumulusTesting
import Logging
import Testing

/// Record history, against every store: after any run of saves, deletions and the deletions they cascade to, what the
/// store answers for "changed since a moment" is exactly the zone then and now, for every moment; deletions read back
/// as their last version; a batch without history keeps nothing; pruning drops only what is older.
@Suite("RecordStore conformance: record history", .timeLimit(.minutes(10)))
struct RecordHistoryConformanceTests {
    let logger = Logger(label: "test")
    let alice = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice")

    /// Every live record's `n` field, read from the feed.
    private func state(_ store: any RecordStore) async throws -> [String: Int64] {
        var live: [String: Int64] = [:]
        var after: String?
        while true {
            let page = try await store.recordsChanged(since: -1, zoneName: "Z", in: alice, after: after, limit: 50, logger: logger)
            for change in page.changes { if let record = change.current { live[change.recordName] = try Self.n(record) } }
            guard let next = page.next else { return live }
            after = next
        }
    }

    private static func n(_ record: StoredRecord) throws -> Int64 {
        guard case .int64(let value)? = try record.fields()["n"] else { return -1 }
        return value
    }

    @Test(arguments: StoreFactory.all)
    func changedSinceAnyMomentIsTheZoneThenAndNow(_ factory: StoreFactory) async throws {
        let seed = UInt64.random(in: 0..<UInt64.max)
        var random = SeededRandomNumberGenerator(seed: seed)
        let store = try await factory.make()
        try await store.createContainer("c", createdAt: 0, logger: logger)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z"))], in: alice, timestamp: 0, logger: logger)
        let names = (0..<20).map { "r\($0)" }
        // The zone after each step, by the step's timestamp.
        var snapshots: [(time: Int64, live: [String: Int64])] = [(0, [:])]
        var live: [String: Int64] = [:]
        for step in 1...80 {
            let time = Int64(step) * 10
            let name = names.randomElement(using: &random)!
            let operation: RecordModification
            if Int.random(in: 0..<3, using: &random) == 0 {
                operation = RecordModification(operationType: .forceDelete, recordName: name)
            } else {
                var fields: [String: FieldValue?] = ["n": .int64(Int64(step))]
                // Sometimes a DELETE_SELF reference: deleting its target deletes this record too.
                if Int.random(in: 0..<4, using: &random) == 0 {
                    fields["owner"] = .reference(Reference(recordName: names.randomElement(using: &random)!, action: .deleteSelf))
                }
                operation = RecordModification(operationType: .forceReplace, recordName: name, recordType: "T", fields: fields)
            }
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: alice, zoneName: "Z", atomic: false, operations: [operation], author: "_alice", deviceID: "d", timestamp: time,
                    keepsHistory: true), logger: logger)
            live = try await state(store)
            snapshots.append((time, live))
        }
        for (time, then) in snapshots {
            var reconstructed = live
            var after: String?
            while true {
                let page = try await store.recordsChanged(since: time, zoneName: "Z", in: alice, after: after, limit: 7, logger: logger)
                let names = page.changes.map(\.recordName)
                #expect(names == names.sorted(), "pages in name order")
                #expect(after.map { first in names.allSatisfy { $0 > first } } ?? true, "after the cursor")
                for change in page.changes {
                    #expect(try change.current.map(Self.n) == live[change.recordName], "seed \(seed): now, \(change.recordName)")
                    reconstructed[change.recordName] = try change.past.map(Self.n)
                }
                guard let next = page.next else { break }
                after = next
            }
            #expect(reconstructed == then, "seed \(seed): the zone at \(time)")
        }
        // Each deleted record reads back as its last version, with its deletion's time.
        let deleted = try await store.deletedRecords(since: 0, zoneName: "Z", in: alice, names: nil, limit: 100, logger: logger)
        #expect(Set(deleted.map(\.record.header.recordName)) == Set(snapshots.flatMap(\.live.keys)).subtracting(live.keys), "seed \(seed)")
        for entry in deleted {
            let before = snapshots.last { $0.time < entry.deleted.timestamp }
            #expect(try Self.n(entry.record) == before?.live[entry.record.header.recordName], "seed \(seed): \(entry.record.header.recordName)")
        }
        #expect(deleted.map(\.deleted.timestamp) == deleted.map(\.deleted.timestamp).sorted(by: >), "newest deletion first")

        // Every kept version, page by page: in name and then time order, each the record as it was until the write
        // that replaced it, one for each live record a step changed or deleted; a deletion's marked while it stands.
        var kept: [KeptVersion] = []
        var position: KeptVersion.Position?
        while true {
            let page = try await store.keptVersions(zoneName: "Z", in: alice, after: position, limit: 7, logger: logger)
            kept += page
            guard page.count == 7, let last = page.last else { break }
            position = last.position
        }
        let order = kept.map { ($0.record.header.recordName, $0.replacedAt) }
        #expect(zip(order, order.dropFirst()).allSatisfy { $0.0 < $1.0 || ($0.0 == $1.0 && $0.1 < $1.1) }, "seed \(seed): ordered, no repeat")
        let replaced = zip(snapshots, snapshots.dropFirst()).reduce(0) { count, pair in
            count + pair.0.live.keys.count { pair.1.live[$0] != pair.0.live[$0] }
        }
        #expect(kept.count == replaced, "seed \(seed): one version for each live record a write changed or deleted")
        for version in kept {
            let name = version.record.header.recordName
            let before = snapshots.last { $0.time < version.replacedAt }?.live[name]
            #expect(try Self.n(version.record) == before, "seed \(seed): \(name) until \(version.replacedAt)")
            if version.deleted {
                #expect(live[name] == nil && snapshots.first { $0.time == version.replacedAt }?.live[name] == nil, "seed \(seed): \(name)")
            }
        }
        #expect(kept.contains(where: \.deleted) == !deleted.isEmpty, "seed \(seed): deletions that stand are marked")

        // Pruning drops the versions replaced before a moment and nothing after it.
        let pruned = try await store.pruneHistory(replacedBefore: 400, logger: logger)
        #expect(pruned > 0)
        #expect(try await store.pruneHistory(replacedBefore: 400, logger: logger) == 0)
        let recent = try await store.recordsChanged(since: 500, zoneName: "Z", in: alice, after: nil, limit: 100, logger: logger)
        for change in recent.changes { #expect(try change.past.map(Self.n) == snapshots.first { $0.time == 500 }?.live[change.recordName]) }
    }

    @Test(arguments: StoreFactory.all)
    func aBatchWithoutHistoryKeepsNothingAndAZoneThatIsNotLiveIsNotFound(_ factory: StoreFactory) async throws {
        let store = try await factory.make()
        try await store.createContainer("c", createdAt: 0, logger: logger)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z"))], in: alice, timestamp: 0, logger: logger)
        for (time, operation) in [
            (10, RecordModification(operationType: .create, recordName: "a", recordType: "T", fields: ["n": .int64(1)])),
            (20, RecordModification(operationType: .forceReplace, recordName: "a", recordType: "T", fields: ["n": .int64(2)])),
            (30, RecordModification(operationType: .forceDelete, recordName: "a")),
        ] {
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: alice, zoneName: "Z", atomic: false, operations: [operation], author: "_alice", deviceID: "d", timestamp: Int64(time)),
                logger: logger)
        }
        let changed = try await store.recordsChanged(since: 15, zoneName: "Z", in: alice, after: nil, limit: 10, logger: logger)
        #expect(changed.changes == [RecordChangeSince(recordName: "a", current: nil, past: nil)], "no version kept: the past is unknown")
        #expect(changed.next == nil)
        #expect(try await store.deletedRecords(since: 0, zoneName: "Z", in: alice, names: nil, limit: 10, logger: logger).isEmpty)
        await #expect(throws: StoreError.self) {
            try await store.recordsChanged(since: 0, zoneName: "Nope", in: alice, after: nil, limit: 10, logger: logger)
        }
    }
}
