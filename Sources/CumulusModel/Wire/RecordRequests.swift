/// A change to a field that may be left alone, set, or cleared.
public enum FieldPatch<Value: Sendable & Hashable>: Sendable, Hashable {
    case unchanged
    case set(Value)
    case clear
}

/// The seven `operationType`s of `records/modify`.
public enum RecordOperationType: String, Sendable, Hashable, CaseIterable {
    case create
    case update
    case forceUpdate
    case replace
    case forceReplace
    case delete
    case forceDelete

    /// Whether the operation deletes.
    public var isDelete: Bool { self == .delete || self == .forceDelete }
    /// Whether the operation checks `recordChangeTag`.
    public var checksChangeTag: Bool { self == .update || self == .replace || self == .delete }
    /// Whether the operation creates a missing record.
    public var createsMissing: Bool { self == .create || self == .forceUpdate || self == .forceReplace }
    /// Whether fields not sent are kept (merge) rather than cleared.
    public var merges: Bool { self == .update || self == .forceUpdate }

    /// Reads an operation type, ignoring case.
    public init?(wire: String) {
        // As CloudKit clients write it, the common case, without case folding.
        if let exact = Self(rawValue: wire) {
            self = exact
            return
        }
        let lowered = wire.lowercased()
        guard let match = Self.allCases.first(where: { $0.rawValue.lowercased() == lowered }) else { return nil }
        self = match
    }
}

/// The record dictionary of a `records/modify` operation.
public struct RecordDraft: Sendable, Hashable {
    /// The record name; `nil` lets the server pick a UUID on create.
    public var recordName: String?
    public var recordType: String?
    public var recordChangeTag: String?
    /// Fields sent; a `nil` value clears the field.
    public var fields: [String: FieldValue?]
    /// The fields whose values were sent without `type`, so typed by their JSON shape: the server reads them again as
    /// their schema's type where that differs (``FieldValue/converted(to:)``).
    public var untypedFields: Set<String>
    /// The parent record name.
    public var parent: FieldPatch<String>
    /// Ask the server to mint a short GUID for sharing.
    public var createShortGUID: Bool
    /// Keys the record dictionary carried that the foundation does not interpret (sharing keys, for example).
    public var otherKeys: [String: JSONValue]

    /// Creates a draft.
    public init(
        recordName: String? = nil, recordType: String? = nil, recordChangeTag: String? = nil,
        fields: [String: FieldValue?] = [:], untypedFields: Set<String> = [], parent: FieldPatch<String> = .unchanged,
        createShortGUID: Bool = false, otherKeys: [String: JSONValue] = [:]
    ) {
        self.recordName = recordName
        self.recordType = recordType
        self.recordChangeTag = recordChangeTag
        self.fields = fields
        self.untypedFields = untypedFields
        self.parent = parent
        self.createShortGUID = createShortGUID
        self.otherKeys = otherKeys
    }

    static let interpretedKeys: Set<String> = [
        "recordName", "recordType", "recordChangeTag", "fields", "parent", "createShortGUID",
        // Response-only keys a client may echo back; ignored.
        "created", "modified", "deleted", "zoneID", "shortGUID", "share",
    ]

    /// Reads a record dictionary.
    public init(wire object: WireObject) throws(WireFormatError) {
        let recordName = try object.string("recordName")
        let recordType = try object.string("recordType")
        let recordChangeTag = try object.string("recordChangeTag")
        var fields: [String: FieldValue?] = [:]
        var untypedFields = Set<String>()
        if let fieldsObject = try object.object("fields") {
            fields.reserveCapacity(fieldsObject.members.count)
            for (name, field) in fieldsObject.members {
                if field.isNull {
                    fields[name] = .some(nil)
                } else {
                    fields[name] = .some(try FieldValue.read(field: field, path: fieldsObject.path(name)))
                    if !FieldValue.sendsType(field) { untypedFields.insert(name) }
                }
            }
        }
        try self.init(
            recordName: recordName, recordType: recordType, recordChangeTag: recordChangeTag, fields: fields, untypedFields: untypedFields,
            rest: object)
    }

