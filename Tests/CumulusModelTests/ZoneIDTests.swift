import CumulusModel
import Testing

/// The one rule for "the same zone", which the sync engine, subscriptions and synced tables all use.
@Suite("ZoneID", .timeLimit(.minutes(10)))
struct ZoneIDTests {
    @Test(arguments: [
        // (a's owner, b's owner, same zone)
        (nil as String?, "_alice" as String?, true),
        ("__defaultOwner__", "_alice", true),
        ("", "_alice", true),
        ("_alice", nil, true),
        ("_alice", "_alice", true),
        ("_alice", "_bob", false),
    ])
    func aZoneWithoutANamedOwnerIsTheCallersOwn(first: String?, second: String?, same: Bool) {
        let a = ZoneID(zoneName: "Lists", ownerRecordName: first)
        let b = ZoneID(zoneName: "Lists", ownerRecordName: second)
        #expect(a.isSameZone(as: b) == same)
        #expect(b.isSameZone(as: a) == same, "the rule is symmetric")
    }

    @Test func differentNamesAreNeverTheSameZone() {
        #expect(!ZoneID(zoneName: "Lists").isSameZone(as: ZoneID(zoneName: "Notes")))
        #expect(ZoneID(zoneName: "Lists", ownerRecordName: "_alice") != ZoneID(zoneName: "Lists"), "== is exact identity")
    }
}
