import CumulusModel
public import CumulusStore
import Foundation
import GRDB
public import Logging
import Synchronization

extension SQLiteRecordStore {
    /// Great-circle distance in metres between two coordinates: `cumulus_distance(lat1, lon1, lat2, lon2)`.
    static let distanceFunction = DatabaseFunction("cumulus_distance", argumentCount: 4, pure: true) { values in
        guard let lat1 = Double.fromDatabaseValue(values[0]), let lon1 = Double.fromDatabaseValue(values[1]),
            let lat2 = Double.fromDatabaseValue(values[2]), let lon2 = Double.fromDatabaseValue(values[3])
        else { return nil }
        return Geo.distance(lat1, lon1, lat2, lon2)
    }

    public func queryRecords(_ query: RecordQuery, logger: Logger) async throws -> RecordQueryPage {
        let compiled = try SQLiteQueryCompiler(query: query)
        if query.createsIndexes {
            try await ensureFieldIndexes(compiled.indexedFields, query: query)
        }
        return try await read { db in
            guard let databaseID = try Self.databaseID(db, query.database) else {
                if query.zoneName == nil || query.zoneName == ZoneID.defaultZoneName { return RecordQueryPage(records: [], cursor: nil) }
                throw StoreError(.zoneNotFound, "zone \(query.zoneName!) does not exist")
            }
            var zoneIDs: [Int64: ZoneID] = [:]
            if let zoneName = query.zoneName {
                guard let zone = try Self.zoneRow(db, databaseID: databaseID, zoneName: zoneName) else {
                    throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
                }
                zoneIDs[zone.id] = query.database.zoneID(zoneName)
            } else {
                for row in try Row.fetchAll(
                    db.cachedStatement(sql: "SELECT id, zone_name FROM zones WHERE database_id = ? AND deleted = 0"), arguments: [databaseID])
                {
                    zoneIDs[row["id"]] = query.database.zoneID(row["zone_name"])
                }
            }
            var records: [StoredRecord] = []
            var lastCursor: QueryCursor?
            var statements = compiled.statements(zoneRowIDs: Array(zoneIDs.keys))
            if let access = query.access, !access.zoneWide, let zoneRowID = zoneIDs.keys.first {
                // A participant queries only the shared hierarchies.
                let (tree, treeArguments) = Self.treeCTE(zoneRowID: zoneRowID, roots: access.roots)
                statements = statements.map { sql, arguments in
                    let restricted = sql.replacingOccurrences(
                        of: " FROM records WHERE ", with: " FROM records WHERE record_name IN (SELECT name FROM tree) AND ")
                    var all = StatementArguments(treeArguments)
                    _ = all.append(contentsOf: arguments)
                    return (tree + " " + restricted, all)
                }
            }
            for (sql, arguments) in statements {
                let rows = try Row.fetchCursor(db, sql: sql, arguments: arguments)
                while let row = try rows.next() {
                    if records.count == query.limit {
                        return RecordQueryPage(records: records, cursor: lastCursor)
                    }
                    // Columns: id, zone_id, recordColumns (13), then the sort keys.
                    records.append(Self.storedRecord(row, zoneID: zoneIDs[row[1]]!, offset: 2))
                    lastCursor = QueryCursor(keys: (0..<compiled.sortCount).map { Self.keyValue(row[15 + $0]) }, rowID: row[0])
                }
            }
            return RecordQueryPage(records: records, cursor: nil)
        }
    }

    static func keyValue(_ value: DatabaseValue) -> QueryKeyValue {
        switch value.storage {
        case .null: .null
        case .int64(let int): .integer(int)
        case .double(let double): .real(double)
        case .string(let string): .text(string)
        case .blob(let data): .text(String(decoding: data, as: UTF8.self))
        }
    }

