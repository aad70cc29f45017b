public import CumulusModel
public import CumulusStore
public import Logging
import Synchronization

/// The schemas of container environments, as this instance last read them.
///
/// A schema only grows and a field never changes type, so whatever a cached copy holds is true for good; only an
/// absence may be out of date (another instance added it), and is looked up again before anything is refused.
final class SchemaCache: Sendable {
    private struct Key: Hashable {
        var container: String
        var environment: ContainerEnvironment
    }

    private let schemas = Mutex<[Key: ContainerSchema]>([:])

    func cached(_ container: String, _ environment: ContainerEnvironment) -> ContainerSchema? {
        schemas.withLock { $0[Key(container: container, environment: environment)] }
    }

    func remember(_ schema: ContainerSchema, _ container: String, _ environment: ContainerEnvironment) {
        schemas.withLock { $0[Key(container: container, environment: environment), default: ContainerSchema()].formUnion(schema) }
    }
}

/// A schema operation from a tool: what deploying a schema file would add, and what it would change that a deploy
/// refuses.
public struct SchemaDeployment: Sendable {
    public var diff: SchemaDiff
    /// Whether the schema was applied (never when ``SchemaDiff/problems`` is not empty, or for a diff alone).
    public var deployed: Bool
}

/// Container schemas: what tools read and deploy, the field indexes queries make, and the check of every write and query
/// against its environment's schema (development grows it, production refuses what it does not declare).
public struct SchemaService: Sendable, WriteHealthReporting {
    /// Schemas, and the stored records whose type an update leaves unsaid.
    let store: any SchemaStore & RecordZoneStore
    let limits: Limits
    let clock: WallClock
    let writeHealth: WriteHealth
    let schemas = SchemaCache()

    // MARK: - Tools

    /// The schema of a container environment.
    public func schema(container: String, environment: ContainerEnvironment, logger: Logger) async throws -> ContainerSchema {
        let schema = try await mapStoreErrors { try await store.schema(container: container, environment: environment, logger: logger) }
        schemas.remember(schema, container, environment)
        return schema
    }

    /// Compares `declared` with a container environment's schema and, unless `dryRun` or it changes or removes
    /// anything, adds what it declares. A deploy is how production's schema grows.
    public func deploy(_ declared: ContainerSchema, container: String, environment: ContainerEnvironment, dryRun: Bool, logger: Logger)
        async throws -> SchemaDeployment
    {
        for type in declared.recordTypes.values {
            try NameRules.checkIdentifier(type.name, kind: "record type", path: "schema", limits: limits)
            for field in type.fields.keys { try NameRules.checkIdentifier(field, kind: "field name", path: "schema.\(type.name)", limits: limits) }
        }
        let current = try await schema(container: container, environment: environment, logger: logger)
        let diff = SchemaDiff(from: current, to: declared)
        guard diff.problems.isEmpty, !dryRun else { return SchemaDeployment(diff: diff, deployed: false) }
        let after = try await mapStoreErrors {
            try await store.extendSchema(declared, container: container, environment: environment, logger: logger)
        }
        schemas.remember(after, container, environment)
        // Another deploy may have given a field another type between the comparison and now: the first one stands.
        guard after.contains(declared) else {
            return SchemaDeployment(diff: SchemaDiff(from: after, to: declared), deployed: false)
        }
        return SchemaDeployment(diff: diff, deployed: true)
    }

    // MARK: - Indexes

    /// The field indexes queries made, with the containers whose schemas keep them (`cumulus indexes list`).
    public func fieldIndexes(logger: Logger) async throws -> [FieldIndexState] {
        try await mapStoreErrors { try await store.fieldIndexes(logger: logger) }
    }

    /// Drops a field's index (`cumulus indexes drop`); a later query may make it again, within the budget.
    public func dropFieldIndex(field: String, logger: Logger) async throws {
        guard try await mapStoreErrors({ try await store.dropFieldIndex(field: field, logger: logger) }) else {
            throw CumulusError(.notFound, "field \(field) has no index")
        }
    }

    // MARK: - Writes

