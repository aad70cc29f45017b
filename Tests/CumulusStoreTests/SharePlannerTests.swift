import CumulusModel
import CumulusStore
import Testing

/// The sharing rules every store shares, tested without a database.
@Suite("SharePlanner", .timeLimit(.minutes(10)))
struct SharePlannerTests {
    let planner = RecordBatchPlanner(makeShortGUID: { "guid" })
    let database = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice")

    func stored(_ name: String, parent: String? = nil, type: String = "Cost") -> StoredRecord {
        let stamp = RecordStamp(timestamp: 1, userRecordName: "_alice", deviceID: "d")
        return StoredRecord(
            header: RecordHeader(
                recordName: name, recordType: type, recordChangeTag: ChangeTag.make(1), created: stamp, modified: stamp, parent: parent,
                zoneID: database.zoneID("Groups")),
            fieldsJSON: RecordFieldsCoding.canonical([:]), changeSequence: 1
        )
    }

    func access(roots: Set<String> = ["trip"], writable: Set<String> = ["trip"], zoneWide: Bool = false, zoneWideWritable: Bool = false)
        -> ParticipantAccess
    {
        ParticipantAccess(
            userRecordName: "_bob", zoneWide: zoneWide, roots: roots, zoneWideWritable: zoneWideWritable, writableRoots: writable,
            shareRecordNames: ["share-trip"])
    }

    /// Plans a batch of `_bob`'s and enforces his access; `placed` is what a store reads: each name's shared root.
    func enforced(_ operations: [RecordModification], access: ParticipantAccess, existing: [StoredRecord], placed: [String: String]) -> [String] {
        let batch = RecordBatch(
            database: database, zoneName: "Groups", atomic: false, operations: operations, author: "_bob", deviceID: "d", timestamp: 2,
            access: access)
        let existingByName = Dictionary(uniqueKeysWithValues: existing.map { ($0.header.recordName, $0) })
        var plan = planner.plan(batch, existing: existingByName)
        SharePlanner.enforce(access, on: &plan, batch: batch, existing: existingByName, placed: placed)
        return plan.outcomes.map { outcome in
            if case .failed(let failure) = outcome { failure.code.rawValue } else { "ok" }
        }
    }

    @Test func aParticipantWritesOnlyUnderWritableRootsAndSeesNothingElse() {
        let records = [stored("trip"), stored("fuel", parent: "trip"), stored("flat"), stored("share-trip", type: "cloudkit.share")]
        let placed = ["trip": "trip", "fuel": "trip"]
        let results = enforced(
            [
                RecordModification(operationType: .forceUpdate, recordName: "fuel", recordType: "Cost"),
                RecordModification(operationType: .create, recordName: "snacks", recordType: "Cost", parent: .set("trip")),
                RecordModification(operationType: .forceUpdate, recordName: "flat", recordType: "Cost"),
                RecordModification(operationType: .create, recordName: "orphan", recordType: "Cost"),
                RecordModification(operationType: .forceUpdate, recordName: "share-trip", recordType: "cloudkit.share"),
                RecordModification(operationType: .forceUpdate, recordName: "fuel", recordType: "Cost", parent: .set("flat")),
                RecordModification(operationType: .forceDelete, recordName: "never-existed"),
            ], access: access(), existing: records, placed: placed)
        #expect(results == ["ok", "ok", "NOT_FOUND", "ACCESS_DENIED", "ACCESS_DENIED", "ACCESS_DENIED", "ok"])
        let rootDeletion = enforced(
            [RecordModification(operationType: .forceDelete, recordName: "trip")], access: access(), existing: records, placed: placed)
        #expect(rootDeletion == ["ACCESS_DENIED"])

        let readOnly = enforced(
            [RecordModification(operationType: .forceUpdate, recordName: "fuel", recordType: "Cost")], access: access(writable: []),
            existing: records, placed: placed)
        #expect(readOnly == ["ACCESS_DENIED"])
        let zoneWideReadOnly = enforced(
            [RecordModification(operationType: .forceUpdate, recordName: "flat", recordType: "Cost")], access: access(roots: [], zoneWide: true),
            existing: records, placed: [:])
        #expect(zoneWideReadOnly == ["ACCESS_DENIED"])
        let zoneWideWritable = enforced(
            [RecordModification(operationType: .forceUpdate, recordName: "flat", recordType: "Cost")],
            access: access(roots: [], zoneWide: true, zoneWideWritable: true), existing: records, placed: [:])
        #expect(zoneWideWritable == ["ok"])
    }

