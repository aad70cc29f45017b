public import CumulusModel

/// A record write decided by the planner; the store assigns its change sequence and stores it.
public struct PlannedWrite: Sendable, Hashable {
    public var recordName: String
    public var recordType: String
    public var fieldsJSON: [UInt8]
    public var parent: String?
    public var share: Reference?
    public var shortGUID: String?
    public var created: RecordStamp
    public var modified: RecordStamp
    /// Names of records this one references with `DELETE_SELF`: deleting any of them deletes this record.
    public var deleteSelfTargets: Set<String>

    /// The stored record once the store has assigned a change sequence.
    public func storedRecord(zoneID: ZoneID, changeSequence: Int64) -> StoredRecord {
        StoredRecord(
            header: RecordHeader(
                recordName: recordName, recordType: recordType, recordChangeTag: ChangeTag.make(changeSequence), created: created,
                modified: modified, parent: parent, share: share, zoneID: zoneID, shortGUID: shortGUID
            ),
            fieldsJSON: fieldsJSON,
            changeSequence: changeSequence
        )
    }
}

/// What a batch does, decided before anything is written.
public struct RecordBatchPlan: Sendable, Hashable {
    /// The outcome of each operation, in request order.
    public enum Outcome: Sendable, Hashable {
        /// Index into ``writes``.
        case write(Int)
        case delete(recordName: String)
        case failed(RecordFailure)
    }

    public var outcomes: [Outcome]
    public var writes: [PlannedWrite]
    /// Existing records deleted explicitly (cascades come on top, found by the store).
    public var deletions: [String]

    /// Whether nothing will be written.
    public var isEmpty: Bool { writes.isEmpty && deletions.isEmpty }

    /// The result of each operation, in request order, once the store has stored ``writes`` as `saved` (same order).
    public func results(saved: [StoredRecord]) -> [RecordModificationResult] {
        outcomes.map { outcome in
            switch outcome {
            case .write(let index): .saved(saved[index])
            case .delete(let name): .deleted(recordName: name)
            case .failed(let failure): .failed(failure)
            }
        }
    }

    /// Fails one operation after planning (a store's own checks, such as sharing rules), keeping the batch's atomicity:
    /// in an atomic batch every other operation then fails with `ATOMIC_ERROR` and nothing is written.
    public mutating func fail(_ index: Int, _ failure: RecordFailure, atomic: Bool, recordNames: [String]) {
        let previous = outcomes[index]
        outcomes[index] = .failed(failure)
        if atomic {
            for (other, outcome) in outcomes.enumerated() where other != index {
                if case .failed(let existing) = outcome, existing.code != .atomicError { continue }
                outcomes[other] = .failed(
                    RecordFailure.atomic(recordNames[other])
                )
            }
            writes = []
            deletions = []
            return
        }
        switch previous {
        case .write(let writeIndex):
            writes.remove(at: writeIndex)
            for (other, outcome) in outcomes.enumerated() {
                if case .write(let later) = outcome, later > writeIndex { outcomes[other] = .write(later - 1) }
            }
        case .delete(let name):
            deletions.removeAll { $0 == name }
        case .failed:
            break
        }
    }
}

/// Decides the outcome of every operation of a `records/modify` batch against the records that exist.
///
/// The planner is pure, so every store applies exactly the same rules (change tags, merge and replace, atomicity),
/// and they are tested without a database:
/// - `create` fails with `EXISTS` if the record exists;
/// - `update` and `replace` need the current `recordChangeTag`, else `CONFLICT` with the server's record;
/// - `forceUpdate` and `forceReplace` ignore the tag and create a missing record;
/// - `delete` needs the current tag; deleting a missing record succeeds, as the record is gone either way;
/// - `update`/`forceUpdate` merge the fields sent; `replace`/`forceReplace` clear the others;
/// - a `parent` or `VALIDATE` reference must name a record that exists after the batch;
/// - when ``RecordBatch/onlyCreatorMayModify`` is set, changing someone else's record fails with `ACCESS_DENIED`;
/// - in an atomic batch, one failure fails all the others with `ATOMIC_ERROR` and nothing is written.
public struct RecordBatchPlanner: Sendable {
    /// Makes a new short GUID for `createShortGUID`.
    public var makeShortGUID: @Sendable () -> String

