public import CumulusModel

/// One validated operation of a `records/modify` request, ready for a store.
public struct RecordModification: Sendable, Hashable {
    public var operationType: RecordOperationType
    /// The record name, already chosen (the domain picks a UUID when the client sent none).
    public var recordName: String
    public var recordType: String?
    public var recordChangeTag: String?
    /// Fields sent; a `nil` value clears the field.
    public var fields: [String: FieldValue?]
    /// The fields sent without `type` (see ``RecordDraft/untypedFields``).
    public var untypedFields: Set<String>
    public var parent: FieldPatch<String>
    public var createShortGUID: Bool
    /// The canonical encoding of the sent fields (`nil` values left out), when the caller has made it already (the
    /// request's size check does): the planner uses it instead of encoding again when the stored fields will be
    /// exactly the sent ones (a create, a replacing update).
    public var sentFieldsJSON: [UInt8]?

    public init(
        operationType: RecordOperationType, recordName: String, recordType: String? = nil, recordChangeTag: String? = nil,
        fields: [String: FieldValue?] = [:], untypedFields: Set<String> = [], parent: FieldPatch<String> = .unchanged,
        createShortGUID: Bool = false, sentFieldsJSON: [UInt8]? = nil
    ) {
        self.untypedFields = untypedFields
        self.sentFieldsJSON = sentFieldsJSON
        self.operationType = operationType
        self.recordName = recordName
        self.recordType = recordType
        self.recordChangeTag = recordChangeTag
        self.fields = fields
        self.parent = parent
        self.createShortGUID = createShortGUID
    }
}

/// A `records/modify` request for one zone, as a store receives it.
public struct RecordBatch: Sendable, Hashable {
    public var database: DatabaseRef
    public var zoneName: String
    /// All operations succeed or none is stored.
    public var atomic: Bool
    public var operations: [RecordModification]
    /// Who writes, from which device, and when (milliseconds since the epoch).
    public var author: String
    public var deviceID: String
    public var timestamp: Int64
    /// Largest canonical fields encoding a record may have, in bytes.
    public var maximumRecordSize: Int
    /// When set, only a record's creator may change or delete it (the public database's rule); the authorization
    /// policy decides when it applies.
    public var onlyCreatorMayModify: Bool
    /// Set when a participant writes through a share: the store checks every operation against it.
    public var access: ParticipantAccess?
    /// Share metadata saved or deleted along with `cloudkit.share` records of the batch (owner only).
    public var shareChanges: [ShareChange]
    /// Asset receipts each record of the batch holds, by record name: marked attached in the batch's transaction when
    /// that record is saved, so a crash cannot leave a saved record whose file the cleanup would delete.
    public var assetAttachments: [String: [AssetAttachment]]
    /// Share records a participant deleted from their shared database: they leave those shares, in the batch's
    /// transaction, after its operations.
    public var sharesLeft: [String]
    /// Whether the versions this batch replaces or deletes go to the zone's history (``RecordHistoryStore``), as the
    /// operator's retention asks.
    public var keepsHistory: Bool

    public init(
        database: DatabaseRef, zoneName: String, atomic: Bool, operations: [RecordModification], author: String, deviceID: String,
        timestamp: Int64, maximumRecordSize: Int = 1_000_000, onlyCreatorMayModify: Bool = false, access: ParticipantAccess? = nil,
        shareChanges: [ShareChange] = [], assetAttachments: [String: [AssetAttachment]] = [:], sharesLeft: [String] = [],
        keepsHistory: Bool = false
    ) {
        self.keepsHistory = keepsHistory
        self.database = database
        self.zoneName = zoneName
        self.atomic = atomic
        self.operations = operations
        self.author = author
        self.deviceID = deviceID
        self.timestamp = timestamp
        self.maximumRecordSize = maximumRecordSize
        self.onlyCreatorMayModify = onlyCreatorMayModify
        self.access = access
        self.shareChanges = shareChanges
        self.assetAttachments = assetAttachments
        self.sharesLeft = sharesLeft
    }

    /// The receipts to mark attached, given the batch's results: those of the records it saved.
    public func attachments(savedIn results: [RecordModificationResult]) -> [AssetAttachment] {
        guard !assetAttachments.isEmpty else { return [] }
        return results.flatMap { result -> [AssetAttachment] in
            if case .saved(let record) = result { return assetAttachments[record.header.recordName] ?? [] }
            return []
        }
    }

    /// Every record name the batch needs to read before it can be planned: its own records, their parents, and the
    /// targets of their `VALIDATE` references.
    public var namesToRead: Set<String> {
        var names = Set<String>()
        for operation in operations {
            names.insert(operation.recordName)
            if case .set(let parent) = operation.parent { names.insert(parent) }
            for case let value? in operation.fields.values {
                for reference in value.references where reference.action == .validate {
                    names.insert(reference.recordName)
                }
            }
        }
        return names
    }
}

/// Why one operation failed.
public struct RecordFailure: Error, Sendable, Hashable {
    public var recordName: String
    public var code: ServerErrorCode
    public var reason: String
    /// The server's current record, on `CONFLICT`, so the client can merge.
    public var serverRecord: StoredRecord?

    public init(recordName: String, code: ServerErrorCode, reason: String, serverRecord: StoredRecord? = nil) {
        self.recordName = recordName
        self.code = code
        self.reason = reason
        self.serverRecord = serverRecord
    }

    /// The failure of an operation that would have succeeded, in an atomic batch where another failed.
    public static func atomic(_ recordName: String) -> RecordFailure {
        RecordFailure(recordName: recordName, code: .atomicError, reason: "atomic batch failed because another operation failed")
    }
}

/// The outcome of one operation, in request order.
public enum RecordModificationResult: Sendable, Hashable {
    case saved(StoredRecord)
    case deleted(recordName: String)
    case failed(RecordFailure)
}

extension FieldValue {
    /// The references this value holds, itself or as list elements.
    public var references: [Reference] {
        switch self {
        case .reference(let reference): [reference]
        case .list(.reference, let values): values.compactMap { if case .reference(let reference) = $0 { reference } else { nil } }
        default: []
        }
    }
}
