import CumulusModel
import CumulusStore
import CumulusTesting
import Logging
import Testing

/// Zone digests, against every store: whatever a zone goes through (saves, updates, deletions and the deletions they
/// cascade to, moves between shared hierarchies, shares started, accepted and ended), the digest each store keeps in
/// the transaction of each write equals the digest computed from its records, and the page that ends a feed hands the
/// digest of exactly the records that feed delivered.
@Suite("RecordStore conformance: zone digests", .timeLimit(.minutes(10)))
struct ZoneDigestConformanceTests {
    let logger = Logger(label: "test")
    let alice = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice")

    /// The records a feed from the start delivers, folded as a device applies them.
    private func replayFeed(_ store: any RecordStore, access: ParticipantAccess? = nil, database: DatabaseRef) async throws
        -> (held: [String: String], digest: ZoneDigest?)
    {
        var held: [String: String] = [:]
        var after: Int64 = 0
        var incarnation: Int64?
        while true {
            let page = try await store.zoneChanges(
                ZoneChangeRequest(database: database, zoneName: "Z", incarnation: incarnation, after: after, limit: 7, access: access), logger: logger
            )
            for change in page.changes {
                switch change {
                case .changed(let record): held[record.header.recordName] = record.header.recordChangeTag
                case .deleted(let name, _): held[name] = nil
                }
            }
            after = page.sequence
            incarnation = page.zone.incarnation
            if page.moreComing {
                #expect(page.digest == nil, "only the page that ends the feed carries a digest")
                continue
            }
            return (held, page.digest)
        }
    }

