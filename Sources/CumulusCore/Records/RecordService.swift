public import CumulusModel
public import CumulusStore
import Foundation
public import Logging

/// The result of looking up one record.
public enum RecordLookupResult: Sendable, Hashable {
    case found(StoredRecord, desiredKeys: Set<String>?)
    case notFound(recordName: String)
}

/// The response to `records/lookup`, ready to encode.
public struct RecordsLookupResponse: Sendable {
    /// One result per requested record, in request order.
    public var results: [RecordLookupResult]
    /// The shares behind found share records, by record name, so they read back whole.
    public var shares: [String: ShareState]
}

/// The response to `records/modify`, ready to encode.
public struct RecordsModifyResponse: Sendable {
    /// One result per operation, in request order, with the `desiredKeys` that apply to it.
    public var results: [(result: RecordModificationResult, desiredKeys: Set<String>?)]
    public var numbersAsStrings: Bool
    /// The shares behind saved share records, by record name.
    public var shares: [String: ShareState] = [:]
}

/// `records/lookup` and `records/modify`: a zone's records read and written, each write checked against the limits,
/// the schema and the caller's access before the store is touched, so a request that breaks a rule changes nothing.
public struct RecordService: Sendable, WriteHealthReporting {
    let store: any RecordZoneStore
    let policy: AuthorizationPolicy
    let limits: Limits
    let clock: WallClock
    let writeHealth: WriteHealth
    /// Told of every committed write, so waiting push polls re-check at once.
    let changes: ChangeSignal?
    /// Where devices' sightings go.
    let devices: DeviceTracker
    let zones: ZoneAccess
    let schemas: SchemaService
    let assets: AssetService
    let shares: ShareService
    /// Whether a write keeps the versions it replaces.
    let history: HistoryService

    /// `records/lookup`.
    public func lookup(caller: Caller, scope: DatabaseScope, request: RecordsLookupRequest, logger: Logger) async throws
        -> RecordsLookupResponse
    {
        try limits.checkCount(request.records.count, path: "records")
        let (database, zoneName, access) = try await zones.zone(request.zoneID, caller: caller, scope: scope, access: .read, logger: logger)
        let found = try await mapStoreErrors {
            try await store.records(named: request.records.map(\.recordName), zoneName: zoneName, in: database, access: access, logger: logger)
        }
        let results: [RecordLookupResult] = request.records.map { entry in
            guard let record = found[entry.recordName] else { return .notFound(recordName: entry.recordName) }
            return .found(record, desiredKeys: (entry.desiredKeys ?? request.desiredKeys).map(Set.init))
        }
        return RecordsLookupResponse(
            results: results, shares: try await shares.states(for: Array(found.values), database: database, zoneName: zoneName, logger: logger))
    }

    /// `records/modify`.
    public func modify(caller: Caller, scope: DatabaseScope, request: RecordsModifyRequest, logger: Logger) async throws
        -> RecordsModifyResponse
    {
        try limits.checkCount(request.operations.count, path: "operations")
        let (database, zoneName, access) = try await zones.zone(request.zoneID, caller: caller, scope: scope, access: .write, logger: logger)
        guard let author = caller.authorName else {
            throw CumulusError(.authenticationRequired, "request needs authorization")
        }
        await devices.note(caller, now: clock.milliseconds(), logger: logger)

        var modifications: [RecordModification] = []
        modifications.reserveCapacity(request.operations.count)
        var seen = Set<String>()
        for (index, operation) in request.operations.enumerated() {
            let modification = try validate(operation, path: "operations[\(index)].record", zoneName: zoneName)
            guard seen.insert(modification.recordName).inserted else {
                throw CumulusError(
                    .badRequest, "operations[\(index)].record.recordName: record \(modification.recordName) appears in more than one operation")
            }
            modifications.append(modification)
        }

        // A participant deleting a share record from their shared database leaves the share, as in CloudKit.
        var leaving: [Int: String] = [:]
        if let access {
            for (index, modification) in modifications.enumerated()
            where modification.operationType.isDelete && access.shareRecordNames.contains(modification.recordName) {
                leaving[index] = modification.recordName
            }
        }
        // `atomic` applies to custom zones only; the default zone is never atomic, as in CloudKit.
        let atomic = zoneName == ZoneID.defaultZoneName ? false : (request.atomic ?? true)
        var refusals = try await schemas.checkSchema(&modifications, database: database, zoneName: zoneName, access: access, logger: logger)
        let assets = try await self.assets.checkAssets(modifications, database: database, zoneName: zoneName, author: author, logger: logger)
        refusals.merge(assets.refusals) { schema, _ in schema }
        if !refusals.isEmpty, zoneName != ZoneID.defaultZoneName, access == nil {
            // A missing zone fails the whole request, before any record is looked at, as the store would answer.
            let zones = try await mapStoreErrors { try await store.zones(named: [zoneName], in: database, logger: logger) }
            if zones[zoneName] == nil { throw CumulusError(.zoneNotFound, "zone \(zoneName) does not exist") }
        }
        if atomic, !refusals.isEmpty {
            let results = modifications.indices.map { index in
                RecordModificationResult.failed(
                    refusals[index] ?? .atomic(modifications[index].recordName))
            }
            return RecordsModifyResponse(
                results: zip(results, request.operations).map { ($0, ($1.desiredKeys.map(Set.init)) ?? request.desiredKeys.map(Set.init)) },
                numbersAsStrings: request.numbersAsStrings)
        }
        let shareChanges =
            scope == .private ? try await shares.shareChanges(for: request, modifications: modifications, caller: caller, logger: logger) : []
        let batch = RecordBatch(
            database: database, zoneName: zoneName, atomic: atomic,
            operations: modifications.enumerated().filter { leaving[$0.offset] == nil && refusals[$0.offset] == nil }.map(\.element),
            author: author, deviceID: caller.deviceID, timestamp: clock.milliseconds(), maximumRecordSize: limits.maximumRecordSize,
            onlyCreatorMayModify: policy.onlyCreatorMayModify(caller: caller, scope: scope), access: access, shareChanges: shareChanges,
            // Receipts saved in records are attached in the same transaction: the cleanup keeps their files while a
            // record holds them.
            assetAttachments: Dictionary(
                assets.attachments.map { (modifications[$0.key].recordName, $0.value) }, uniquingKeysWith: { first, _ in first }),
            // Leaving a share is part of the batch's transaction, after its operations.
            sharesLeft: modifications.indices.compactMap { refusals[$0] == nil ? leaving[$0] : nil },
            keepsHistory: history.keepsHistory
        )
        // The store answers the batch's operations in order; an iterator, since taking each from the front of an array
        // moves the rest, once per record.
        var batchAnswers =
            (batch.operations.isEmpty && batch.sharesLeft.isEmpty
            ? [] : try await mapStoreErrors(writing: true) { try await store.modifyRecords(batch, logger: logger) }).makeIterator()
        var results: [RecordModificationResult] = []
        results.reserveCapacity(modifications.count)
        for index in modifications.indices {
            if let refusal = refusals[index] {
                results.append(.failed(refusal))
            } else if let shareName = leaving[index] {
                results.append(.deleted(recordName: shareName))
            } else if let answer = batchAnswers.next() {
                results.append(answer)
            } else {
                throw CumulusError(.internalError, "the store answered fewer operations than the batch holds")
            }
        }
        changes?.changed([ChangeSignal.key(database)])
        let topLevelKeys = request.desiredKeys.map(Set.init)
        let saved = results.compactMap { if case .saved(let record) = $0 { record } else { nil } }
        return RecordsModifyResponse(
            results: zip(results, request.operations).map { ($0, ($1.desiredKeys.map(Set.init)) ?? topLevelKeys) },
            numbersAsStrings: request.numbersAsStrings,
            shares: try await shares.states(for: saved, database: database, zoneName: zoneName, logger: logger)
        )
    }