    /// Creates an expression index for a queried field, `(zone_id, record_type, json_extract(fields, …))`, once, and
    /// only for a field some live record holds: a made-up field name in a query (anyone with the app's token can send
    /// one) then costs a look at the rows the query reads anyway, never a permanent index that slows every later write.
    /// A field that appears later is indexed by the first query after it does. How many, and which to drop to make
    /// room, is ``FieldIndexBudget``'s rule: fields a production schema declares always; development's within a budget
    /// each container has a fair share of.
    func ensureFieldIndexes(_ fields: Set<String>, query: RecordQuery) async throws {
        let missing = knownFieldIndexes.withLock { fields.subtracting($0) }
        guard !missing.isEmpty else { return }
        let budget = FieldIndexBudget(maximumDevelopmentIndexes: maximumFieldIndexes)
        let (indexed, dropped): (Set<String>, [String]) = try await write { db in
            let catalog = try Self.fieldIndexCatalog(db)
            var indexed = missing.intersection(catalog.existing)
            var held = Set<String>()
            for field in missing.subtracting(indexed) {
                let holds =
                    try Bool.fetchOne(
                        db.cachedStatement(
                            sql: "SELECT EXISTS (SELECT 1 FROM records WHERE deleted = 0 AND json_type(fields, '$.\"' || ? || '\"') IS NOT NULL)"),
                        arguments: [field]
                    ) ?? false
                if holds { held.insert(field) }
            }
            let plan = catalog.plan(budget, fields: held, container: query.database.container, required: query.indexesRequired)
            for field in plan.drop { try db.execute(sql: "DROP INDEX IF EXISTS \(SQLiteQueryCompiler.indexName(field))") }
            for field in plan.build {
                try db.execute(
                    sql: """
                        CREATE INDEX IF NOT EXISTS \(SQLiteQueryCompiler.indexName(field))
                        ON records(zone_id, record_type, \(SQLiteQueryCompiler.fieldExpression(field))) WHERE deleted = 0
                        """
                )
                indexed.insert(field)
            }
            return (indexed, plan.drop)
        }
        knownFieldIndexes.withLock {
            $0.subtract(dropped)
            $0.formUnion(indexed)
        }
    }