    @Test(arguments: StoreFactory.all)
    func theKeptDigestIsTheDigestOfTheRecordsThroughEveryKindOfWrite(_ factory: StoreFactory) async throws {
        let seed = UInt64.random(in: 0..<UInt64.max)
        var random = SeededRandomNumberGenerator(seed: seed)
        let store = try await factory.make()
        try await store.createContainer("c", createdAt: 0, logger: logger)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z"))], in: alice, timestamp: 0, logger: logger)
        let names = (0..<24).map { "r\($0)" }
        let roots = ["r0", "r1", "r2"]
        var shared: Set<String> = []
        var acceptances = 0
        for step in 0..<120 {
            let name = names.randomElement(using: &random)!
            var operations: [RecordModification] = []
            var shareChanges: [ShareChange] = []
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4:
                // A save, with a parent (a move, when it changes) and sometimes a DELETE_SELF reference.
                let parent = names.randomElement(using: &random)!
                var fields: [String: FieldValue?] = ["n": .int64(Int64(step))]
                if Bool.random(using: &random) {
                    fields["owner"] = .reference(Reference(recordName: names.randomElement(using: &random)!, action: .deleteSelf))
                }
                operations = [
                    RecordModification(
                        operationType: .forceUpdate, recordName: name, recordType: "T", fields: fields, parent: parent == name ? .clear : .set(parent)
                    )
                ]
                // A second write of the same record in one batch keeps the last.
                if Int.random(in: 0..<5, using: &random) == 0 {
                    operations.append(RecordModification(operationType: .forceUpdate, recordName: name, recordType: "T", fields: ["n": .int64(-1)]))
                }
            case 4..<6:
                operations = [RecordModification(operationType: .forceDelete, recordName: name)]
            case 6..<8:
                // A share of a root, started (the root takes a new change tag) with a participant.
                let root = roots.randomElement(using: &random)!
                guard !shared.contains(root) else { continue }
                operations = [
                    RecordModification(operationType: .forceUpdate, recordName: root, recordType: "T"),
                    RecordModification(operationType: .forceUpdate, recordName: "share-\(root)", recordType: "cloudkit.share"),
                ]
                shareChanges = [
                    ShareChange(
                        recordName: "share-\(root)",
                        kind: .save(
                            rootRecordName: root, publicPermission: nil,
                            participants: [ResolvedParticipant(userRecordName: "_bob", email: nil, permission: .readWrite, removed: false)]))
                ]
            default:
                // A share ended by deleting its record (the root's reference is cleared, with a new change tag).
                guard let root = shared.randomElement(using: &random) else { continue }
                operations = [RecordModification(operationType: .forceDelete, recordName: "share-\(root)")]
                shareChanges = [ShareChange(recordName: "share-\(root)", kind: .delete)]
            }
            let results = try await store.modifyRecords(
                RecordBatch(
                    database: alice, zoneName: "Z", atomic: false, operations: operations, author: "_alice", deviceID: "d", timestamp: Int64(step),
                    shareChanges: shareChanges), logger: logger)
            for case .saved(let record) in results where record.header.recordType == "cloudkit.share" {
                shared.insert(String(record.header.recordName.dropFirst("share-".count)))
            }
            for case .deleted(let name) in results where name.hasPrefix("share-") { shared.remove(String(name.dropFirst("share-".count))) }
            // A participant accepting a share gives its record a new change tag.
            if case .save = shareChanges.first?.kind,
                let share = try await store.shares(named: [shareChanges[0].recordName], zoneName: "Z", in: alice, logger: logger).first
            {
                _ = try await store.acceptShare(shortGUID: share.shortGUID, userRecordName: "_bob", logger: logger)
                acceptances += 1
            }
            if step % 10 == 9 {
                let repairs = try await store.refreshZoneDigests(unknownOnly: false, logger: logger)
                #expect(repairs.isEmpty, "\(factory.name), seed \(seed), step \(step): the kept digest drifted from the records: \(repairs)")
                if !repairs.isEmpty { return }
            }
        }
        #expect(acceptances > 0, "seed \(seed): no share was started, so none of their writes was checked")
        let (held, digest) = try await replayFeed(store, database: alice)
        let fromFeed = ZoneDigest(records: held.map { (recordName: $0.key, changeTag: $0.value) })
        #expect(digest == fromFeed, "\(factory.name), seed \(seed): the feed's digest is not the digest of what it delivered")
        #expect(digest?.recordCount == Int64(held.count))
        let scanned = try await store.scanRecords(DigestScan(), in: .all, zoneName: "Z", database: alice, access: nil, logger: logger).digest
        #expect(scanned == fromFeed)
    }

    /// A participant of a hierarchy share is handed the digest of what is shared with them, not of the zone.
    @Test(arguments: StoreFactory.all)
    func aParticipantIsHandedTheDigestOfWhatIsSharedWithThem(_ factory: StoreFactory) async throws {
        let store = try await factory.make()
        try await store.createContainer("c", createdAt: 0, logger: logger)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Z"))], in: alice, timestamp: 0, logger: logger)
        let bob = ResolvedParticipant(userRecordName: "_bob", email: nil, permission: .readOnly, removed: false)
        _ = try await store.modifyRecords(
            RecordBatch(
                database: alice, zoneName: "Z", atomic: true,
                operations: [
                    RecordModification(operationType: .create, recordName: "trip", recordType: "Trip"),
                    RecordModification(operationType: .create, recordName: "fuel", recordType: "Cost", parent: .set("trip")),
                    RecordModification(operationType: .create, recordName: "private", recordType: "Note"),
                    RecordModification(operationType: .create, recordName: "share-trip", recordType: "cloudkit.share"),
                ], author: "_alice", deviceID: "d", timestamp: 1,
                shareChanges: [
                    ShareChange(recordName: "share-trip", kind: .save(rootRecordName: "trip", publicPermission: nil, participants: [bob]))
                ]), logger: logger)
        let share = try #require(try await store.shares(named: ["share-trip"], zoneName: "Z", in: alice, logger: logger).first)
        _ = try await store.acceptShare(shortGUID: share.shortGUID, userRecordName: "_bob", logger: logger)
        let access = ParticipantAccess(
            userRecordName: "_bob", zoneWide: false, roots: ["trip"], zoneWideWritable: false, writableRoots: [], shareRecordNames: ["share-trip"])
        let (held, digest) = try await replayFeed(store, access: access, database: alice)
        #expect(held.keys.sorted() == ["fuel", "share-trip", "trip"])
        #expect(digest == ZoneDigest(records: held.map { (recordName: $0.key, changeTag: $0.value) }), "\(factory.name)")
        let owner = try await replayFeed(store, database: alice)
        #expect(owner.digest?.recordCount == 4)
    }
}

/// Devices, against every store: a sighting creates or updates a device, its position only moves forward, its name is
/// kept when a request gives none, how far behind it is follows the private database, and the user's deletion takes
/// them.
@Suite("RecordStore conformance: devices", .timeLimit(.minutes(10)))
struct DeviceConformanceTests {
    let logger = Logger(label: "test")

