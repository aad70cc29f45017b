public import CumulusModel
import Foundation
public import GRDB

/// One way a synced table breaks a rule of CloudKit sync, and how to fix it.
public struct ModelProblem: Sendable, Hashable, CustomStringConvertible {
    /// The rules a synced table is checked against (docs/SCHEMA.md, "The model linter").
    public enum Rule: String, Sendable, Hashable {
        /// A unique constraint or index other than the record-name key: devices create rows offline, and sync cannot
        /// keep them unique.
        case uniqueConstraint = "unique-constraint"
        /// A NOT NULL column without a default: a record from another app version may lack the field.
        case requiredColumn = "required-column"
        /// A column whose type no record field holds, or that differs from the field type it is mapped to.
        case columnType = "column-type"
        /// A parent column that does not point at a synced table.
        case parent = "parent"
        /// A field name the server reserves or does not accept.
        case fieldName = "field-name"
        /// A column the table mapping names that the table lacks.
        case missingColumn = "missing-column"
        /// Values that can make a record larger than CloudKit's 1 MB (assets excluded). A warning: it depends on data.
        case recordSize = "record-size"
        /// A column whose type differs from the server schema's field.
        case serverSchema = "server-schema"
    }

    public var table: String
    public var column: String?
    public var rule: Rule
    public var message: String
    public var fix: String
    /// Warnings are reported and never thrown: whether they bite depends on the data.
    public var isWarning: Bool

    public var description: String {
        "\(isWarning ? "warning" : "error"): \(table)\(column.map { ".\($0)" } ?? "") [\(rule.rawValue)]: \(message). Fix: \(fix)"
    }
}

/// The problems of an app's synced tables, all at once, each with its fix.
public struct ModelLintError: Error, Sendable, CustomStringConvertible {
    public var problems: [ModelProblem]

    public var description: String {
        "the synced tables break \(problems.count) rule\(problems.count == 1 ? "" : "s") of CloudKit sync:\n"
            + problems.map { "  - \($0)" }.joined(separator: "\n")
    }
}

/// Checks synced tables against the rules CloudKit sync imposes, which CloudKit itself never reports ("sync does not
/// throw when your model is wrong; it just quietly does nothing", seed 000).
///
/// ``GRDBSyncAdapter`` runs ``validate(_:in:)`` when it is made, so an app's unit test that sets up its sync catches a
/// broken model; `cumulus schema check` runs ``check(tablesNamed:in:)`` on an app's SQLite file.
public enum ModelLinter {
    /// Field names the server keeps for itself.
    public static let reservedFieldNames: Set<String> = [
        "recordName", "recordType", "recordChangeTag", "created", "modified", "deleted", "parent", "share", "zoneID", "fields",
        "pluginFields", "shortGUID", "createdTimestamp", "modifiedTimestamp", "createdUserRecordName", "modifiedUserRecordName",
    ]

    /// Checks the tables as they are mapped; throws one ``ModelLintError`` listing every error (warnings aside).
    public static func validate(_ tables: [SyncedTable], in db: Database) throws {
        let errors = try check(tables, in: db).filter { !$0.isWarning }
        if !errors.isEmpty { throw ModelLintError(problems: errors) }
    }

    /// Every problem of the tables as they are mapped, warnings included.
    public static func check(_ tables: [SyncedTable], in db: Database) throws -> [ModelProblem] {
        let synced = Set(tables.map(\.tableName))
        var problems: [ModelProblem] = []
        for table in tables {
            guard try db.tableExists(table.tableName) else {
                problems.append(
                    ModelProblem(
                        table: table.tableName, column: nil, rule: .missingColumn, message: "the table does not exist",
                        fix: "create it before setting up sync", isWarning: false))
                continue
            }
            let columns = try db.columns(in: table.tableName)
            var fields: [(column: String, field: String, type: FieldType?)] = table.columns.map { ($0.column, $0.field, $0.type) }
            if let modification = table.modificationColumn { fields.append((modification, modification, .int64)) }
            var keys: Set<String> = [table.primaryKey]
            if let owner = table.ownerColumn { keys.insert(owner) }
            problems += try rules(
                table: table.tableName, columns: columns, keys: keys, fields: fields, parentColumn: table.parentColumn,
                parentTable: table.parentColumn == nil ? nil : (table.parentTable ?? table.tableName), synced: synced, in: db)
        }
        return problems
    }