    func checked(_ changes: [ShareChange], facts: ZoneShareFacts, zone: String = "Groups") -> ([String], [PlannedShareChange]) {
        let operations = changes.map { RecordModification(operationType: .forceUpdate, recordName: $0.recordName, recordType: "cloudkit.share") }
        let batch = RecordBatch(
            database: database, zoneName: zone, atomic: false, operations: operations, author: "_alice", deviceID: "d", timestamp: 2,
            shareChanges: changes)
        var plan = planner.plan(batch, existing: [:])
        let planned = SharePlanner.checkShareChanges(&plan, batch: batch, facts: facts)
        let reasons = plan.outcomes.map { outcome in if case .failed(let failure) = outcome { failure.reason } else { "ok" } }
        return (reasons, planned)
    }

    @Test func shareChangesFollowTheRules() {
        let bob = ResolvedParticipant(userRecordName: "_bob", email: nil, permission: .readWrite, removed: false)
        func save(_ name: String, root: String?, public permission: SharePermission? = nil, participants: [ResolvedParticipant]? = nil)
            -> ShareChange
        {
            ShareChange(recordName: name, kind: .save(rootRecordName: root, publicPermission: permission, participants: participants))
        }
        let facts = ZoneShareFacts(
            shares: ["share-trip": ExistingShare(rootRecordName: "trip", publicPermission: .readOnly, activeUsers: ["_alice", "_carol"])],
            liveRoots: ["trip", "flat", "aisle", "area"], sharedAncestors: ["aisle": "trip"], sharedDescendants: ["area": "trip"])
        let (reasons, planned) = checked(
            [
                save("share-flat", root: "flat", participants: [bob]),
                save("share-trip", root: "flat"),
                save("share-missing", root: "missing"),
                save("share-again", root: "trip"),
                save("share-aisle", root: "aisle"),
                save("share-area", root: "area"),
                save("cloudkit.zoneshare", root: nil),
            ], facts: facts)
        #expect(reasons[0] == "ok")
        #expect(reasons[1].contains("root cannot change"))
        #expect(reasons[2].contains("does not exist"))
        #expect(reasons[3].contains("already shared"))
        #expect(reasons[4].contains("through its ancestor trip"))
        #expect(reasons[5].contains("below area"))
        #expect(reasons[6].contains("hierarchy shares"))
        #expect(planned.map(\.recordName) == ["share-flat"] && planned.first?.isNew == true)
        // A public share takes no invitations: anyone with the link joins.
        let (invited, _) = checked([save("share-trip", root: nil, participants: [bob])], facts: facts)
        #expect(invited[0].contains("only while publicPermission is NONE"))

        let (defaultZone, _) = checked([save("s", root: "r")], facts: facts, zone: ZoneID.defaultZoneName)
        #expect(defaultZone[0].contains("default zone"))
    }

    @Test func participantsChangeAsTheOwnerSavesTheShare() {
        let owner = ShareParticipantState(userRecordName: "_alice", type: .owner, permission: .readWrite, status: .accepted)
        let bob = ShareParticipantState(userRecordName: "_bob", type: .user, permission: .readWrite, status: .accepted)
        let carol = ShareParticipantState(userRecordName: "_carol", type: .user, permission: .readOnly, status: .invited)
        let dave = ShareParticipantState(userRecordName: "_dave", type: .publicUser, permission: .readOnly, status: .accepted)

        // A new share lists its owner first, then the invited.
        let created = SharePlanner.participants(
            current: [], owner: "_alice", previousPublicPermission: .none, publicPermission: SharePermission.none,
            listed: [ResolvedParticipant(userRecordName: "_bob", email: "bob@example.com", permission: .readWrite, removed: false)])
        #expect(created.participants.map(\.userRecordName) == ["_alice", "_bob"])
        #expect(created.participants[1].status == .invited && created.participants[1].email == "bob@example.com")

        // Going public removes pending invitations only; going private removes everyone but the owner.
        let goingPublic = SharePlanner.participants(
            current: [owner, bob, carol], owner: "_alice", previousPublicPermission: .none, publicPermission: .readOnly, listed: nil)
        #expect(goingPublic.participants.map(\.status) == [.accepted, .accepted, .removed] && goingPublic.affected == ["_carol"])
        let goingPrivate = SharePlanner.participants(
            current: [owner, bob, dave], owner: "_alice", previousPublicPermission: .readOnly, publicPermission: SharePermission.none, listed: nil)
        #expect(goingPrivate.participants.map(\.status) == [.accepted, .removed, .removed] && goingPrivate.affected == ["_bob", "_dave"])
        let publicPermissionChanged = SharePlanner.participants(
            current: [owner, dave], owner: "_alice", previousPublicPermission: .readOnly, publicPermission: .readWrite, listed: nil)
        #expect(publicPermissionChanged.participants[1].permission == .readWrite)

        // A saved list is the whole list: Bob left out is removed; Carol listed again with a new permission keeps her status.
        let saved = SharePlanner.participants(
            current: [owner, bob, carol], owner: "_alice", previousPublicPermission: .none, publicPermission: nil,
            listed: [ResolvedParticipant(userRecordName: "_carol", email: nil, permission: .readWrite, removed: false)])
        #expect(saved.participants.map(\.status) == [.accepted, .removed, .invited])
        #expect(saved.participants[2].permission == .readWrite && saved.affected == ["_bob", "_carol"])
        // Removed, then listed again: invited again.
        var removedBob = bob
        removedBob.status = .removed
        let again = SharePlanner.participants(
            current: [owner, removedBob], owner: "_alice", previousPublicPermission: .none, publicPermission: nil,
            listed: [ResolvedParticipant(userRecordName: "_bob", email: nil, permission: .readOnly, removed: false)])
        #expect(again.participants[1].status == .invited && again.participants[1].permission == .readOnly)
    }