    public init(makeShortGUID: @escaping @Sendable () -> String) {
        self.makeShortGUID = makeShortGUID
    }

    /// Plans a batch.
    ///
    /// - Parameters:
    ///   - batch: The operations.
    ///   - existing: Live records of the zone, by name, covering at least ``RecordBatch/namesToRead``.
    public func plan(_ batch: RecordBatch, existing: [String: StoredRecord]) -> RecordBatchPlan {
        let stamp = RecordStamp(timestamp: batch.timestamp, userRecordName: batch.author, deviceID: batch.deviceID)
        var outcomes: [RecordBatchPlan.Outcome] = []
        outcomes.reserveCapacity(batch.operations.count)
        var writes: [PlannedWrite] = []
        writes.reserveCapacity(batch.operations.count)
        var deletions: [String] = []

        for operation in batch.operations {
            if batch.onlyCreatorMayModify, let current = existing[operation.recordName], current.header.created.userRecordName != batch.author {
                outcomes.append(
                    .failed(
                        RecordFailure(
                            recordName: operation.recordName, code: .accessDenied,
                            reason: "only the creator of record \(operation.recordName) may change it"))
                )
                continue
            }
            switch decide(operation, current: existing[operation.recordName], stamp: stamp, maximumSize: batch.maximumRecordSize) {
            case .success(.some(let write)):
                outcomes.append(.write(writes.count))
                writes.append(write)
            case .success(.none):
                if existing[operation.recordName] != nil { deletions.append(operation.recordName) }
                outcomes.append(.delete(recordName: operation.recordName))
            case .failure(let failure):
                outcomes.append(.failed(failure))
            }
        }

        // References are checked against the state after the batch, so a child may come with its parent.
        var liveAfter = Set(existing.keys).subtracting(deletions)
        for write in writes { liveAfter.insert(write.recordName) }
        for (index, operation) in batch.operations.enumerated() {
            guard case .write = outcomes[index] else { continue }
            // Only a parent being set is checked: a record whose parent was deleted earlier stays writable.
            if case .set(let parent) = operation.parent, existing[operation.recordName]?.header.parent != parent,
                !liveAfter.contains(parent)
            {
                outcomes[index] = .failed(
                    RecordFailure(
                        recordName: operation.recordName, code: .validatingReferenceError,
                        reason: "parent record \(parent) does not exist in zone \(batch.zoneName)"
                    )
                )
                continue
            }
            for case let value? in operation.fields.values {
                for reference in value.references where reference.action == .validate && !liveAfter.contains(reference.recordName) {
                    outcomes[index] = .failed(
                        RecordFailure(
                            recordName: operation.recordName, code: .validatingReferenceError,
                            reason: "referenced record \(reference.recordName) does not exist in zone \(batch.zoneName)"
                        )
                    )
                }
            }
        }

        let anyFailed = outcomes.contains { if case .failed = $0 { true } else { false } }
        if anyFailed && batch.atomic {
            let failed = outcomes.enumerated().map { index, outcome -> RecordBatchPlan.Outcome in
                if case .failed = outcome { return outcome }
                return .failed(
                    RecordFailure.atomic(batch.operations[index].recordName)
                )
            }
            return RecordBatchPlan(outcomes: failed, writes: [], deletions: [])
        }
        if anyFailed {
            // Keep only the writes whose operations still succeed.
            var keptWrites: [PlannedWrite] = []
            var remapped = outcomes
            for (index, outcome) in outcomes.enumerated() {
                if case .write(let writeIndex) = outcome {
                    remapped[index] = .write(keptWrites.count)
                    keptWrites.append(writes[writeIndex])
                }
            }
            return RecordBatchPlan(outcomes: remapped, writes: keptWrites, deletions: deletions)
        }
        return RecordBatchPlan(outcomes: outcomes, writes: writes, deletions: deletions)
    }

