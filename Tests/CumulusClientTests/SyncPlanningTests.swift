import CumulusClient
import CumulusModel
import Testing

/// The sync engine's pure parts, without a server.
@Suite("Sync planning: batches, ordering, backoff", .timeLimit(.minutes(10)))
struct SyncPlanningTests {
    let zone = ZoneID(zoneName: "Z")

    func record(_ name: String, parent: String? = nil, size: Int = 10) -> CloudRecord {
        CloudRecord(
            recordType: "T", recordID: RecordID(recordName: name, zoneID: zone), fields: ["blob": .string(String(repeating: "x", count: size))],
            parent: parent
        )
    }

    @Test func parentsGoBeforeChildrenWhateverTheOrderGiven() {
        let planner = SendPlanner()
        let ordered = planner.parentsFirst([record("grandchild", parent: "child"), record("other"), record("child", parent: "root"), record("root")])
        let names = ordered.map(\.recordID.recordName)
        #expect(names.firstIndex(of: "root")! < names.firstIndex(of: "child")!)
        #expect(names.firstIndex(of: "child")! < names.firstIndex(of: "grandchild")!)
        #expect(Set(names) == ["grandchild", "other", "child", "root"])
        // A cycle does not hang.
        #expect(planner.parentsFirst([record("a", parent: "b"), record("b", parent: "a")]).count == 2)
    }

    @Test func batchesRespectCountAndSize() {
        let byCount = SendPlanner(maximumCount: 200).requests(
            saving: (0..<450).map { record("r\($0)") }, deleting: (0..<250).map { RecordID(recordName: "d\($0)", zoneID: zone) })
        #expect(byCount.map { $0.saves.count + $0.deletes.count } == [200, 200, 50, 200, 50])
        let bySize = SendPlanner(maximumCount: 200, maximumBytes: 10_000).requests(
            saving: (0..<10).map { record("r\($0)", size: 4000) }, deleting: [])
        #expect(bySize.map(\.saves.count) == [2, 2, 2, 2, 2])
        // A parent and its child split across requests still go parent first.
        let split = SendPlanner(maximumCount: 1).requests(saving: [record("child", parent: "root"), record("root")], deleting: [])
        #expect(split.map { $0.saves[0].recordID.recordName } == ["root", "child"])
    }

    @Test func backoffHonoursRetryAfterAndGivesUp() {
        let policy = RetryPolicy(maximumAttempts: 4, initialDelay: .milliseconds(100), maximumDelay: .seconds(10))
        #expect(policy.delay(afterAttempt: 1, retryAfter: nil) == .milliseconds(100))
        #expect(policy.delay(afterAttempt: 2, retryAfter: nil) == .milliseconds(200))
        #expect(policy.delay(afterAttempt: 3, retryAfter: nil) == .milliseconds(400))
        #expect(policy.delay(afterAttempt: 1, retryAfter: 7) == .seconds(7))
        #expect(policy.delay(afterAttempt: 1, retryAfter: 3600) == .seconds(10))
        #expect(policy.delay(afterAttempt: 4, retryAfter: nil) == nil)
    }

    @Test func transientErrorsAreTheRetryableOnes() {
        #expect(CloudError(code: .server(.throttled), reason: "").isTransient)
        #expect(CloudError(code: .server(.tryAgainLater), reason: "").isTransient)
        #expect(CloudError(code: .networkFailure, reason: "").isTransient)
        #expect(!CloudError(code: .server(.conflict), reason: "").isTransient)
        #expect(!CloudError(code: .server(.accessDenied), reason: "").isTransient)
    }
}