    // MARK: - Validation

    func validate(_ operation: RecordOperation, path: String, zoneName: String) throws(CumulusError) -> RecordModification {
        let draft = operation.record
        let type = operation.operationType
        let recordName: String
        if let name = draft.recordName {
            recordName = name
        } else if type == .create {
            recordName = UUID.random().uuidString
        } else {
            throw CumulusError(.badRequest, "\(path).recordName: is required for \(type.rawValue)")
        }
        try NameRules.checkRecordName(recordName, path: "\(path).recordName", limits: limits)
        if type == .create, draft.recordType == nil {
            throw CumulusError(.badRequest, "\(path).recordType: is required for create")
        }
        var recordType = draft.recordType
        let isShare = ShareRecord.isShareType(recordType) || recordName == ShareRecord.zoneWideRecordName
        if isShare {
            recordType = recordType.map { _ in ShareRecord.recordType }
            if type.createsMissing, recordType == nil { recordType = ShareRecord.recordType }
        } else if let recordType {
            try NameRules.checkIdentifier(recordType, kind: "record type", path: "\(path).recordType", limits: limits)
        }
        if type.checksChangeTag, draft.recordChangeTag == nil {
            throw CumulusError(
                .badRequest,
                "\(path).recordChangeTag: is required for \(type.rawValue); use force\(type.rawValue.prefix(1).uppercased() + type.rawValue.dropFirst()) to skip the check"
            )
        }
        if case .set(let parent) = draft.parent {
            try NameRules.checkRecordName(parent, path: "\(path).parent.recordName", limits: limits)
        }
        for (name, value) in draft.fields {
            // Built only for an error: this loop runs for every field of every record written.
            func fieldPath() -> String { "\(path).fields.\(name)" }
            // Share records carry CloudKit's system keys, such as `cloudkit.title`.
            if !(isShare && name.hasPrefix("cloudkit.")) {
                try NameRules.checkIdentifier(name, kind: "field name", path: fieldPath(), limits: limits)
            }
            guard let value else { continue }
            for reference in value.references {
                try NameRules.checkRecordName(reference.recordName, path: "\(fieldPath()).value.recordName", limits: limits)
                if let zoneID = reference.zoneID, zoneID.zoneName != zoneName {
                    throw CumulusError(.badRequest, "\(fieldPath()).value.zoneID: references must point into the record's own zone (\(zoneName))")
                }
            }
        }
        let sentJSON = RecordFieldsCoding.canonical(sent: draft.fields)
        let size = sentJSON.count
        if size > limits.maximumRecordSize {
            throw CumulusError(
                .quotaExceeded,
                "\(path).fields: record \(recordName) is \(size) bytes; the limit is \(limits.maximumRecordSize) bytes (assets excluded)"
            )
        }
        return RecordModification(
            operationType: type, recordName: recordName, recordType: recordType, recordChangeTag: draft.recordChangeTag,
            fields: draft.fields, untypedFields: draft.untypedFields, parent: draft.parent, createShortGUID: draft.createShortGUID,
            sentFieldsJSON: sentJSON
        )
    }
}