    /// Reads a record dictionary from a scanner, by the rules of ``init(wire:)``; any error means only that the
    /// caller should read the body as a tree (see ``RecordsModifyRequest/init(scanning:maximumDepth:maximumValues:)``).
    init(scanning scanner: inout JSONScanner) throws {
        var recordName: String?
        var recordType: String?
        var recordChangeTag: String?
        var fields: [String: FieldValue?] = [:]
        var untypedFields = Set<String>()
        // The rarely sent keys, read as they are in the tree, by the tree's rules.
        var rest: [String: JSONValue] = [:]
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            switch key {
            case "recordName": recordName = try scanner.readNull() ? nil : scanner.readString()
            case "recordType": recordType = try scanner.readNull() ? nil : scanner.readString()
            case "recordChangeTag": recordChangeTag = try scanner.readNull() ? nil : scanner.readString()
            case "fields":
                // A repeated key keeps its last value, as in the tree.
                fields = [:]
                untypedFields = []
                guard try !scanner.readNull() else { continue }
                try scanner.beginObject()
                while let name = try scanner.nextKey() {
                    if try scanner.readNull() {
                        fields[name] = .some(nil)
                        untypedFields.remove(name)
                        continue
                    }
                    var sentType = false
                    fields[name] = .some(try FieldValue.read(scanning: &scanner, path: "", sentType: &sentType))
                    if sentType { untypedFields.remove(name) } else { untypedFields.insert(name) }
                }
            default:
                rest[key] = try scanner.readValue()
            }
        }
        try self.init(
            recordName: recordName, recordType: recordType, recordChangeTag: recordChangeTag, fields: fields, untypedFields: untypedFields,
            rest: WireObject(.object(rest), path: "")
        )
    }

    /// The keys after the record's names and fields, read from the record dictionary `object`.
    private init(
        recordName: String?, recordType: String?, recordChangeTag: String?, fields: [String: FieldValue?], untypedFields: Set<String>,
        rest object: WireObject
    ) throws(WireFormatError) {
        self.recordName = recordName
        self.recordType = recordType
        self.recordChangeTag = recordChangeTag
        self.fields = fields
        self.untypedFields = untypedFields
        if object.members["parent"] == nil {
            parent = .unchanged
        } else if let parentObject = try object.object("parent") {
            parent = .set(try parentObject.requiredString("recordName"))
        } else {
            parent = .clear
        }
        createShortGUID = try object.bool("createShortGUID") ?? false
        otherKeys = object.members.filter { !Self.interpretedKeys.contains($0.key) }
    }
}

extension RecordDraft {
    /// Writes the record dictionary: the names, the fields sent (a cleared one as `null`), the parent, then the keys
    /// the foundation does not interpret (a share's), in name order.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("recordName", recordName)
        writer.member("recordType", recordType)
        writer.member("recordChangeTag", recordChangeTag)
        writer.key("fields")
        writer.beginObject()
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
            writer.key(name)
            if let value { writer.field(value) } else { writer.null() }
        }
        writer.endObject()
        switch parent {
        case .unchanged:
            break
        case .set(let name):
            writer.key("parent")
            writer.recordNameObject(name)
        case .clear:
            writer.key("parent")
            writer.null()
        }
        if createShortGUID { writer.member("createShortGUID", true) }
        for (key, value) in otherKeys.sorted(by: { $0.key < $1.key }) {
            writer.key(key)
            writer.write(value)
        }
        writer.endObject()
    }
}

/// One operation of `records/modify`.
public struct RecordOperation: Sendable, Hashable {
    public var operationType: RecordOperationType
    public var record: RecordDraft
    /// Per-operation `desiredKeys`, overriding the request's.
    public var desiredKeys: [String]?

    /// Creates an operation.
    public init(operationType: RecordOperationType, record: RecordDraft, desiredKeys: [String]? = nil) {
        self.operationType = operationType
        self.record = record
        self.desiredKeys = desiredKeys
    }
}

/// The body of `records/modify`.
public struct RecordsModifyRequest: Sendable, Hashable {
    public var operations: [RecordOperation]
    public var zoneID: ZoneID?
    /// `nil` means the default: atomic in custom zones.
    public var atomic: Bool?
    public var desiredKeys: [String]?
    public var numbersAsStrings: Bool

    public init(
        operations: [RecordOperation], zoneID: ZoneID? = nil, atomic: Bool? = nil, desiredKeys: [String]? = nil, numbersAsStrings: Bool = false
    ) {
        self.operations = operations
        self.zoneID = zoneID
        self.atomic = atomic
        self.desiredKeys = desiredKeys
        self.numbersAsStrings = numbersAsStrings
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("zoneID", zoneID)
        writer.member("atomic", atomic)
        writer.array("operations", operations) { writer, operation in
            writer.beginObject()
            writer.key("operationType")
            writer.string(operation.operationType.rawValue)
            writer.key("record")
            operation.record.write(to: &writer)
            writer.member("desiredKeys", strings: operation.desiredKeys)
            writer.endObject()
        }
        writer.member("desiredKeys", strings: desiredKeys)
        if numbersAsStrings { writer.member("numbersAsStrings", true) }
        writer.endObject()
    }

