public import CumulusModel
public import CumulusStore
import Foundation
public import Logging

/// The result of looking up one zone.
public enum ZoneLookupResult: Sendable, Hashable {
    case found(ZoneSummary)
    case notFound(ZoneID)
}

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

/// Zone and record operations of a database, checked against the limits and the ``AuthorizationPolicy``.
///
/// Validation happens before the store is touched, so a request that breaks a rule or a limit changes nothing.
public struct DatabaseService: Sendable {
    let store: any RecordStore
    let policy: AuthorizationPolicy
    let limits: Limits
    let clock: WallClock
    let secrets: TokenSecrets
    /// Told of every committed change, so waiting push polls re-check at once.
    let changes: ChangeSignal?
    /// Container schemas, and the check of writes and queries against them.
    public let schemas: SchemaService
    /// Where devices' sightings go.
    let devices: DeviceTracker
    /// Whether writes commit, for `/health`.
    public let writeHealth: WriteHealth
    /// How long replaced and deleted versions of records are kept for restores and undelete; zero keeps none.
    public let historyRetention: Duration
    /// Which database and zone a request acts on.
    let zones: ZoneAccess
    /// A signed-in user's subscriptions.
    public let subscriptions: SubscriptionService
    /// `records/reconcile` and the digests' check.
    public let reconciliation: ReconciliationService
    /// What devices report of their verifications.
    public let verification: VerificationService
    /// `cumulus doctor`'s look at schemas, indexes and digests.
    public let doctor: DoctorService
    /// Restores, undeletes and the history's upkeep.
    public let history: HistoryService
    /// Asset receipts, their bytes' bookkeeping and cleanup.
    public let assets: AssetService

    public init(
        store: any RecordStore, policy: AuthorizationPolicy = .init(), limits: Limits = .init(), clock: WallClock = .system,
        changes: ChangeSignal? = nil, secrets: TokenSecrets? = nil, devices: DeviceTracker? = nil,
        historyRetention: Duration = DatabaseService.defaultHistoryRetention, writeHealth: WriteHealth = WriteHealth()
    ) {
        self.historyRetention = historyRetention
        self.writeHealth = writeHealth
        self.store = store
        self.policy = policy
        self.limits = limits
        self.clock = clock
        self.secrets = secrets ?? TokenSecrets(store: store)
        self.changes = changes
        self.devices = devices ?? DeviceTracker(store: store)
        self.schemas = SchemaService(store: store, limits: limits, clock: clock, writeHealth: writeHealth)
        let zones = ZoneAccess(shares: store, policy: policy)
        self.zones = zones
        self.subscriptions = SubscriptionService(
            store: store, policy: policy, limits: limits, clock: clock, changes: changes, writeHealth: writeHealth)
        self.doctor = DoctorService(store: store, schemas: schemas)
        self.history = HistoryService(
            store: store, limits: limits, clock: clock, changes: changes, writeHealth: writeHealth, historyRetention: historyRetention)
        self.assets = AssetService(store: store, zones: zones, limits: limits, clock: clock, writeHealth: writeHealth, history: history)
        self.reconciliation = ReconciliationService(store: store, zones: zones, clock: clock, writeHealth: writeHealth)
        self.verification = VerificationService(
            store: store, policy: policy, devices: self.devices, clock: clock, writeHealth: writeHealth)
    }

    // MARK: - Zones

    /// `zones/list`.
    public func listZones(caller: Caller, scope: DatabaseScope, logger: Logger) async throws -> [ZoneSummary] {
        let database = try policy.database(for: caller, scope: scope, access: .read)
        if scope == .shared { return try await sharedZoneSummaries(caller: caller, logger: logger) }
        return try await summaries(store.zones(in: database, logger: logger), in: database, logger: logger)
    }

    /// `zones/lookup`.
    public func lookupZones(caller: Caller, scope: DatabaseScope, request: ZonesLookupRequest, logger: Logger) async throws -> [ZoneLookupResult] {
        let database = try policy.database(for: caller, scope: scope, access: .read)
        try checkCount(request.zones.count, path: "zones")
        if scope == .shared {
            let shared = try await sharedZoneSummaries(caller: caller, logger: logger)
            return request.zones.map { zoneID in
                if let zone = shared.first(where: { $0.state.zoneID == zoneID }) {
                    return .found(zone)
                }
                return .notFound(zoneID)
            }
        }
        var names: [String] = []
        for zoneID in request.zones {
            if let name = try? policy.zoneName(zoneID, in: database) { names.append(name) }
        }
        let found = scope == .shared ? [:] : try await store.zones(named: names, in: database, logger: logger)
        let summaries = Dictionary(
            uniqueKeysWithValues: try await summaries(Array(found.values), in: database, logger: logger).map { ($0.state.zoneID.zoneName, $0) }
        )
        return request.zones.map { zoneID in
            if let name = try? policy.zoneName(zoneID, in: database), let zone = summaries[name] { return .found(zone) }
            return .notFound(ZoneID(zoneName: zoneID.zoneName, ownerRecordName: zoneID.ownerRecordName ?? database.ownerRecordName))
        }
    }