    /// Every problem of tables read from their SQLite definitions alone, as `cumulus schema check` sees an app's file:
    /// the primary key is the record name, every other column a field of the type its declared type suggests, and a
    /// foreign key is a parent.
    public static func check(tablesNamed names: [String], in db: Database) throws -> [ModelProblem] {
        let synced = Set(names)
        var problems: [ModelProblem] = []
        for name in names {
            let columns = try db.columns(in: name)
            let primaryKey = try db.primaryKey(name).columns
            let foreignKeys = try db.foreignKeys(on: name)
            let parentColumns = Set(foreignKeys.flatMap { $0.mapping.map(\.origin) })
            let fields = columns.filter { !primaryKey.contains($0.name) && !parentColumns.contains($0.name) }
                .map { (column: $0.name, field: $0.name, type: Optional<FieldType>.none) }
            problems += try rules(
                table: name, columns: columns, keys: Set(primaryKey), fields: fields, parentColumn: nil, parentTable: nil, synced: synced, in: db)
            for foreignKey in foreignKeys where !synced.contains(foreignKey.destinationTable) {
                problems.append(
                    ModelProblem(
                        table: name, column: foreignKey.originColumns.joined(separator: ", "), rule: .parent,
                        message: "points at \(foreignKey.destinationTable), which is not synced",
                        fix: "sync \(foreignKey.destinationTable) too (a parent record travels with its children), or drop the foreign key",
                        isWarning: false))
            }
        }
        return problems
    }

    /// Compares the tables with the server's schema (`CloudContainer.fetchSchema()`): a column whose field the
    /// server holds with another type is an error, found before any record is sent.
    public static func compare(_ tables: [SyncedTable], with schema: ContainerSchema) -> [ModelProblem] {
        var problems: [ModelProblem] = []
        for table in tables {
            guard let recordType = schema[table.recordType] else { continue }
            for column in table.columns {
                guard let field = recordType.fields[column.field], field.type != SchemaFieldType(column.type) else { continue }
                problems.append(
                    ModelProblem(
                        table: table.tableName, column: column.column, rule: .serverSchema,
                        message:
                            "maps to field \(column.field) as \(column.type.rawValue), but the server's \(table.recordType).\(column.field) is \(field.type)",
                        fix: "map the column as \(field.type), or use a new field name (a field's type never changes)", isWarning: false))
            }
        }
        return problems
    }

    // MARK: - The rules