    /// Reads the request body.
    public init(wire object: WireObject) throws(WireFormatError) {
        guard let operationValues = try object.array("operations") else {
            throw WireFormatError(path: object.path("operations"), message: "is required")
        }
        var operations: [RecordOperation] = []
        operations.reserveCapacity(operationValues.count)
        for (index, value) in operationValues.enumerated() {
            let operation = try WireObject(value, path: "\(object.path("operations"))[\(index)]")
            let typeName = try operation.requiredString("operationType")
            guard let type = RecordOperationType(wire: typeName) else {
                throw WireFormatError(
                    path: operation.path("operationType"),
                    message:
                        "unknown operation type \(typeName); expected one of \(RecordOperationType.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            guard let recordObject = try operation.object("record") else {
                throw WireFormatError(path: operation.path("record"), message: "is required")
            }
            operations.append(
                RecordOperation(
                    operationType: type, record: try RecordDraft(wire: recordObject), desiredKeys: try operation.stringArray("desiredKeys")
                )
            )
        }
        try self.init(operations: operations, rest: object)
    }

    /// Reads a request body straight from its bytes, without a ``JSONValue`` tree of its records: the batched write's
    /// hot path, where building the tree and then reading it cost as much as everything else in reading the body.
    ///
    /// It reads by the rules of ``init(wire:)``, within the same limits, counted the same way, and answers `nil` for
    /// any body it does not read to its end: bad syntax, a limit passed, a value of a kind it does not expect. The
    /// caller then reads that body as a tree, which names what is wrong, so the scan decides no error itself, and a body
    /// it reads makes the request the tree would.
    public init?(scanning bytes: some Collection<UInt8>, maximumDepth: Int, maximumValues: Int) {
        do {
            self = try JSONScanner.scan(bytes, maximumDepth: maximumDepth, maximumValues: maximumValues) { scanner in
                try Self(scanning: &scanner)
            }
        } catch {
            return nil
        }
    }

    private init(scanning scanner: inout JSONScanner) throws {
        var operations: [RecordOperation]?
        var rest: [String: JSONValue] = [:]
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            guard key == "operations" else {
                rest[key] = try scanner.readValue()
                continue
            }
            var scanned: [RecordOperation] = []
            try scanner.beginArray()
            while try scanner.nextElement() {
                scanned.append(try Self.operation(scanning: &scanner))
            }
            operations = scanned
        }
        guard let operations else { throw ScanStopped() }
        try self.init(operations: operations, rest: WireObject(.object(rest), path: ""))
    }

    private static func operation(scanning scanner: inout JSONScanner) throws -> RecordOperation {
        var typeName: String?
        var record: RecordDraft?
        var desiredKeys: [String]?
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            switch key {
            case "operationType": typeName = try scanner.readNull() ? nil : scanner.readString()
            case "record": record = try RecordDraft(scanning: &scanner)
            case "desiredKeys":
                desiredKeys = nil
                guard try !scanner.readNull() else { continue }
                var keys: [String] = []
                try scanner.beginArray()
                while try scanner.nextElement() { keys.append(try scanner.readString()) }
                desiredKeys = keys
            default: try scanner.skipValue()
            }
        }
        guard let typeName, let type = RecordOperationType(wire: typeName), let record else { throw ScanStopped() }
        return RecordOperation(operationType: type, record: record, desiredKeys: desiredKeys)
    }

    /// The scan met what only the tree reads, or names.
    private struct ScanStopped: Error {}

    /// The keys after the operations, read from the body `object`.
    private init(operations: [RecordOperation], rest object: WireObject) throws(WireFormatError) {
        self.operations = operations
        zoneID = try object.object("zoneID").map { (zone) throws(WireFormatError) in try ZoneID(wire: zone) }
        atomic = try object.bool("atomic")
        desiredKeys = try object.stringArray("desiredKeys")
        numbersAsStrings = try object.bool("numbersAsStrings") ?? false
    }
}

/// The body of `records/lookup`.
public struct RecordsLookupRequest: Sendable, Hashable {
    /// One entry per record asked for.
    public struct Entry: Sendable, Hashable {
        public var recordName: String
        public var desiredKeys: [String]?