    /// `zones/modify`: create and delete custom zones in the private database.
    public func modifyZones(caller: Caller, scope: DatabaseScope, request: ZonesModifyRequest, logger: Logger) async throws
        -> [ZoneModificationResult]
    {
        let database = try policy.database(for: caller, scope: scope, access: .write)
        guard scope == .private else {
            throw CumulusError(.badRequest, "zones can be created and deleted only in the private database, not the \(scope.rawValue) database")
        }
        try checkCount(request.operations.count, path: "operations")
        var operations: [ZoneOperation] = []
        for (index, operation) in request.operations.enumerated() {
            let path = "operations[\(index)].zone.zoneID.zoneName"
            if operation.zoneID.isDefaultZone {
                throw CumulusError(.badRequest, "\(path): the default zone always exists and cannot be created or deleted")
            }
            try NameRules.checkZoneName(operation.zoneID.zoneName, path: path, limits: limits)
            let name = try policy.zoneName(operation.zoneID, in: database)
            operations.append(ZoneOperation(operationType: operation.operationType, zoneID: ZoneID(zoneName: name)))
        }
        let results = try await mapStoreErrors {
            try await store.modifyZones(
                operations, in: database, timestamp: clock.milliseconds(), maximumZones: limits.maximumZones, logger: logger)
        }
        changes?.changed([ChangeSignal.key(database)])
        return results
    }

    // MARK: - Records

    /// `records/lookup`.
    public func lookupRecords(caller: Caller, scope: DatabaseScope, request: RecordsLookupRequest, logger: Logger) async throws
        -> RecordsLookupResponse
    {
        try checkCount(request.records.count, path: "records")
        let (database, zoneName, access) = try await zone(request.zoneID, caller: caller, scope: scope, access: .read, logger: logger)
        let found = try await mapStoreErrors {
            try await store.records(named: request.records.map(\.recordName), zoneName: zoneName, in: database, access: access, logger: logger)
        }
        let results: [RecordLookupResult] = request.records.map { entry in
            guard let record = found[entry.recordName] else { return .notFound(recordName: entry.recordName) }
            return .found(record, desiredKeys: (entry.desiredKeys ?? request.desiredKeys).map(Set.init))
        }
        return RecordsLookupResponse(
            results: results, shares: try await shareStates(for: Array(found.values), database: database, zoneName: zoneName, logger: logger))
    }

    /// `records/modify`.
    public func modifyRecords(caller: Caller, scope: DatabaseScope, request: RecordsModifyRequest, logger: Logger) async throws
        -> RecordsModifyResponse
    {
        try checkCount(request.operations.count, path: "operations")
        let (database, zoneName, access) = try await zone(request.zoneID, caller: caller, scope: scope, access: .write, logger: logger)
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
        let shareChanges = scope == .private ? try await shareChanges(for: request, modifications: modifications, caller: caller, logger: logger) : []
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
            keepsHistory: keepsHistory
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
            shares: try await shareStates(for: saved, database: database, zoneName: zoneName, logger: logger)
        )
    }

    /// ``ZoneAccess/zone(_:caller:scope:access:logger:)``.
    func zone(_ zoneID: ZoneID?, caller: Caller, scope: DatabaseScope, access: DatabaseAccess, logger: Logger) async throws
        -> (DatabaseRef, String, ParticipantAccess?)
    {
        try await zones.zone(zoneID, caller: caller, scope: scope, access: access, logger: logger)
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

    func checkCount(_ count: Int, path: String) throws(CumulusError) {
        try limits.checkCount(count, path: path)
    }

    /// ``CumulusCore/mapStoreErrors(writing:_:)``; a write's outcome also tells ``writeHealth`` whether the store writes.
    func mapStoreErrors<T>(writing: Bool = false, _ body: () async throws -> T) async throws -> T {
        try await writeHealth.mapStoreErrors(writing: writing, clock: clock, body)
    }

    /// Commits a write of the store's probe row: clears ``writeHealth`` when it commits, marks it when it cannot.
    public func probeWrite(logger: Logger) async throws {
        try await mapStoreErrors(writing: true) { try await store.probeWrite(at: clock.milliseconds(), logger: logger) }
    }
}

/// Seconds a client is told to wait when the server's storage is full.
let storageFullRetryAfter = 30

/// Runs a store call, translating its ``StoreError``s into the domain's ``CumulusError``s.
///
/// - Parameter writing: The call writes. The store may have committed before it became unavailable (the connection
///   lost as the commit's answer came back), so the answer says that the outcome is unknown and that sending the write
///   again is safe, which change tags make it.
func mapStoreErrors<T>(writing: Bool = false, _ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as StoreError {
        switch error.code {
        case .zoneNotFound: throw CumulusError(.zoneNotFound, error.message)
        case .notFound: throw CumulusError(.notFound, error.message)
        case .duplicate: throw CumulusError(.exists, error.message)
        case .invalidValue: throw CumulusError(.badRequest, error.message)
        case .unavailable where writing:
            throw CumulusError(
                .unavailable,
                "the store did not answer; whether this write was applied is unknown: send it again (change tags make that safe)",
                retryAfter: 1, underlying: error)
        case .unavailable: throw CumulusError(.unavailable, "the store is busy; retry", retryAfter: 1, underlying: error)
        case .storageFull:
            // Nothing was written, and space comes back only when an operator acts: clients wait longer between tries.
            throw CumulusError(
                .unavailable, "the server's storage is full: nothing of this request was written; retry later",
                retryAfter: storageFullRetryAfter, underlying: error)
        case .cannotWrite:
            throw CumulusError(
                .unavailable, "the server's storage cannot be written: nothing of this request was written; retry later",
                retryAfter: storageFullRetryAfter, underlying: error)
        default: throw CumulusError(.internalError, "internal error", underlying: error)
        }
    }
}