    /// Checks the fields each modification sends against the schema of its container environment, and refuses, one
    /// by one, those that break it: a field whose type differs from the schema's; in production also a record type or
    /// field the schema does not declare. In development what is new is added first, so the first write of a field
    /// fixes its type. A value sent without `type` is read as its field's type when the schema knows the field
    /// (``FieldValue/converted(to:)``), and `modifications` carry the value so read.
    ///
    /// - Returns: The refused operations, by index.
    func checkSchema(
        _ modifications: inout [RecordModification], database: DatabaseRef, zoneName: String, access: ParticipantAccess?, logger: Logger
    )
        async throws -> [Int: RecordFailure]
    {
        // The record type of each operation that sends fields; an update may leave it to the stored record.
        var untyped: [String] = []
        for modification in modifications where modification.recordType == nil && !modification.operationType.isDelete {
            if modification.fields.values.contains(where: { $0 != nil }) { untyped.append(modification.recordName) }
        }
        var storedTypes: [String: String] = [:]
        if !untyped.isEmpty {
            let stored = try await mapStoreErrors {
                try await store.records(named: untyped, zoneName: zoneName, in: database, access: access, logger: logger)
            }
            for (name, record) in stored { storedTypes[name] = record.header.recordType }
        }
        // A batch's records mostly share one shape (record type, field names and types, which of them came without
        // `type`): a record shaped as the one before it is checked with it, not again.
        var sent: [(index: Int, recordType: String, fields: [(String, SchemaFieldType)], sameAsBefore: Bool)] = []
        var wanted = ContainerSchema()
        for (index, modification) in modifications.enumerated() where !modification.operationType.isDelete {
            guard let recordType = modification.recordType ?? storedTypes[modification.recordName], recordType != ShareRecord.recordType else {
                continue
            }
            var fields: [(String, SchemaFieldType)] = []
            fields.reserveCapacity(modification.fields.count)
            for case (let name, let value?) in modification.fields {
                guard let type = SchemaFieldType(of: value) else { continue }
                fields.append((name, type))
            }
            if let before = sent.last, before.recordType == recordType, before.fields.elementsEqual(fields, by: { $0 == $1 }),
                modifications[before.index].untypedFields == modification.untypedFields
            {
                sent.append((index, recordType, fields, true))
                continue
            }
            sent.append((index, recordType, fields, false))
            var type = wanted.recordTypes[recordType] ?? RecordTypeSchema(name: recordType)
            for (name, fieldType) in fields where type.fields[name] == nil { type.fields[name] = FieldSchema(name: name, type: fieldType) }
            wanted.recordTypes[recordType] = type
        }
        guard !sent.isEmpty else { return [:] }

        let environment = database.environment
        var schema = try await currentSchema(database.container, environment, logger: logger)
        var isFull = false
        let additions = wanted.subtracting(schema)
        if !additions.recordTypes.isEmpty {
            var grown = schema
            grown.formUnion(additions)
            if environment == .development, grown.size <= limits.maximumSchemaSize {
                schema = try await mapStoreErrors {
                    try await store.extendSchema(additions, container: database.container, environment: environment, logger: logger)
                }
                schemas.remember(schema, database.container, environment)
            } else {
                // Production grows only by deploys; another instance's may be newer than this copy. In development,
                // made-up names in writes (anyone may sign up) must not grow the schema, and every instance's copy of
                // it, without end: past the limit, records that need more are refused.
                isFull = environment == .development
                schema = try await self.schema(container: database.container, environment: environment, logger: logger)
            }
        }

        var refusals: [Int: RecordFailure] = [:]
        let schemaName = "the \(environment.rawValue) schema"
        /// The first record of a run of like-shaped ones: its refusal, or the fields its untyped values were read as.
        var leader: (refusal: RecordFailure?, conversions: [(String, SchemaFieldType)]) = (nil, [])
        for (index, recordType, fields, sameAsBefore) in sent {
            let recordName = modifications[index].recordName
            if sameAsBefore {
                if var refusal = leader.refusal {
                    refusal.recordName = recordName
                    refusals[index] = refusal
                } else {
                    for (name, type) in leader.conversions {
                        if let refusal = convert(&modifications[index], field: name, to: type, recordType: recordType, schemaName: schemaName) {
                            refusals[index] = refusal
                            break
                        }
                    }
                }
                continue
            }
            leader = (nil, [])
            defer { leader.refusal = refusals[index] }
            if isFull, schema[recordType] == nil || fields.contains(where: { schema.field($0.0, of: recordType) == nil }) {
                refusals[index] = RecordFailure(
                    recordName: recordName, code: .quotaExceeded,
                    reason:
                        "fields: container \(database.container)'s development schema holds \(limits.maximumSchemaSize) record types and fields, its limit; this record adds more"
                )
                continue
            }
            guard let declared = schema[recordType] else {
                refusals[index] = RecordFailure(
                    recordName: recordName, code: .badRequest,
                    reason: "recordType: record type '\(recordType)' is not in \(schemaName); deploy a schema that declares it")
                continue
            }
            for (name, type) in fields.sorted(by: { $0.0 < $1.0 }) {
                guard let field = declared.fields[name] else {
                    refusals[index] = RecordFailure(
                        recordName: recordName, code: .badRequest,
                        reason:
                            "fields.\(name): field '\(name)' of record type '\(recordType)' is not in \(schemaName); deploy a schema that declares it"
                    )
                    break
                }
                guard field.type != type else { continue }
                if modifications[index].untypedFields.contains(name) {
                    leader.conversions.append((name, field.type))
                    if let refusal = convert(&modifications[index], field: name, to: field.type, recordType: recordType, schemaName: schemaName) {
                        refusals[index] = refusal
                        break
                    }
                    continue
                }
                refusals[index] = RecordFailure(
                    recordName: recordName, code: .badRequest,
                    reason:
                        "fields.\(name): field '\(name)' of record type '\(recordType)' is \(field.type) in \(schemaName); this record sends \(type). A field's type never changes: use a new field name"
                )
                break
            }
        }
        return refusals
    }

