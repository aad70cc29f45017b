/// The type of a schema field: a scalar ``FieldType`` or a list of one.
///
/// Written as CloudKit's schema language writes it: `STRING`, `ASSET`, `LIST<INT64>`.
public struct SchemaFieldType: Sendable, Hashable, CustomStringConvertible {
    public var base: FieldType
    public var isList: Bool

    public init(_ base: FieldType, isList: Bool = false) {
        self.base = base
        self.isList = isList
    }

    /// The type a value has, or `nil` for an empty list of no type (CloudKit's `UNKNOWN_LIST`), which fits any list.
    public init?(of value: FieldValue) {
        switch value {
        case .list(let elementType?, _): self.init(elementType, isList: true)
        case .list(nil, _): return nil
        default:
            guard let type = value.type else { return nil }
            self.init(type)
        }
    }

    /// Reads a type written in the schema language (`LIST<STRING>`, `ASSET`) or as a wire tag (`STRING_LIST`,
    /// `ASSETID`), in any case.
    public init?(parsing text: String) {
        var name = text.uppercased().filter { !$0.isWhitespace }
        var isList = false
        if name.hasPrefix("LIST<"), name.hasSuffix(">") {
            name = String(name.dropFirst(5).dropLast())
            isList = true
        } else if name.hasSuffix("_LIST") {
            name = String(name.dropLast(5))
            isList = true
        }
        if name == "ASSET" { name = FieldType.asset.rawValue }
        guard let base = FieldType(rawValue: name) else { return nil }
        self.init(base, isList: isList)
    }

    /// The schema language's spelling.
    public var description: String {
        let name = base == .asset ? "ASSET" : base.rawValue
        return isList ? "LIST<\(name)>" : name
    }
}

/// One field of a record type: its type, and the indexes queries may use.
public struct FieldSchema: Sendable, Hashable {
    public var name: String
    public var type: SchemaFieldType
    /// Whether queries may filter on the field (CloudKit's `QUERYABLE` index).
    public var isQueryable: Bool
    /// Whether queries may sort on the field (CloudKit's `SORTABLE` index).
    public var isSortable: Bool

    public init(name: String, type: SchemaFieldType, isQueryable: Bool = false, isSortable: Bool = false) {
        self.name = name
        self.type = type
        self.isQueryable = isQueryable
        self.isSortable = isSortable
    }
}

/// A record type and its fields.
public struct RecordTypeSchema: Sendable, Hashable {
    public var name: String
    public var fields: [String: FieldSchema]

    public init(name: String, fields: [FieldSchema] = []) {
        self.name = name
        self.fields = Dictionary(fields.map { ($0.name, $0) }) { first, _ in first }
    }
}

/// The schema of one container environment: its record types, their fields and indexes.
///
/// In `development` it grows from writes (a field's type is fixed by its first write); in `production` it is
/// declared, and only grows by a deploy. It never shrinks, and a field never changes type, so a copy of it that
/// holds a record type, a field or an index is never wrong about it; only absences need a fresh look.
public struct ContainerSchema: Sendable, Hashable {
    public var recordTypes: [String: RecordTypeSchema]

    public init(recordTypes: [RecordTypeSchema] = []) {
        self.recordTypes = Dictionary(recordTypes.map { ($0.name, $0) }) { first, _ in first }
    }

    public subscript(recordType: String) -> RecordTypeSchema? { recordTypes[recordType] }

    /// The field, if the schema has it.
    public func field(_ name: String, of recordType: String) -> FieldSchema? { recordTypes[recordType]?.fields[name] }

    /// How many fields carry an index (queryable or sortable), over every record type.
    public var indexedFieldCount: Int {
        recordTypes.values.reduce(0) { $0 + $1.fields.values.count { $0.isQueryable || $0.isSortable } }
    }

    /// Adds what `other` has and this schema lacks: record types, fields, and index flags. A field already here keeps
    /// its type.
    public mutating func formUnion(_ other: ContainerSchema) {
        for (name, type) in other.recordTypes {
            var merged = recordTypes[name] ?? RecordTypeSchema(name: name)
            for (fieldName, field) in type.fields {
                if var existing = merged.fields[fieldName] {
                    existing.isQueryable = existing.isQueryable || field.isQueryable
                    existing.isSortable = existing.isSortable || field.isSortable
                    merged.fields[fieldName] = existing
                } else {
                    merged.fields[fieldName] = field
                }
            }
            recordTypes[name] = merged
        }
    }

    /// Whether everything in `other` is here, with the same types and at least its indexes.
    public func contains(_ other: ContainerSchema) -> Bool {
        other.recordTypes.allSatisfy { name, type in
            guard let mine = recordTypes[name] else { return false }
            return type.fields.allSatisfy { fieldName, field in
                guard let existing = mine.fields[fieldName] else { return false }
                return existing.type == field.type && (existing.isQueryable || !field.isQueryable) && (existing.isSortable || !field.isSortable)
            }
        }
    }
}

/// What deploying a schema over another would do: the additions, and the changes a deploy refuses.
public struct SchemaDiff: Sendable, Hashable {
    /// Record types, fields and indexes the deploy adds, one line each (`add field Cost.amount DOUBLE`).
    public var additions: [String]
    /// Changes a deploy refuses, one line each with the reason (`field Cost.amount: type DOUBLE cannot change to STRING`).
    public var problems: [String]

    /// Compares a declared schema with the current one: fields, types and indexes may be added; nothing may change
    /// type or be removed (records already written depend on them).
    public init(from current: ContainerSchema, to declared: ContainerSchema) {
        var additions: [String] = []
        var problems: [String] = []
        for name in current.recordTypes.keys.sorted() where declared.recordTypes[name] == nil {
            problems.append("record type \(name): missing from the new schema; record types cannot be removed")
        }
        for (name, type) in declared.recordTypes.sorted(by: { $0.key < $1.key }) {
            let existing = current.recordTypes[name]
            if existing == nil { additions.append("add record type \(name)") }
            for fieldName in (existing?.fields.keys.sorted() ?? []) where type.fields[fieldName] == nil {
                problems.append("field \(name).\(fieldName): missing from the new schema; fields cannot be removed")
            }
            for (fieldName, field) in type.fields.sorted(by: { $0.key < $1.key }) {
                let path = "\(name).\(fieldName)"
                guard let old = existing?.fields[fieldName] else {
                    additions.append("add field \(path) \(field.type)\(Self.flags(field.isQueryable, field.isSortable))")
                    continue
                }
                if old.type != field.type {
                    problems.append("field \(path): type \(old.type) cannot change to \(field.type)")
                }
                if old.isQueryable && !field.isQueryable { problems.append("field \(path): QUERYABLE cannot be removed") }
                if old.isSortable && !field.isSortable { problems.append("field \(path): SORTABLE cannot be removed") }
                let addsQueryable = field.isQueryable && !old.isQueryable
                let addsSortable = field.isSortable && !old.isSortable
                if old.type == field.type, addsQueryable || addsSortable {
                    additions.append("add index \(path)\(Self.flags(addsQueryable, addsSortable))")
                }
            }
        }
        self.additions = additions
        self.problems = problems
    }

    private static func flags(_ queryable: Bool, _ sortable: Bool) -> String {
        (queryable ? " QUERYABLE" : "") + (sortable ? " SORTABLE" : "")
    }
}
