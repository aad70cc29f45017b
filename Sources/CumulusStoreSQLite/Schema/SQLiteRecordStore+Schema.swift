public import CumulusModel
import CumulusStore
import GRDB
public import Logging

extension SQLiteRecordStore {
    public func schema(container: String, environment: ContainerEnvironment, logger: Logger) async throws -> ContainerSchema {
        try await read { db in try Self.schema(db, container: container, environment: environment) }
    }

    public func extendSchema(_ additions: ContainerSchema, container: String, environment: ContainerEnvironment, logger: Logger) async throws
        -> ContainerSchema
    {
        try await write { db in
            let addType = try db.cachedStatement(
                sql: "INSERT OR IGNORE INTO schema_record_types (container_id, environment, record_type) VALUES (?, ?, ?)")
            // A field already there keeps its type; index flags only ever switch on.
            let addField = try db.cachedStatement(
                sql: """
                    INSERT INTO schema_fields (container_id, environment, record_type, field_name, field_type, queryable, sortable)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (container_id, environment, record_type, field_name)
                    DO UPDATE SET queryable = queryable OR excluded.queryable, sortable = sortable OR excluded.sortable
                    """)
            for type in additions.recordTypes.values {
                try addType.execute(arguments: [container, environment.rawValue, type.name])
                for field in type.fields.values {
                    try addField.execute(arguments: [
                        container, environment.rawValue, type.name, field.name, field.type.description, field.isQueryable, field.isSortable,
                    ])
                }
            }
            return try Self.schema(db, container: container, environment: environment)
        }
    }

    static func schema(_ db: Database, container: String, environment: ContainerEnvironment) throws -> ContainerSchema {
        var schema = ContainerSchema()
        let types = try String.fetchAll(
            db.cachedStatement(sql: "SELECT record_type FROM schema_record_types WHERE container_id = ? AND environment = ?"),
            arguments: [container, environment.rawValue])
        for name in types { schema.recordTypes[name] = RecordTypeSchema(name: name) }
        let fields = try Row.fetchCursor(
            db.cachedStatement(
                sql: """
                    SELECT record_type, field_name, field_type, queryable, sortable FROM schema_fields
                    WHERE container_id = ? AND environment = ?
                    """),
            arguments: [container, environment.rawValue])
        while let row = try fields.next() {
            let recordType: String = row[0]
            guard let type = SchemaFieldType(parsing: row[2]) else { continue }
            schema.recordTypes[recordType, default: RecordTypeSchema(name: recordType)].fields[row[1]] = FieldSchema(
                name: row[1], type: type, isQueryable: row[3], isSortable: row[4])
        }
        return schema
    }
}