    /// Decides one operation: a write, a deletion (`nil`), or a failure.
    private func decide(
        _ operation: RecordModification, current: StoredRecord?, stamp: RecordStamp, maximumSize: Int
    ) -> Result<PlannedWrite?, RecordFailure> {
        let name = operation.recordName
        func failure(_ code: ServerErrorCode, _ reason: String, serverRecord: StoredRecord? = nil) -> Result<PlannedWrite?, RecordFailure> {
            .failure(RecordFailure(recordName: name, code: code, reason: reason, serverRecord: serverRecord))
        }

        if operation.operationType.isDelete {
            guard let current else { return .success(nil) }
            if operation.operationType.checksChangeTag, operation.recordChangeTag != current.header.recordChangeTag {
                return failure(.conflict, "record \(name) was changed on the server (recordChangeTag is stale)", serverRecord: current)
            }
            return .success(nil)
        }

        var fields: [String: FieldValue]
        var parent: String?
        var created = stamp
        var share: Reference?
        var shortGUID: String?
        let recordType: String

        if let current {
            if operation.operationType == .create {
                // With the server's record, as on CONFLICT: a client whose earlier create was applied but whose answer was
                // lost learns the change tag instead of resending `create` forever.
                return failure(.exists, "record \(name) already exists", serverRecord: current)
            }
            if operation.operationType.checksChangeTag, operation.recordChangeTag != current.header.recordChangeTag {
                return failure(.conflict, "record \(name) was changed on the server (recordChangeTag is stale)", serverRecord: current)
            }
            if let type = operation.recordType, type != current.header.recordType {
                return failure(.badRequest, "record \(name) has type \(current.header.recordType); recordType cannot change to \(type)")
            }
            recordType = current.header.recordType
            created = current.header.created
            share = current.header.share
            shortGUID = current.header.shortGUID
            if operation.operationType.merges {
                guard let currentFields = try? current.fields() else {
                    return failure(.internalError, "stored record \(name) could not be read")
                }
                fields = currentFields
                parent = current.header.parent
            } else {
                fields = [:]
                parent = nil
            }
        } else {
            guard operation.operationType.createsMissing else {
                return failure(.notFound, "record \(name) does not exist")
            }
            guard let type = operation.recordType else {
                return failure(.badRequest, "recordType is required to create record \(name)")
            }
            recordType = type
            fields = [:]
        }

        // Without a stored record to merge with, the fields are exactly those sent: their encoding may be made already,
        // and no dictionary of them is needed.
        let mergedWithStored = current != nil && operation.operationType.merges
        let sentJSON = mergedWithStored ? nil : operation.sentFieldsJSON
        if sentJSON == nil {
            for (key, value) in operation.fields {
                fields[key] = value
            }
        }
        switch operation.parent {
        case .unchanged: break
        case .set(let name): parent = name
        case .clear: parent = nil
        }
        if parent == name {
            return failure(.badRequest, "record \(name) cannot be its own parent")
        }
        if operation.createShortGUID && shortGUID == nil {
            shortGUID = makeShortGUID()
        }
        let json = sentJSON ?? RecordFieldsCoding.canonical(fields)
        if json.count > maximumSize {
            return failure(.quotaExceeded, "record \(name) is \(json.count) bytes; the limit is \(maximumSize) bytes (assets excluded)")
        }
        var targets = Set<String>()
        func collectTargets(_ value: FieldValue) {
            for reference in value.references where reference.action == .deleteSelf {
                targets.insert(reference.recordName)
            }
        }
        if sentJSON == nil {
            for value in fields.values { collectTargets(value) }
        } else {
            for case let value? in operation.fields.values { collectTargets(value) }
        }
        return .success(
            PlannedWrite(
                recordName: name, recordType: recordType, fieldsJSON: json, parent: parent, share: share, shortGUID: shortGUID,
                created: created, modified: stamp, deleteSelfTargets: targets
            )
        )
    }
}