    private static func rules(
        table: String, columns: [ColumnInfo], keys: Set<String>, fields: [(column: String, field: String, type: FieldType?)],
        parentColumn: String?, parentTable: String?, synced: Set<String>, in db: Database
    ) throws -> [ModelProblem] {
        var problems: [ModelProblem] = []
        func problem(_ column: String?, _ rule: ModelProblem.Rule, _ message: String, _ fix: String, warning: Bool = false) {
            problems.append(ModelProblem(table: table, column: column, rule: rule, message: message, fix: fix, isWarning: warning))
        }
        let byName = Dictionary(columns.map { ($0.name, $0) }) { first, _ in first }

        // The record-name key (with the owner, for a table of several owners' zones) is the one uniqueness sync keeps.
        for index in try db.indexes(on: table) where index.isUnique && index.origin != .primaryKeyConstraint && Set(index.columns) != keys {
            problem(
                index.columns.joined(separator: ", "), .uniqueConstraint,
                "\(index.origin == .uniqueConstraint ? "a UNIQUE constraint" : "unique index \(index.name)") on (\(index.columns.joined(separator: ", ")))",
                "drop it: two devices create rows offline and sync cannot keep a value unique; if the value identifies the row, make it the record name"
            )
        }

        var mapped = Set<String>()
        for (column, field, type) in fields {
            mapped.insert(column)
            guard let info = byName[column] else {
                problem(column, .missingColumn, "mapped to field \(field), but the table has no such column", "add the column or remove the mapping")
                continue
            }
            if info.isNotNull && info.defaultValueSQL == nil {
                problem(
                    column, .requiredColumn, "NOT NULL without a default",
                    "make it nullable or give it a DEFAULT: a record written by another app version may lack field \(field)")
            }
            let affinity = Affinity(declaredType: info.type)
            if let type, !affinity.holds(type) {
                problem(
                    column, .columnType, "declared \(info.type.isEmpty ? "without a type" : info.type) but mapped as \(type.rawValue)",
                    "declare it \(Affinity.declaration(for: type)), so values read back as the type they were sent")
            } else if type == nil, affinity == .numeric || info.type.isEmpty {
                problem(
                    column, .columnType, "declared \(info.type.isEmpty ? "without a type" : info.type), which no record field type matches",
                    "declare it TEXT (STRING), INTEGER (INT64 or TIMESTAMP), REAL (DOUBLE) or BLOB (BYTES)")
            }
            if field.hasPrefix("___") || field.hasPrefix("cloudkit.") || reservedFieldNames.contains(field) || !isIdentifier(field) {
                problem(
                    column, .fieldName,
                    "field name \(field) is \(isIdentifier(field) ? "reserved by the server" : "not a letter followed by letters, digits and underscores")",
                    "map the column to another field name (SyncedColumn(\"\(column)\", field: \"…\", type: …))")
            }
        }
        // BLOBs are bounded only by a CHECK on their length; together they must stay under the record limit.
        let definition = try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", arguments: [table]) ?? ""
        var bounded = 0
        var unbounded: [String] = []
        for column in mapped.sorted() where byName[column].map({ Affinity(declaredType: $0.type) == .blob && !$0.type.isEmpty }) == true {
            if let bound = lengthBound(column, in: definition) { bounded += bound } else { unbounded.append(column) }
        }
        for column in unbounded {
            problem(
                column, .recordSize, "BLOB without a bound: a record over 1 MB (assets excluded) cannot be saved",
                "bound it (CHECK (length(\(column)) <= 500000)) or keep large files in assets", warning: true)
        }
        if bounded > 1_000_000 {
            problem(
                nil, .recordSize, "BLOB columns may hold \(bounded) bytes together, more than a record's 1 MB",
                "lower the bounds, or keep large files in assets", warning: true)
        }

        if let parentColumn {
            if byName[parentColumn] == nil {
                problem(parentColumn, .parent, "the parent column does not exist", "add it, holding the parent row's record name")
            }
            if let parentTable, !synced.contains(parentTable) {
                problem(
                    parentColumn, .parent, "points at \(parentTable), which is not a synced table",
                    "add a SyncedTable for \(parentTable) in the same zone (a share follows parents to their children)")
            }
        }
        return problems
    }

    private static func isIdentifier(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first.properties.isAlphabetic, first.isASCII else { return false }
        return name.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_") }
    }

    /// `N` of a `CHECK (length(column) <= N)` (or `< N`) in a table's definition.
    private static func lengthBound(_ column: String, in definition: String) -> Int? {
        let pattern = #"length\s*\(\s*["`\[]?"# + NSRegularExpression.escapedPattern(for: column) + #"["`\]]?\s*\)\s*(<=?)\s*(\d+)"#
        guard let regex = try? NSRegularExpression(pattern: pattern, options: [.caseInsensitive]),
            let match = regex.firstMatch(in: definition, range: NSRange(definition.startIndex..., in: definition)),
            let operatorRange = Range(match.range(at: 1), in: definition), let numberRange = Range(match.range(at: 2), in: definition),
            let number = Int(definition[numberRange])
        else { return nil }
        return definition[operatorRange] == "<" ? number - 1 : number
    }

    /// SQLite's type affinity of a declared column type (https://sqlite.org/datatype3.html, 3.1).
    enum Affinity: Equatable {
        case integer, text, blob, real, numeric

        init(declaredType: String) {
            let type = declaredType.uppercased()
            if type.contains("INT") {
                self = .integer
            } else if type.contains("CHAR") || type.contains("CLOB") || type.contains("TEXT") {
                self = .text
            } else if type.contains("BLOB") || type.isEmpty {
                self = .blob
            } else if type.contains("REAL") || type.contains("FLOA") || type.contains("DOUB") {
                self = .real
            } else {
                self = .numeric
            }
        }

        func holds(_ type: FieldType) -> Bool {
            switch type {
            case .string, .reference: self == .text
            case .int64, .timestamp: self == .integer || self == .numeric
            case .double: self == .real || self == .numeric
            case .bytes: self == .blob
            case .location, .asset: self == .text || self == .blob
            }
        }

        static func declaration(for type: FieldType) -> String {
            switch type {
            case .string, .reference, .location, .asset: "TEXT"
            case .int64, .timestamp: "INTEGER"
            case .double: "REAL"
            case .bytes: "BLOB"
            }
        }
    }
}
