import CumulusModel
import CumulusStore
import Testing

/// The scripts' sequences, read without a database: which actions a store is asked for, in which order, and with what.
/// Both stores run the same scripts (the conformance and server suites check what they store); these tests pin the
/// shape, so a step that adds a round trip to the common write, or reorders the locks, fails here first.
@Suite("Transaction scripts", .timeLimit(.minutes(10)))
struct TransactionScriptTests {
    let database = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_me")
    let zone = ZoneRow(id: 7, databaseID: 3, changeSequence: 40)

    /// Runs a script as a store would, answering each action with `answer` and keeping the actions asked for.
    func run<Output>(_ script: TransactionScript<Output>, answer: (StoreAction) throws -> StoreAnswer) throws -> (Output, [StoreAction]) {
        var script = script
        var actions: [StoreAction] = []
        while true {
            switch script {
            case .done(let output): return (output, actions)
            case .run(let action, let then):
                actions.append(action)
                var answered = try answer(action)
                // Actions that change records answer the live rows they replaced: none, unless a test says.
                switch (action, answered) {
                case (.saveRecords, .none), (.deleteRecords, .none), (.renumberRecords, .none), (.pointRootAtShare, .none),
                    (.clearShareReference, .none):
                    answered = .liveSequences([:])
                default: break
                }
                script = try then(answered)
            }
        }
    }

    func batch(_ operations: [RecordModification], zoneName: String = "Z") -> RecordBatch {
        RecordBatch(database: database, zoneName: zoneName, atomic: true, operations: operations, author: "_me", deviceID: "d", timestamp: 2)
    }

    func names(_ actions: [StoreAction]) -> [String] {
        actions.map { action in String(describing: action).prefix { $0 != "(" }.description }
    }

    @Test func aSingleNewRecordIsThreeActionsAndTakesTheNextSequence() throws {
        let operation = RecordModification(operationType: .create, recordName: "r", recordType: "T", fields: ["a": .int64(1)])
        let (results, actions) = try run(ModifyRecordsScript.script(batch([operation]), planner: RecordBatchPlanner(makeShortGUID: { "g" }))) {
            action in
            switch action {
            case .findZone: .zone(zone)
            case .readRecords: .records([:])
            default: .none
            }
        }
        #expect(names(actions) == ["findZone", "readRecords", "saveRecordsFinishingZone"])
        guard case .findZone(_, _, let lock, _) = actions[0] else { return }
        #expect(lock, "a writer locks the zone first")
        guard case .saveRecordsFinishingZone(let zoneRow, let writes, let sequences, let versionsToKeep, _, let digest) = actions[2] else { return }
        #expect(zoneRow == zone && writes.map(\.recordName) == ["r"] && sequences == [41] && versionsToKeep.isEmpty)
        // The zone's digest takes the new record in the same statement.
        #expect(digest == ZoneDigest(recordName: "r", changeTag: ChangeTag.make(41)))
        guard case .saved(let record) = results.first else {
            Issue.record("expected a saved record, got \(results)")
            return
        }
        #expect(record.changeSequence == 41)
    }

    /// A batch that only writes knows what it replaces from what it read under the zone's lock: the digest drops the
    /// versions read and takes the new ones, and the zone's write ends with the save.
    @Test func anUpdateTakesWhatItReadOutOfTheDigestInTheSaveItself() throws {
        let existing = live("a", sequence: 30)
        let operations = [
            RecordModification(operationType: .forceUpdate, recordName: "a", recordType: "T", fields: ["x": .int64(2)]),
            RecordModification(operationType: .create, recordName: "b", recordType: "T", fields: [:]),
        ]
        var withHistory = batch(operations)
        withHistory.keepsHistory = true
        let (_, actions) = try run(ModifyRecordsScript.script(withHistory, planner: RecordBatchPlanner(makeShortGUID: { "g" }))) { action in
            switch action {
            case .findZone: .zone(zone)
            case .readRecords: .records(["a": existing])
            default: .none
            }
        }
        #expect(names(actions) == ["findZone", "readRecords", "saveRecordsFinishingZone"])
        guard case .saveRecordsFinishingZone(_, _, let sequences, let versionsToKeep, _, let digest) = actions[2] else { return }
        #expect(sequences == [41, 42])
        #expect(versionsToKeep == ["a"], "the version the update replaces goes to the history in the same step")
        var expected = ZoneDigest.empty
        expected.subtract(ZoneDigest(recordName: "a", changeTag: ChangeTag.make(30)))
        expected.add(ZoneDigest(recordName: "a", changeTag: ChangeTag.make(41)))
        expected.add(ZoneDigest(recordName: "b", changeTag: ChangeTag.make(42)))
        #expect(digest == expected)
    }

