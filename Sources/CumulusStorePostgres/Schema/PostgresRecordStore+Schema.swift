public import CumulusModel
import CumulusStore
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    public func schema(container: String, environment: ContainerEnvironment, logger: Logger) async throws -> ContainerSchema {
        var schema = ContainerSchema()
        let types = try await query(
            "SELECT record_type FROM schema_record_types WHERE container_id = \(container) AND environment = \(environment.rawValue)",
            logger: logger)
        for try await name in types.decode(String.self) { schema.recordTypes[name] = RecordTypeSchema(name: name) }
        let fields = try await query(
            """
            SELECT record_type, field_name, field_type, queryable, sortable FROM schema_fields
            WHERE container_id = \(container) AND environment = \(environment.rawValue)
            """, logger: logger)
        for try await (recordType, name, typeText, queryable, sortable) in fields.decode((String, String, String, Bool, Bool).self) {
            guard let type = SchemaFieldType(parsing: typeText) else { continue }
            schema.recordTypes[recordType, default: RecordTypeSchema(name: recordType)].fields[name] = FieldSchema(
                name: name, type: type, isQueryable: queryable, isSortable: sortable)
        }
        return schema
    }

    public func extendSchema(_ additions: ContainerSchema, container: String, environment: ContainerEnvironment, logger: Logger) async throws
        -> ContainerSchema
    {
        // Each statement is atomic, and what they add is only ever more: a reader between them sees a record type
        // before its fields, which is a schema that was true a moment before.
        // Rows in one order everywhere (a dictionary's order differs from one process to the next): writers adding the
        // same fields at once through two instances would otherwise lock them in opposite orders and deadlock.
        let types = additions.recordTypes.keys.sorted()
        if !types.isEmpty {
            try await query(
                """
                INSERT INTO schema_record_types (container_id, environment, record_type)
                SELECT \(container), \(environment.rawValue), name FROM unnest(\(types)::text[]) WITH ORDINALITY AS t(name, position)
                ORDER BY position
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
        let fields = additions.recordTypes.values.flatMap { type in type.fields.values.map { (type.name, $0) } }
            .sorted { ($0.0, $0.1.name) < ($1.0, $1.1.name) }
        if !fields.isEmpty {
            // A field already there keeps its type; index flags only ever switch on.
            try await query(
                """
                INSERT INTO schema_fields (container_id, environment, record_type, field_name, field_type, queryable, sortable)
                SELECT \(container), \(environment.rawValue), t.record_type, t.field_name, t.field_type, t.queryable, t.sortable
                FROM unnest(\(fields.map(\.0))::text[], \(fields.map(\.1.name))::text[], \(fields.map(\.1.type.description))::text[],
                    \(fields.map(\.1.isQueryable))::boolean[], \(fields.map(\.1.isSortable))::boolean[]) WITH ORDINALITY
                    AS t(record_type, field_name, field_type, queryable, sortable, position)
                ORDER BY t.position
                ON CONFLICT (container_id, environment, record_type, field_name) DO UPDATE
                SET queryable = schema_fields.queryable OR excluded.queryable, sortable = schema_fields.sortable OR excluded.sortable
                """, logger: logger)
        }
        return try await schema(container: container, environment: environment, logger: logger)
    }
}