        public init(recordName: String, desiredKeys: [String]? = nil) {
            self.recordName = recordName
            self.desiredKeys = desiredKeys
        }
    }

    public var records: [Entry]
    public var zoneID: ZoneID?
    public var desiredKeys: [String]?
    public var numbersAsStrings: Bool

    public init(records: [Entry], zoneID: ZoneID? = nil, desiredKeys: [String]? = nil, numbersAsStrings: Bool = false) {
        self.records = records
        self.zoneID = zoneID
        self.desiredKeys = desiredKeys
        self.numbersAsStrings = numbersAsStrings
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("zoneID", zoneID)
        writer.array("records", records) { writer, entry in
            writer.beginObject()
            writer.key("recordName")
            writer.string(entry.recordName)
            writer.member("desiredKeys", strings: entry.desiredKeys)
            writer.endObject()
        }
        writer.member("desiredKeys", strings: desiredKeys)
        if numbersAsStrings { writer.member("numbersAsStrings", true) }
        writer.endObject()
    }

    /// Reads the request body.
    public init(wire object: WireObject) throws(WireFormatError) {
        guard let values = try object.array("records") else {
            throw WireFormatError(path: object.path("records"), message: "is required")
        }
        records = []
        records.reserveCapacity(values.count)
        for (index, value) in values.enumerated() {
            let entry = try WireObject(value, path: "\(object.path("records"))[\(index)]")
            records.append(Entry(recordName: try entry.requiredString("recordName"), desiredKeys: try entry.stringArray("desiredKeys")))
        }
        zoneID = try object.object("zoneID").map { (zone) throws(WireFormatError) in try ZoneID(wire: zone) }
        desiredKeys = try object.stringArray("desiredKeys")
        numbersAsStrings = try object.bool("numbersAsStrings") ?? false
    }
}

/// One operation of `zones/modify`.
public struct ZoneOperation: Sendable, Hashable {
    public enum OperationType: String, Sendable, Hashable {
        case create
        case delete
    }

    public var operationType: OperationType
    public var zoneID: ZoneID

    public init(operationType: OperationType, zoneID: ZoneID) {
        self.operationType = operationType
        self.zoneID = zoneID
    }
}

/// The body of `zones/modify`.
public struct ZonesModifyRequest: Sendable, Hashable {
    public var operations: [ZoneOperation]

    /// Reads the request body.
    public init(wire object: WireObject) throws(WireFormatError) {
        guard let values = try object.array("operations") else {
            throw WireFormatError(path: object.path("operations"), message: "is required")
        }
        operations = []
        for (index, value) in values.enumerated() {
            let operation = try WireObject(value, path: "\(object.path("operations"))[\(index)]")
            let typeName = try operation.requiredString("operationType")
            guard let type = ZoneOperation.OperationType(rawValue: typeName.lowercased()) else {
                throw WireFormatError(path: operation.path("operationType"), message: "expected create or delete, found \(typeName)")
            }
            // Clients send {zone: {zoneID: …}}; accept a bare {zoneID: …} as well.
            var zoneObject = operation
            if let nested = try operation.object("zone") { zoneObject = nested }
            guard let zoneIDObject = try zoneObject.object("zoneID") else {
                throw WireFormatError(path: zoneObject.path("zoneID"), message: "is required")
            }
            guard zoneIDObject["zoneName"] != nil else {
                throw WireFormatError(path: zoneIDObject.path("zoneName"), message: "is required")
            }
            operations.append(ZoneOperation(operationType: type, zoneID: try ZoneID(wire: zoneIDObject)))
        }
    }
}

/// The body of `zones/lookup`.
public struct ZonesLookupRequest: Sendable, Hashable {
    public var zones: [ZoneID]

    /// Reads the request body.
    public init(wire object: WireObject) throws(WireFormatError) {
        guard let values = try object.array("zones") else {
            throw WireFormatError(path: object.path("zones"), message: "is required")
        }
        zones = []
        for (index, value) in values.enumerated() {
            let zone = try WireObject(value, path: "\(object.path("zones"))[\(index)]")
            // Accept {zoneName} and {zoneID: {zoneName}}.
            var zoneIDObject = zone
            if let nested = try zone.object("zoneID") { zoneIDObject = nested }
            guard zoneIDObject["zoneName"] != nil else {
                throw WireFormatError(path: zoneIDObject.path("zoneName"), message: "is required")
            }
            zones.append(try ZoneID(wire: zoneIDObject))
        }
    }
}

extension RecordsModifyRequest: WireMessage {}
extension RecordsLookupRequest: WireMessage {}