    @Test func theDefaultZoneIsCreatedWithItsDatabaseOnFirstWrite() throws {
        let operation = RecordModification(operationType: .create, recordName: "r", recordType: "T", fields: [:])
        var found = false
        let (_, actions) = try run(
            ModifyRecordsScript.script(batch([operation], zoneName: ZoneID.defaultZoneName), planner: RecordBatchPlanner(makeShortGUID: { "g" }))
        ) { action in
            switch action {
            case .findZone:
                defer { found = true }
                return .zone(found ? zone : nil)
            case .createDatabase: return .sequence(3)
            case .readRecords: return .records([:])
            default: return .none
            }
        }
        #expect(names(actions).prefix(3) == ["findZone", "createDatabase", "findZone"])
    }

    @Test func anotherZoneThatDoesNotExistFailsBeforeAnyWrite() throws {
        let operation = RecordModification(operationType: .create, recordName: "r", recordType: "T", fields: [:])
        var asked: [String] = []
        #expect(throws: StoreError.self) {
            _ = try run(ModifyRecordsScript.script(batch([operation]), planner: RecordBatchPlanner(makeShortGUID: { "g" }))) { action in
                asked.append(String(describing: action))
                return .zone(nil)
            }
        }
        #expect(asked.count == 1)
    }

    @Test func deletionsCascadeALevelAtATimeAndTakeOneSequenceEach() throws {
        // c points at b, b at a (DELETE_SELF): deleting a deletes all three, a first.
        let existing = live("a", sequence: 40)
        let operation = RecordModification(operationType: .forceDelete, recordName: "a", recordType: nil)
        let referrers: [String: [String]] = ["a": ["b"], "b": ["c"]]
        let (_, actions) = try run(ModifyRecordsScript.script(batch([operation]), planner: RecordBatchPlanner(makeShortGUID: { "g" }))) { action in
            switch action {
            case .findZone: .zone(zone)
            case .readRecords: .records(["a": existing])
            case .readReferrers(_, let targets): .list(targets.flatMap { referrers[$0] ?? [] })
            case .deleteRecords: .liveSequences(["a": 40, "b": 30, "c": 20])
            case .readShareRows: .shareRows([])
            default: .none
            }
        }
        #expect(
            names(actions) == [
                "findZone", "readRecords", "readReferrers", "readReferrers", "readReferrers", "deleteRecords", "readShareRows", "finishZoneWrite",
            ])
        guard case .deleteRecords(_, let deleted, let sequences, _) = actions[5] else { return }
        #expect(deleted == ["a", "b", "c"] && sequences == [41, 42, 43])
        guard case .finishZoneWrite(_, _, let sequence, let digest) = actions.last else { return }
        #expect(sequence == 43)
        // The three deleted records leave the zone's digest.
        var gone = ZoneDigest.empty
        for (name, sequence) in [("a", 40), ("b", 30), ("c", 20)] {
            gone.subtract(ZoneDigest(recordName: name, changeTag: ChangeTag.make(Int64(sequence))))
        }
        #expect(digest == gone && digest.recordCount == -3)
    }

    @Test func aParticipantLeavesTheSharesTheyDeletedInTheBatchsTransaction() throws {
        var batch = batch([])
        batch.author = "_bob"
        batch.sharesLeft = ["share"]
        let state = ShareState(
            database: database, zoneName: "Z", zoneIncarnation: 7, shareRecordName: "share", rootRecordName: "root", shortGUID: "g",
            publicPermission: .none,
            participants: [ShareParticipantState(userRecordName: "_bob", type: .user, permission: .readWrite, status: .accepted)], shareRecord: nil)
        let (results, actions) = try run(ModifyRecordsScript.script(batch, planner: RecordBatchPlanner(makeShortGUID: { "g" }))) { action in
            switch action {
            case .findZone: .zone(zone)
            case .readShare: .share((id: 5, state: state))
            case .takeZoneSequence, .takeSharedDatabaseSequence: .sequence(50)
            case .readViewAccess: .viewAccess(nil)
            case .readView:
                .view(StoredView(ended: false, access: SharedViewAccess(acceptedShares: [(rootRecordName: "root", shareRecordName: "share")])))
            default: .none
            }
        }
        #expect(results.isEmpty)
        #expect(
            names(actions) == [
                "findZone", "readShare", "setParticipantStatus", "takeZoneSequence", "renumberRecords", "touchZone", "readViewAccess", "readView",
                "takeSharedDatabaseSequence", "endView",
            ])
    }

    @Test func viewsAreRefreshedUserByUserInNameOrder() throws {
        let access = SharedViewAccess(acceptedShares: [(rootRecordName: "root", shareRecordName: "share")])
        let (_, actions) = try run(ShareScripts.refreshViews(zone: 7, users: ["zoe", "amy"])) { action in
            switch action {
            case .readViewAccess: .viewAccess(access)
            case .readView: .view(nil)
            case .takeSharedDatabaseSequence: .sequence(9)
            default: .none
            }
        }
        let begun = actions.compactMap { action -> String? in
            if case .beginView(_, let user, let position, _) = action, position == 9 { return user }
            return nil
        }
        #expect(begun == ["amy", "zoe"])
    }

    @Test func aStoreThatAnswersTheWrongKindFailsTheTransaction() throws {
        #expect(throws: StoreError.self) {
            _ = try run(ZoneScripts.records(named: ["r"], zoneName: "Z", in: database, access: nil)) { _ in .none }
        }
    }

    /// Erasing a user: public records first (as a batch deletes them), then their zones, then their participations,
    /// assets, authorship and rows, each once; the receipt adds up what each step answered.
    @Test func erasingAUserDeletesTheirPublicRecordsThenTheirZonesThenWhatHangsOnThem() throws {
        let publicZone = ZoneRow(id: 1, databaseID: 1, changeSequence: 10)
        let theirZone = ZoneRow(id: 7, databaseID: 3, changeSequence: 40)
        let others = ZoneRow(id: 9, databaseID: 5, changeSequence: 2)
        let (receipt, actions) = try run(
            UserScripts.erase(userRecordName: "_me", attemptKeyPrefixes: ["signin-account:c\nme"], timestamp: 5, planner: RecordBatchPlanner { "g" })
        ) { action in
            switch action {
            case .readUserContainer: return .text("c")
            case .findZone(let database, _, _, _): return .zone(database.environment == .development ? publicZone : nil)
            case .readRecordsCreated: return .list(["post"])
            case .readRecords(_, _, let names): return .records(Dictionary(uniqueKeysWithValues: names.map { ($0, Self.stored($0)) }))
            case .readShareRows: return .shareRows([])
            case .readReferrers: return .list([])
            case .deleteHistory(let zones, _): return .count(zones.count * 2)
            case .readUserZones: return .zones([theirZone])
            case .countZoneContents: return .counts(["records": 12, "shares": 1])
            case .readParticipations: return .participations([Participation(zone: others, shareRecordName: "share-1")])
            case .takeZoneSequence: return .sequence(3)
            case .deleteAssetReceipts: return .removed(2, files: ["f1"])
            case .anonymizeAuthor: return .count(4)
            case .deleteUserRows: return .counts(["subscriptions": 1, "pushTokens": 2, "devices": 3, "webAuthTokens": 4])
            default: return .none
            }
        }
        let order = names(actions)
        #expect(order.first == "readUserContainer" && order.last == "deleteUserRows")
        let first = { (name: String) in order.firstIndex(of: name) ?? -1 }
        #expect(first("deleteRecords") < first("readUserZones"), "public records before the user's zones")
        #expect(first("readUserZones") < first("deleteZone") && first("deleteZone") < first("readParticipations"))
        #expect(first("removeParticipant") < first("renumberRecords"), "each share record a new change tag once they are off it")
        #expect(order.filter { $0 == "deleteZone" }.count == 1 && order.filter { $0 == "deleteUserRows" }.count == 1)
        #expect(receipt.publicRecords == 1 && receipt.zones == 1 && receipt.records == 12 && receipt.sharesStopped == 1)
        #expect(receipt.historyVersions == 4 && receipt.participations == 1 && receipt.assetReceipts == 2 && receipt.assetFiles == ["f1"])
        #expect(receipt.recordsAnonymized == 4 && receipt.webAuthTokens == 4 && receipt.devices == 3)
        guard case .deleteRecords(_, let deleted, _, let stamp) = actions[order.firstIndex(of: "deleteRecords")!] else { return }
        #expect(deleted == ["post"] && stamp.userRecordName == UserErasure.erasedUserRecordName && stamp.timestamp == 5)
    }

    /// A live record of zone `Z`, last written at `sequence`.
    func live(_ name: String, sequence: Int64) -> StoredRecord {
        let stamp = RecordStamp(timestamp: 1, userRecordName: "_me", deviceID: "d")
        return StoredRecord(
            header: RecordHeader(
                recordName: name, recordType: "T", recordChangeTag: ChangeTag.make(sequence), created: stamp, modified: stamp,
                zoneID: database.zoneID("Z")),
            fieldsJSON: RecordFieldsCoding.canonical([:]), changeSequence: sequence)
    }

    static func stored(_ name: String) -> StoredRecord {
        StoredRecord(
            header: RecordHeader(
                recordName: name, recordType: "T", recordChangeTag: "a", created: RecordStamp(timestamp: 1, userRecordName: "_me", deviceID: "d"),
                modified: RecordStamp(timestamp: 1, userRecordName: "_me", deviceID: "d"), zoneID: ZoneID(zoneName: ZoneID.defaultZoneName)),
            fieldsJSON: Array("{}".utf8), changeSequence: 1)
    }
}
