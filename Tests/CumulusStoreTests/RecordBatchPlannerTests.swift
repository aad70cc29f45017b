import CumulusModel
import CumulusStore
import Testing

/// The record semantics every store shares, tested without a database.
@Suite("RecordBatchPlanner", .timeLimit(.minutes(10)))
struct RecordBatchPlannerTests {
    let planner = RecordBatchPlanner(makeShortGUID: { "guid" })
    let database = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_me")

    func existing(
        _ name: String = "r", tag sequence: Int64 = 5, fields: [String: FieldValue] = ["a": .int64(1), "b": .int64(2)], parent: String? = nil
    ) -> StoredRecord {
        let stamp = RecordStamp(timestamp: 1, userRecordName: "_me", deviceID: "d")
        return StoredRecord(
            header: RecordHeader(
                recordName: name, recordType: "T", recordChangeTag: ChangeTag.make(sequence), created: stamp, modified: stamp, parent: parent,
                zoneID: database.zoneID("Z")
            ),
            fieldsJSON: RecordFieldsCoding.canonical(fields), changeSequence: sequence
        )
    }

    func plan(_ operations: [RecordModification], existing records: [StoredRecord], atomic: Bool = true) -> RecordBatchPlan {
        let batch = RecordBatch(database: database, zoneName: "Z", atomic: atomic, operations: operations, author: "_me", deviceID: "d", timestamp: 2)
        return planner.plan(batch, existing: Dictionary(uniqueKeysWithValues: records.map { ($0.header.recordName, $0) }))
    }

    func outcome(_ type: RecordOperationType, tag: String?, exists: Bool) -> RecordBatchPlan.Outcome {
        let operation = RecordModification(operationType: type, recordName: "r", recordType: "T", recordChangeTag: tag, fields: ["a": .int64(7)])
        return plan([operation], existing: exists ? [existing()] : []).outcomes[0]
    }

    static let current = ChangeTag.make(5)

    @Test(arguments: [
        // (operation, tag, record exists, expected outcome)
        (RecordOperationType.create, nil as String?, false, "write"),
        (.create, nil, true, "EXISTS"),
        (.update, current, true, "write"),
        (.update, "stale", true, "CONFLICT"),
        (.update, current, false, "NOT_FOUND"),
        (.forceUpdate, "stale", true, "write"),
        (.forceUpdate, nil, false, "write"),
        (.replace, current, true, "write"),
        (.replace, "stale", true, "CONFLICT"),
        (.replace, current, false, "NOT_FOUND"),
        (.forceReplace, "stale", true, "write"),
        (.forceReplace, nil, false, "write"),
        (.delete, current, true, "delete"),
        (.delete, "stale", true, "CONFLICT"),
        (.delete, current, false, "delete"),
        (.forceDelete, "stale", true, "delete"),
        (.forceDelete, nil, false, "delete"),
    ])
    func operationTypesFollowChangeTagRules(_ type: RecordOperationType, _ tag: String?, _ exists: Bool, _ expected: String) {
        switch outcome(type, tag: tag, exists: exists) {
        case .write: #expect(expected == "write")
        case .delete: #expect(expected == "delete")
        case .failed(let failure):
            #expect(failure.code.rawValue == expected)
            if failure.code == .conflict || failure.code == .exists { #expect(failure.serverRecord == existing()) }
        }
    }

    @Test func updateMergesAndReplaceClears() throws {
        let parent = existing("p")
        let update = plan(
            [RecordModification(operationType: .update, recordName: "r", recordChangeTag: Self.current, fields: ["a": .int64(7)])],
            existing: [existing(parent: "p"), parent]
        )
        #expect(try RecordFieldsCoding.parseCanonical(update.writes[0].fieldsJSON) == ["a": .int64(7), "b": .int64(2)])
        #expect(update.writes[0].parent == "p")

        let replace = plan(
            [RecordModification(operationType: .replace, recordName: "r", recordChangeTag: Self.current, fields: ["a": .int64(7)])],
            existing: [existing(parent: "p"), parent]
        )
        #expect(try RecordFieldsCoding.parseCanonical(replace.writes[0].fieldsJSON) == ["a": .int64(7)])
        #expect(replace.writes[0].parent == nil)
    }

    @Test func parentsMustExistAfterTheBatch() {
        let child = RecordModification(operationType: .create, recordName: "child", recordType: "T", parent: .set("parent"))
        let orphan = plan([child], existing: [])
        #expect(orphan.outcomes.first?.failureCode == .validatingReferenceError)

        // Child listed before its parent in the same batch is fine.
        let together = plan([child, RecordModification(operationType: .create, recordName: "parent", recordType: "T")], existing: [])
        #expect(together.writes.count == 2)

        // A record whose parent is gone can still be updated, as long as the update does not set a missing parent.
        let dangling = plan(
            [RecordModification(operationType: .forceUpdate, recordName: "r", fields: ["a": .int64(3)])], existing: [existing(parent: "gone")])
        #expect(dangling.writes.map(\.parent) == ["gone"])

        let validate = RecordModification(
            operationType: .create, recordName: "x", recordType: "T", fields: ["ref": .reference(Reference(recordName: "missing", action: .validate))]
        )
        #expect(plan([validate], existing: []).writes.isEmpty)
    }

    @Test func atomicFailureFailsSiblingsAndNonAtomicKeepsThem() {
        let operations = [
            RecordModification(operationType: .create, recordName: "new", recordType: "T"),
            RecordModification(operationType: .create, recordName: "r", recordType: "T"),
        ]
        let atomic = plan(operations, existing: [existing()])
        #expect(atomic.isEmpty)
        #expect(atomic.outcomes.compactMap(\.failureCode) == [.atomicError, .exists])

        let nonAtomic = plan(operations, existing: [existing()], atomic: false)
        #expect(nonAtomic.writes.map(\.recordName) == ["new"])
        guard case .write(0) = nonAtomic.outcomes[0] else { Issue.record("expected write"); return }
    }

    @Test func enforcesRecordSizeAfterMerging() {
        let big = String(repeating: "x", count: 600)
        let batch = RecordBatch(
            database: database, zoneName: "Z", atomic: true,
            operations: [RecordModification(operationType: .update, recordName: "r", recordChangeTag: Self.current, fields: ["c": .string(big)])],
            author: "_me", deviceID: "d", timestamp: 2, maximumRecordSize: 1000
        )
        let result = planner.plan(batch, existing: ["r": existing(fields: ["a": .string(big)])])
        guard case .failed(let failure) = result.outcomes[0] else { Issue.record("expected failure"); return }
        #expect(failure.code == .quotaExceeded)
    }

    @Test func keepsCreationStampAndMintsShortGUIDOnce() {
        let result = plan(
            [RecordModification(operationType: .forceUpdate, recordName: "r", createShortGUID: true)], existing: [existing()]
        )
        #expect(result.writes[0].created.timestamp == 1)
        #expect(result.writes[0].modified.timestamp == 2)
        #expect(result.writes[0].shortGUID == "guid")
    }

    @Test func recordTypeCannotChange() {
        let result = plan([RecordModification(operationType: .forceUpdate, recordName: "r", recordType: "Other")], existing: [existing()])
        guard case .failed(let failure) = result.outcomes[0] else { Issue.record("expected failure"); return }
        #expect(failure.code == .badRequest)
        #expect(failure.reason.contains("recordType"))
    }
}

extension RecordBatchPlan.Outcome {
    var failureCode: ServerErrorCode? {
        if case .failed(let failure) = self { return failure.code }
        return nil
    }
}