    /// The field indexes there are, and the schemas' fields marked `QUERYABLE` or `SORTABLE`.
    static func fieldIndexCatalog(_ db: Database) throws -> FieldIndexCatalog {
        let names = Set(
            try String.fetchAll(
                db.cachedStatement(sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'records\\_field\\_%' ESCAPE '\\'")))
        let marks = try Row.fetchAll(
            db.cachedStatement(sql: "SELECT field_name, container_id, environment FROM schema_fields WHERE queryable != 0 OR sortable != 0")
        ).compactMap { row -> (field: String, container: String, environment: ContainerEnvironment)? in
            guard let environment = ContainerEnvironment(rawValue: row[2]) else { return nil }
            return (row[0], row[1], environment)
        }
        return FieldIndexState.gather(
            indexNames: names, marks: marks, indexName: SQLiteQueryCompiler.indexName, field: SQLiteQueryCompiler.field(ofIndex:))
    }

    public func fieldIndexes(logger: Logger) async throws -> [FieldIndexState] {
        try await read { db in try Self.fieldIndexCatalog(db).states }
    }

    public func dropFieldIndex(field: String, logger: Logger) async throws -> Bool {
        let name = SQLiteQueryCompiler.indexName(field)
        let dropped = try await write { db in
            let exists =
                try Bool.fetchOne(
                    db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?)"), arguments: [name])
                ?? false
            if exists { try db.execute(sql: "DROP INDEX \(name)") }
            return exists
        }
        knownFieldIndexes.withLock { _ = $0.remove(field) }
        return dropped
    }
}

/// Great-circle distances.
enum Geo {
    static let earthRadius = 6_371_008.8

    static func distance(_ lat1: Double, _ lon1: Double, _ lat2: Double, _ lon2: Double) -> Double {
        let p1 = lat1 * .pi / 180
        let p2 = lat2 * .pi / 180
        let dp = (lat2 - lat1) * .pi / 180
        let dl = (lon2 - lon1) * .pi / 180
        let a = sin(dp / 2) * sin(dp / 2) + cos(p1) * cos(p2) * sin(dl / 2) * sin(dl / 2)
        return 2 * earthRadius * atan2(a.squareRoot(), (1 - a).squareRoot())
    }
}

/// Translates a ``RecordQuery`` into one SQL statement: filters and sorts on JSON field expressions that match the
/// expression indexes, and keyset pagination on the sort keys plus the row ID.
struct SQLiteQueryCompiler: Sendable {
    private(set) var conditions: [String] = []
    private(set) var arguments: [DatabaseValue] = []
    private(set) var sortExpressions: [(expression: String, ascending: Bool)] = []
    /// Fields whose scalar expression the statement uses, and so should be indexed.
    private(set) var indexedFields: Set<String> = []
    let query: RecordQuery

    var sortCount: Int { sortExpressions.count }

    /// The row-ID tiebreaker runs in the first sort key's direction, so an index on that key (which ends in the row ID)
    /// yields the whole order without a sort step.
    var idAscending: Bool { sortExpressions.first?.ascending ?? true }

    /// Whether range filters should leave the indexes to the first sort key. With keyset pagination, walking the sort
    /// key's index reads about one page of rows per page, where using a range filter's index would sort every match
    /// on every page. Equality filters stay indexable: they are usually selective.
    private var sortLeadsIndexUse: Bool {
        guard let first = query.sorts.first else { return false }
        if first.relativeLocation != nil { return false }
        switch first.field {
        case .field: return true
        case .system(let system): return system == .createdTimestamp || system == .modifiedTimestamp || system == .recordName
        }
    }

    /// The scalar value of a field, exactly as the expression indexes write it.
    static func fieldExpression(_ field: String) -> String { "json_extract(fields, '$.\"\(field)\".value')" }

    static func indexName(_ field: String) -> String {
        "records_field_" + field.utf8.map { String(format: "%02x", $0) }.joined()
    }

    /// The field an index of ``indexName(_:)`` is for.
    static func field(ofIndex name: String) -> String? {
        guard name.hasPrefix("records_field_") else { return nil }
        let digits = Array(name.utf8.dropFirst("records_field_".utf8.count))
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        var index = 0
        while index < digits.count {
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else { return nil }
            bytes.append(byte)
            index += 2
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// Compiles a query; throws ``QueryPlan/Refusal`` for one the plan refuses.
    init(query: RecordQuery) throws {
        self.query = query
        let plan = try QueryPlan(filters: query.filters, sorts: query.sorts)
        for condition in plan.conditions { add(condition) }
        for order in plan.orders { add(order) }
    }

    // MARK: - Statement

    /// The statements of a page, run in order until the page is full.
    ///
    /// After a cursor, the first sort key gets a range condition SQLite can seek with (`key >= v`), so a page costs the
    /// same however deep it is. SQLite places NULLs first ascending and last descending, outside any range, so a page
    /// that may cross between the NULL and non-NULL keys is read as two segments.
    func statements(zoneRowIDs: [Int64]) -> [(String, StatementArguments)] {
        guard let cursor = query.after, let first = sortExpressions.first else {
            return [statement(zoneRowIDs: zoneRowIDs, segment: nil)]
        }
        let key = first.expression
        switch (first.ascending, cursor.keys[0]) {
        case (true, .null):
            return [
                statement(zoneRowIDs: zoneRowIDs, segment: ("\(key) IS NULL", [])),
                statement(zoneRowIDs: zoneRowIDs, segment: ("\(key) IS NOT NULL", [])),
            ]
        case (true, let value): return [statement(zoneRowIDs: zoneRowIDs, segment: ("\(key) >= ?", [Self.databaseValue(value)]))]
        case (false, .null): return [statement(zoneRowIDs: zoneRowIDs, segment: ("\(key) IS NULL", []))]
        case (false, let value):
            return [
                statement(zoneRowIDs: zoneRowIDs, segment: ("\(key) <= ?", [Self.databaseValue(value)])),
                statement(zoneRowIDs: zoneRowIDs, segment: ("\(key) IS NULL", [])),
            ]
        }
    }

    /// One statement; `segment` narrows it to part of the first sort key's range.
    func statement(zoneRowIDs: [Int64], segment: (String, [DatabaseValue])? = nil) -> (String, StatementArguments) {
        var sql = "SELECT id, zone_id, \(SQLiteRecordStore.recordColumns)"
        for (index, sort) in sortExpressions.enumerated() { sql += ", \(sort.expression) AS sort_\(index)" }
        sql += " FROM records WHERE deleted = 0 AND record_type = ?"
        var values: [DatabaseValue] = [query.recordType.databaseValue]
        if zoneRowIDs.count == 1 {
            sql += " AND zone_id = ?"
            values.append(zoneRowIDs[0].databaseValue)
        } else {
            sql += " AND zone_id IN (SELECT value FROM json_each(?))"
            values.append(("[" + zoneRowIDs.map(String.init).joined(separator: ",") + "]").databaseValue)
        }
        for condition in conditions { sql += " AND \(condition)" }
        values += arguments
        if let (condition, segmentValues) = segment {
            sql += " AND \(condition)"
            values += segmentValues
        }
        if let cursor = query.after {
            let (condition, cursorValues) = keysetCondition(cursor)
            sql += " AND (\(condition))"
            values += cursorValues
        }
        sql += " ORDER BY "
        sql += (sortExpressions.map { "\($0.expression) \($0.ascending ? "ASC" : "DESC")" } + ["id \(idAscending ? "ASC" : "DESC")"])
            .joined(separator: ", ")
        sql += " LIMIT \(query.limit + 1)"
        return (sql, StatementArguments(values))
    }

    /// Rows after the cursor in (sort keys…, id) order, with SQLite's NULL placement (first ascending, last descending).
    private func keysetCondition(_ cursor: QueryCursor) -> (String, [DatabaseValue]) {
        var disjuncts: [String] = []
        var values: [DatabaseValue] = []
        for index in 0...sortExpressions.count {
            var terms: [String] = []
            var termValues: [DatabaseValue] = []
            for prior in 0..<index {
                terms.append("\(sortExpressions[prior].expression) IS ?")
                termValues.append(Self.databaseValue(cursor.keys[prior]))
            }
            if index == sortExpressions.count {
                terms.append(idAscending ? "id > ?" : "id < ?")
                termValues.append(cursor.rowID.databaseValue)
            } else {
                let (expression, ascending) = sortExpressions[index]
                let key = cursor.keys[index]
                switch (ascending, key) {
                case (true, .null): terms.append("\(expression) IS NOT NULL")
                case (true, _):
                    terms.append("\(expression) > ?")
                    termValues.append(Self.databaseValue(key))
                case (false, .null): continue  // nothing sorts after NULL descending
                case (false, _):
                    terms.append("(\(expression) < ? OR \(expression) IS NULL)")
                    termValues.append(Self.databaseValue(key))
                }
            }
            disjuncts.append("(" + terms.joined(separator: " AND ") + ")")
            values += termValues
        }
        return (disjuncts.joined(separator: " OR "), values)
    }

    static func databaseValue(_ key: QueryKeyValue) -> DatabaseValue {
        switch key {
        case .null: .null
        case .integer(let int): int.databaseValue
        case .real(let double): double.databaseValue
        case .text(let text): text.databaseValue
        }
    }

    // MARK: - Filters

    private static func systemColumn(_ field: QuerySystemField) -> String {
        switch field {
        case .recordName: "record_name"
        case .createdTimestamp: "created_at"
        case .modifiedTimestamp: "modified_at"
        case .createdUserRecordName: "created_by"
        case .modifiedUserRecordName: "modified_by"
        case .parent: "parent_name"
        case .share: "share_name"
        }
    }

    private static func databaseValue(_ operand: QueryPlan.Operand) -> DatabaseValue {
        switch operand {
        case .integer(let integer): integer.databaseValue
        case .real(let real): real.databaseValue
        case .text(let text): text.databaseValue
        }
    }

    /// Operands as a JSON array, for `IN (SELECT value FROM json_each(?))`.
    private static func listJSON(_ operands: [QueryPlan.Operand]) -> DatabaseValue {
        var writer = JSONWriter()
        writer.beginArray()
        for operand in operands {
            switch operand {
            case .integer(let integer): writer.int(integer)
            case .real(let real): writer.double(real)
            case .text(let text): writer.string(text)
            }
        }
        writer.endArray()
        return String(decoding: writer.bytes, as: UTF8.self).databaseValue
    }

    /// The expression a filter reads; a field's scalar value is written as its expression index writes it.
    private mutating func expression(_ target: QueryPlan.Target) -> String {
        switch target {
        case .system(let system):
            return Self.systemColumn(system)
        case .value(let name):
            indexedFields.insert(name)
            return Self.fieldExpression(name)
        case .referenceName(let name):
            return "json_extract(fields, '$.\"\(name)\".value.recordName')"
        }
    }

    private mutating func add(_ condition: QueryPlan.Condition) {
        switch condition {
        case .compare(let target, let comparison, let operand):
            var expression = expression(target)
            // A unary `+` is a no-op on the value that keeps SQLite from choosing this expression's index.
            if comparison != .equal, sortLeadsIndexUse { expression = "+" + expression }
            conditions.append("\(expression) \(comparison.rawValue) ?")
            arguments.append(Self.databaseValue(operand))
        case .beginsWith(let target, let prefix, let negated):
            var expression = expression(target)
            if sortLeadsIndexUse { expression = "+" + expression }
            let range = "(\(expression) >= ? AND \(expression) < ?)"
            conditions.append(negated ? "NOT \(range)" : range)
            arguments += [prefix.databaseValue, (prefix + "\u{10FFFF}").databaseValue]
        case .among(let target, let operands, let negated):
            conditions.append("\(expression(target)) \(negated ? "NOT IN" : "IN") (SELECT value FROM json_each(?))")
            arguments.append(Self.listJSON(operands))
        case .listContains(let field, let operand, let references, let negated):
            let exists = "EXISTS (SELECT 1 FROM \(Self.elements(field)) WHERE \(Self.element(references)) = ?)"
            conditions.append(negated ? "NOT \(exists)" : exists)
            arguments.append(Self.databaseValue(operand))
        case .listContainsAny(let field, let operands, let references, let negated):
            let exists =
                "EXISTS (SELECT 1 FROM \(Self.elements(field)) WHERE \(Self.element(references)) IN (SELECT value FROM json_each(?)))"
            conditions.append(negated ? "NOT \(exists)" : exists)
            arguments.append(Self.listJSON(operands))
        case .listContainsAll(let field, let operands, let references, let negated):
            let all =
                "NOT EXISTS (SELECT 1 FROM json_each(?) AS w WHERE w.value NOT IN (SELECT \(Self.element(references)) FROM \(Self.elements(field))))"
            conditions.append(negated ? "NOT \(all)" : all)
            arguments.append(Self.listJSON(operands))
        case .listMemberBeginsWith(let field, let prefix, let negated):
            let exists = "EXISTS (SELECT 1 FROM \(Self.elements(field)) WHERE e.value >= ? AND e.value < ?)"
            conditions.append(negated ? "NOT \(exists)" : exists)
            arguments += [prefix.databaseValue, (prefix + "\u{10FFFF}").databaseValue]
        case .near(let field, let center, let distance):
            let latitude = "json_extract(fields, '$.\"\(field)\".value.latitude')"
            let longitude = "json_extract(fields, '$.\"\(field)\".value.longitude')"
            // A bounding box first, so the exact distance is computed only for nearby rows.
            let latitudeDelta = distance / Geo.earthRadius * 180 / .pi
            conditions.append("\(latitude) BETWEEN ? AND ?")
            arguments += [(center.latitude - latitudeDelta).databaseValue, (center.latitude + latitudeDelta).databaseValue]
            conditions.append("cumulus_distance(\(latitude), \(longitude), ?, ?) <= ?")
            arguments += [center.latitude.databaseValue, center.longitude.databaseValue, distance.databaseValue]
        }
    }

    /// A list field's elements, as `e`.
    private static func elements(_ field: String) -> String { "json_each(fields, '$.\"\(field)\".value') AS e" }

    /// What an element compares: itself, or a reference's record name.
    private static func element(_ references: Bool) -> String { references ? "json_extract(e.value, '$.recordName')" : "e.value" }

    // MARK: - Sorts

    private mutating func add(_ order: QueryPlan.Order) {
        switch order {
        case .system(let system, let ascending):
            sortExpressions.append((Self.systemColumn(system), ascending))
        case .distance(let field, let location, let ascending):
            // Literal doubles (not parameters) so the expression can repeat in the keyset condition.
            let expression =
                "cumulus_distance(json_extract(fields, '$.\"\(field)\".value.latitude'), json_extract(fields, '$.\"\(field)\".value.longitude'), "
                + "\(location.latitude), \(location.longitude))"
            sortExpressions.append((expression, ascending))
        case .value(let field, let ascending):
            indexedFields.insert(field)
            sortExpressions.append((Self.fieldExpression(field), ascending))
        }
    }
}