    /// Reads a field sent without `type` as the schema's `type`, in place; a refusal naming both types when its JSON
    /// does not read so.
    private func convert(
        _ modification: inout RecordModification, field name: String, to type: SchemaFieldType, recordType: String, schemaName: String
    ) -> RecordFailure? {
        guard case let value?? = modification.fields[name] else { return nil }
        guard let converted = value.converted(to: type) else {
            let shape = SchemaFieldType(of: value).map { "\($0)" } ?? "an empty list"
            return RecordFailure(
                recordName: modification.recordName, code: .badRequest,
                reason:
                    "fields.\(name): field '\(name)' of record type '\(recordType)' is \(type) in \(schemaName); this record sends a value without \"type\" that reads as \(shape), not as \(type). A field's type never changes: use a new field name"
            )
        }
        modification.fields[name] = .some(converted)
        // The canonical encoding made from the values as first read no longer holds.
        modification.sentFieldsJSON = nil
        return nil
    }

    // MARK: - Queries

    /// Checks a query's fields against the schema and answers whether the store may build indexes for them.
    ///
    /// In production every filtered field must be declared `QUERYABLE`, and every sorted one `SORTABLE`. In
    /// development a signed-in user's query in their private or shared database, or a server-to-server request, marks
    /// a field it needs (one some record has written) as indexed, up to ``Limits/maximumIndexedFieldsPerContainer``;
    /// past that limit such a query is refused. Anonymous and public-database queries never mark anything: they use
    /// the indexes there are.
    func checkQuerySchema(
        _ request: RecordsQueryRequest, recordType: String, caller: Caller, database: DatabaseRef, scope: DatabaseScope, logger: Logger
    )
        async throws -> Bool
    {
        guard recordType != ShareRecord.recordType else { return true }
        var needs: [(field: String, sortable: Bool, path: String)] = []
        for (index, filter) in request.filters.enumerated() {
            if case .field(let name) = filter.field { needs.append((name, false, "query.filterBy[\(index)].fieldName")) }
        }
        for (index, sort) in request.sorts.enumerated() {
            if case .field(let name) = sort.field { needs.append((name, true, "query.sortBy[\(index)].fieldName")) }
        }
        let environment = database.environment
        var schema = try await currentSchema(database.container, environment, logger: logger)
        func isIndexed(_ need: (field: String, sortable: Bool, path: String), in schema: ContainerSchema) -> Bool {
            guard let field = schema.field(need.field, of: recordType) else { return false }
            return need.sortable ? field.isSortable : field.isQueryable
        }
        let ownerSide: Bool
        if case .serverKey = caller.credential { ownerSide = true } else { ownerSide = caller.user != nil && scope != .public }
        // Another instance may have added what this copy lacks: look again before refusing (production) or marking
        // (development, the owner side). Other development queries use the indexes this copy knows.
        if (environment == .production || ownerSide) && (schema[recordType] == nil || !needs.allSatisfy({ isIndexed($0, in: schema) })) {
            schema = try await self.schema(container: database.container, environment: environment, logger: logger)
        }
        let missing = needs.filter { !isIndexed($0, in: schema) }

        if environment == .production {
            guard schema[recordType] != nil else {
                throw CumulusError(.badRequest, "query.recordType: record type '\(recordType)' is not in the production schema")
            }
            if let need = missing.first {
                throw CumulusError(
                    .badRequest,
                    "\(need.path): field '\(need.field)' of record type '\(recordType)' is not marked \(need.sortable ? "SORTABLE" : "QUERYABLE") in the production schema"
                )
            }
            return true
        }

        // Development: a field no record has written has no values to index; the query finds nothing by it.
        let markable = missing.filter { schema.field($0.field, of: recordType) != nil }
        guard !markable.isEmpty else { return missing.isEmpty }
        guard ownerSide else { return false }
        let newlyIndexed = Set(
            markable.filter { schema.field($0.field, of: recordType).map { !$0.isQueryable && !$0.isSortable } ?? false }.map(\.field))
        if schema.indexedFieldCount + newlyIndexed.count > limits.maximumIndexedFieldsPerContainer {
            let need = markable.first { newlyIndexed.contains($0.field) } ?? markable[0]
            throw CumulusError(
                .badRequest,
                "\(need.path): field '\(need.field)' of record type '\(recordType)' is not marked \(need.sortable ? "SORTABLE" : "QUERYABLE"), and container \(database.container) already has \(limits.maximumIndexedFieldsPerContainer) indexed fields, the most queries may add in development; declare the indexes the app needs in a schema and deploy it (docs/SCHEMA.md)"
            )
        }
        var additions = RecordTypeSchema(name: recordType)
        for need in markable {
            var field = additions.fields[need.field] ?? schema.field(need.field, of: recordType)!
            if need.sortable { field.isSortable = true } else { field.isQueryable = true }
            additions.fields[need.field] = field
        }
        let after = try await mapStoreErrors {
            try await store.extendSchema(
                ContainerSchema(recordTypes: [additions]), container: database.container, environment: environment, logger: logger)
        }
        schemas.remember(after, database.container, environment)
        return missing.count == markable.count
    }

    private func currentSchema(_ container: String, _ environment: ContainerEnvironment, logger: Logger) async throws -> ContainerSchema {
        if let cached = schemas.cached(container, environment) { return cached }
        return try await schema(container: container, environment: environment, logger: logger)
    }
}

extension ContainerSchema {
    /// How many record types and fields the schema holds.
    var size: Int { recordTypes.count + recordTypes.values.reduce(0) { $0 + $1.fields.count } }

    /// The record types and fields of this schema that `other` lacks, whatever their types.
    func subtracting(_ other: ContainerSchema) -> ContainerSchema {
        var remaining = ContainerSchema()
        for (name, type) in recordTypes {
            guard let theirs = other.recordTypes[name] else {
                remaining.recordTypes[name] = type
                continue
            }
            let fields = type.fields.filter { theirs.fields[$0.key] == nil }
            if !fields.isEmpty { remaining.recordTypes[name] = RecordTypeSchema(name: name, fields: Array(fields.values)) }
        }
        return remaining
    }
}