    @Test(arguments: StoreFactory.all)
    func devicesAreSeenMoveForwardAndGoWithTheirUser(_ factory: StoreFactory) async throws {
        let store = try await factory.make()
        try await store.createContainer("c", createdAt: 0, logger: logger)
        try await store.createUser(UserAccount(userRecordName: "_a", container: "c", name: "alice", createdAt: 0), logger: logger)
        let alice = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_a")
        func write(_ name: String) async throws {
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: alice, zoneName: ZoneID.defaultZoneName, atomic: false,
                    operations: [RecordModification(operationType: .forceUpdate, recordName: name, recordType: "T")], author: "_a", deviceID: "d",
                    timestamp: 1), logger: logger)
        }
        func sighting(_ device: String, name: String?, at time: Int64, position: Int64?) -> DeviceSighting {
            DeviceSighting(
                container: "c", environment: .development, userRecordName: "_a", deviceID: device, name: name, seenAt: time, position: position)
        }
        try await write("r1")
        let head = try await store.databaseChanges(in: alice, after: 0, limit: 10, logger: logger).sequence
        try await store.recordDevice(sighting("phone", name: "Phone", at: 10, position: head), logger: logger)
        try await store.recordDevice(sighting("tablet", name: nil, at: 20, position: nil), logger: logger)
        // An older position and no name leave the position and the name as they were.
        try await store.recordDevice(sighting("phone", name: nil, at: 30, position: head - 1), logger: logger)
        try await write("r2")
        try await write("r3")
        let devices = try await store.devices(container: "c", userRecordName: "_a", logger: logger)
        #expect(devices.map(\.deviceID) == ["phone", "tablet"], "the most recently seen first")
        let phone = try #require(devices.first)
        #expect(phone.name == "Phone" && phone.lastSeenAt == 30 && phone.lastFetchedAt == 30 && phone.position == head)
        #expect(phone.changesBehind == 2, "\(factory.name): two writes since its position")
        #expect(devices.last?.changesBehind == nil && devices.last?.lastFetchedAt == nil)
        // Another container sees none of them; a sighting of a user who does not exist is dropped.
        #expect(try await store.devices(container: "other", userRecordName: "_a", logger: logger).isEmpty)
        try await store.recordDevice(
            DeviceSighting(container: "c", environment: .development, userRecordName: "_gone", deviceID: "x", name: nil, seenAt: 1, position: nil),
            logger: logger)
        _ = try await store.eraseUser(userRecordName: "_a", attemptKeyPrefixes: [], timestamp: 0, logger: logger)
        #expect(try await store.devices(container: "c", userRecordName: "_a", logger: logger).isEmpty)
    }

    /// A user who names a new device on every request keeps at most ``DeviceLimits/maximumPerUser`` of them; the known
    /// ones go on being seen and reporting.
    @Test(arguments: StoreFactory.all)
    func aUserKeepsABoundedNumberOfDevices(_ factory: StoreFactory) async throws {
        let store = try await factory.make()
        try await store.createContainer("c", createdAt: 0, logger: logger)
        try await store.createUser(UserAccount(userRecordName: "_a", container: "c", name: "alice", createdAt: 0), logger: logger)
        let limit = DeviceLimits.maximumPerUser
        for index in 0..<(limit + 5) {
            try await store.recordDevice(
                DeviceSighting(
                    container: "c", environment: index % 2 == 0 ? .development : .production, userRecordName: "_a", deviceID: "d\(index)",
                    name: nil, seenAt: Int64(index), position: nil), logger: logger)
        }
        try await store.recordVerification(
            DeviceVerification(verifiedAt: 500, zones: 1, missing: 1, extra: 0, stale: 0, zonesOutOfSync: ["Z"]), container: "c",
            environment: .development, userRecordName: "_a", deviceID: "one-more", logger: logger)
        var devices = try await store.devices(container: "c", userRecordName: "_a", logger: logger)
        #expect(devices.count == limit, "\(factory.name): \(devices.count)")
        #expect(!devices.contains { $0.deviceID == "one-more" || $0.deviceID == "d\(limit)" })
        // A known device still moves forward and reports.
        try await store.recordDevice(
            DeviceSighting(
                container: "c", environment: .development, userRecordName: "_a", deviceID: "d0", name: "Phone", seenAt: 900, position: nil),
            logger: logger)
        try await store.recordVerification(
            DeviceVerification(verifiedAt: 901, zones: 1, missing: 0, extra: 0, stale: 0, zonesOutOfSync: []), container: "c",
            environment: .development, userRecordName: "_a", deviceID: "d0", logger: logger)
        devices = try await store.devices(container: "c", userRecordName: "_a", logger: logger)
        let phone = try #require(devices.first)
        #expect(phone.deviceID == "d0" && phone.lastSeenAt == 901 && phone.name == "Phone" && phone.verification?.verifiedAt == 901)
    }

    /// A device's last verification replaces the one before; the devices out of sync are listed per container and
    /// environment, the latest first, and leave the list once they report in sync.
    @Test(arguments: StoreFactory.all)
    func devicesKeepTheirLastVerificationAndTheOutOfSyncAreListed(_ factory: StoreFactory) async throws {
        let store = try await factory.make()
        try await store.createContainer("c", createdAt: 0, logger: logger)
        try await store.createContainer("other", createdAt: 0, logger: logger)
        try await store.createUser(UserAccount(userRecordName: "_a", container: "c", name: "alice", createdAt: 0), logger: logger)
        try await store.createUser(UserAccount(userRecordName: "_o", container: "other", name: "olga", createdAt: 0), logger: logger)
        func report(_ user: String, _ device: String, at time: Int64, missing: Int = 0, stale: Int = 0, zones: [String] = [], container: String = "c")
            async throws
        {
            try await store.recordVerification(
                DeviceVerification(verifiedAt: time, zones: 3, missing: missing, extra: 0, stale: stale, zonesOutOfSync: zones),
                container: container, environment: .development, userRecordName: user, deviceID: device, logger: logger)
        }
        try await store.recordDevice(
            DeviceSighting(
                container: "c", environment: .development, userRecordName: "_a", deviceID: "phone", name: "Phone", seenAt: 5, position: nil),
            logger: logger)
        try await report("_a", "phone", at: 10, missing: 2, zones: ["Drives"])
        // A device the server had not seen is made by its report.
        try await report("_a", "tablet", at: 20, stale: 1, zones: ["Drives", "Lists"])
        try await report("_o", "laptop", at: 30, missing: 1, container: "other")
        // A report for a user of another container, or one who does not exist, records nothing.
        try await report("_o", "sneaky", at: 40, missing: 9, container: "c")
        try await report("_gone", "x", at: 40, missing: 1)

        let devices = try await store.devices(container: "c", userRecordName: "_a", logger: logger)
        let phone = try #require(devices.first { $0.deviceID == "phone" })
        #expect(phone.name == "Phone" && phone.lastSeenAt == 10, "\(factory.name): a report is a sighting, and keeps the name")
        #expect(phone.verification == DeviceVerification(verifiedAt: 10, zones: 3, missing: 2, extra: 0, stale: 0, zonesOutOfSync: ["Drives"]))
        #expect(devices.first { $0.deviceID == "tablet" }?.verification?.zonesOutOfSync == ["Drives", "Lists"])
        var listed = try await store.devicesOutOfSync(container: "c", environment: .development, limit: 10, logger: logger)
        #expect(listed.map(\.device.deviceID) == ["tablet", "phone"], "the latest first, one container: \(listed)")
        #expect(listed.allSatisfy { $0.userRecordName == "_a" && $0.userName == "alice" })
        #expect(try await store.devicesOutOfSync(container: "c", environment: .production, limit: 10, logger: logger).isEmpty)
        #expect(try await store.devicesOutOfSync(container: "c", environment: .development, limit: 1, logger: logger).count == 1)

        // In sync again: off the list, the report kept.
        try await report("_a", "tablet", at: 50)
        listed = try await store.devicesOutOfSync(container: "c", environment: .development, limit: 10, logger: logger)
        #expect(listed.map(\.device.deviceID) == ["phone"])
        let tablet = try #require(try await store.devices(container: "c", userRecordName: "_a", logger: logger).first { $0.deviceID == "tablet" })
        #expect(tablet.verification?.isInSync == true && tablet.verification?.verifiedAt == 50 && tablet.verification?.zonesOutOfSync == [])
    }
}