    @Test func deletingARootOrAShareRecordEndsTheShare() {
        let shares: [(shareRecordName: String, rootRecordName: String?)] = [("share-trip", "trip"), ("share-flat", "flat"), ("zone", nil)]
        let endings = SharePlanner.endings(of: shares, deleted: ["trip", "share-flat"])
        #expect(
            endings == [
                ShareEnding(shareRecordName: "share-trip", rootToClear: nil, deletesShareRecord: true),
                ShareEnding(shareRecordName: "share-flat", rootToClear: "flat", deletesShareRecord: false),
            ])
    }

    @Test func viewsBeginEndAndChangeWithAccess() {
        let trip = SharedViewAccess(acceptedShares: [(rootRecordName: "trip", shareRecordName: "share-trip")])
        let both = SharedViewAccess(
            acceptedShares: [(rootRecordName: "flat", shareRecordName: "share-flat"), (rootRecordName: "trip", shareRecordName: "share-trip")])
        #expect(both?.roots == ["flat", "trip"] && both?.zoneWide == false)
        #expect(SharedViewAccess(acceptedShares: [(rootRecordName: nil, shareRecordName: "cloudkit.zoneshare")])?.zoneWide == true)
        #expect(SharedViewAccess(acceptedShares: []) == nil)

        #expect(SharePlanner.viewTransition(stored: nil, access: trip) == .begin(trip!))
        #expect(SharePlanner.viewTransition(stored: (ended: true, access: nil), access: trip) == .begin(trip!))
        #expect(SharePlanner.viewTransition(stored: (ended: false, access: trip), access: nil) == .end)
        #expect(SharePlanner.viewTransition(stored: (ended: false, access: trip), access: trip) == .none)
        #expect(SharePlanner.viewTransition(stored: (ended: false, access: trip), access: both) == .change(previous: trip, current: both!))
        #expect(SharePlanner.viewTransition(stored: (ended: true, access: nil), access: nil) == .none)
    }
}

/// The share-a-copy upload quota every store applies, tested without a database.
@Suite("LinkQuota", .timeLimit(.minutes(10)))
struct LinkQuotaTests {
    @Test func theFirstFullWindowRefusesAndSaysWhenItFrees() {
        let quota = LinkQuota(perDevicePerHour: 2, perDevicePerDay: 3, perAddressPerHour: 10)
        let now: Int64 = 10_000_000
        #expect(quota.windows.map(\.length) == [3_600_000, 86_400_000, 3_600_000])
        let fits = [
            LinkQuotaUsage(count: 1, oldest: now - 1000), LinkQuotaUsage(count: 2, oldest: now - 1000), LinkQuotaUsage(count: 0, oldest: nil),
        ]
        #expect(quota.decide(usage: fits, now: now) == .accepted)
        // The hour is full: its oldest upload, 10 minutes old, leaves it in 50 minutes.
        let hourFull = [
            LinkQuotaUsage(count: 2, oldest: now - 600_000), LinkQuotaUsage(count: 2, oldest: now - 600_000), LinkQuotaUsage(count: 2, oldest: now),
        ]
        #expect(quota.decide(usage: hourFull, now: now) == .rejected(retryAfter: 3_000, reason: "2 links an hour from this device"))
        let dayFull = [
            LinkQuotaUsage(count: 0, oldest: nil), LinkQuotaUsage(count: 3, oldest: now - 86_000_000), LinkQuotaUsage(count: 0, oldest: nil),
        ]
        #expect(quota.decide(usage: dayFull, now: now) == .rejected(retryAfter: 400, reason: "3 links a day from this device"))
        #expect(LinkQuota.retention >= quota.windows.map(\.length).max()!)
    }

    @Test func serverSecretCandidatesAreRandom() {
        #expect(ServerSecret.makeCandidate().count == 32)
        #expect(ServerSecret.makeCandidate() != ServerSecret.makeCandidate())
    }
}
