import CumulusModel
public import CumulusStore
import Foundation
public import Logging
import PostgresNIO
import Synchronization

extension PostgresRecordStore {
    public func queryRecords(_ query: RecordQuery, logger: Logger) async throws -> RecordQueryPage {
        let compiler = try PostgresQueryCompiler(query: query)
        if query.createsIndexes {
            try await ensureFieldIndexes(compiler.indexedFields, query: query, logger: logger)
        }
        return try await read(logger: logger) { connection in
            var compiled = compiler
            guard let databaseID = try await Self.databaseID(connection, query.database, logger: logger) else {
                if query.zoneName == nil || query.zoneName == ZoneID.defaultZoneName { return RecordQueryPage(records: [], cursor: nil) }
                throw StoreError(.zoneNotFound, "zone \(query.zoneName!) does not exist")
            }
            var zoneIDs: [Int64: ZoneID] = [:]
            if let zoneName = query.zoneName {
                guard let zone = try await Self.zoneRow(connection, databaseID: databaseID, zoneName: zoneName, logger: logger) else {
                    throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
                }
                zoneIDs[zone.id] = query.database.zoneID(zoneName)
            } else {
                let rows = try await connection.query(
                    "SELECT id, zone_name FROM zones WHERE database_id = \(databaseID) AND NOT deleted", logger: logger)
                for try await (id, name) in rows.decode((Int64, String).self) { zoneIDs[id] = query.database.zoneID(name) }
            }
            var records: [StoredRecord] = []
            for statement in compiled.statements(zoneRowIDs: Array(zoneIDs.keys)) {
                for try await row in try await connection.query(statement, logger: logger) {
                    let reader = RowReader(row)
                    if records.count == query.limit {
                        return RecordQueryPage(records: records, cursor: compiled.lastCursor)
                    }
                    // Columns: id, zone_id, recordColumns (13), then the sort keys as text.
                    records.append(try Self.storedRecord(reader, zoneID: zoneIDs[try reader[1]]!, offset: 2))
                    compiled.lastCursor = QueryCursor(
                        keys: try (0..<compiled.sortCount).map { try compiled.keyValue(reader[15 + $0, as: String?.self], sort: $0) },
                        rowID: try reader[0])
                }
            }
            return RecordQueryPage(records: records, cursor: nil)
        }
    }

    /// Creates an expression index for a queried field, once, and only for a field some live record of the queried
    /// type holds in the queried database: a made-up field name in a query (anyone with the app's token can send one)
    /// never becomes a permanent index that slows every later write. How many, and which to drop to make room, is
    /// ``FieldIndexBudget``'s rule: fields a production schema declares always; development's within a budget each
    /// container has a fair share of.
    ///
    /// Indexes are built `CONCURRENTLY`, so writers of other instances are not blocked while a large table is
    /// indexed; two instances building the same index at once is harmless (one gives way).
    func ensureFieldIndexes(_ fields: Set<String>, query recordQuery: RecordQuery, logger: Logger) async throws {
        let missing = knownFieldIndexes.withLock { fields.subtracting($0) }
        guard !missing.isEmpty else { return }
        let database = recordQuery.database
        let (names, catalog) = try await fieldIndexCatalog(logger: logger)
        var indexed = Set(missing.filter { names.contains(PostgresQueryCompiler.indexName($0)) })
        var held = Set<String>()
        for field in missing.subtracting(indexed) {
            let rows = try await query(
                """
                SELECT EXISTS (
                    SELECT 1 FROM records r JOIN zones z ON z.id = r.zone_id JOIN databases d ON d.id = z.database_id
                    WHERE NOT r.deleted AND r.record_type = \(recordQuery.recordType) AND d.container_id = \(database.container)
                    AND d.environment = \(database.environment.rawValue) AND d.scope = \(database.scope.rawValue)
                    AND d.owner_record_name = \(database.ownerRecordName) AND (r.fields::jsonb) ? \(field)
                )
                """, logger: logger)
            for try await holds in rows.decode(Bool.self) where holds { held.insert(field) }
        }
        var known = catalog
        // A queried field the schemas do not name yet is named now (PostgreSQL's index names are hashes).
        for field in indexed where !known.existing.contains(field) {
            known.existing.insert(field)
            known.unnamed = max(0, known.unnamed - 1)
        }
        let plan = known.plan(
            FieldIndexBudget(maximumDevelopmentIndexes: maximumFieldIndexes), fields: held, container: database.container,
            required: recordQuery.indexesRequired)
        do {
            // Not under the connection wait: building an index on a large table takes as long as it takes.
            for field in plan.drop {
                try await client.query(
                    PostgresQuery(unsafeSQL: "DROP INDEX CONCURRENTLY IF EXISTS \(PostgresQueryCompiler.indexName(field))"), logger: logger)
            }
            for field in plan.build {
                do {
                    try await client.query(
                        PostgresQuery(
                            unsafeSQL: """
                                CREATE INDEX CONCURRENTLY IF NOT EXISTS \(PostgresQueryCompiler.indexName(field))
                                ON records (zone_id, record_type, (\(PostgresQueryCompiler.fieldExpression(field))) NULLS FIRST, id) WHERE NOT deleted
                                """), logger: logger)
                } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
                    // Another instance built it at the same moment.
                }
                indexed.insert(field)
            }
        } catch let error as PSQLError {
            throw Self.storeError(error)
        }
        if !plan.build.isEmpty {
            // An expression index has no statistics until the table is analyzed: without them the planner may ignore
            // it and sort every match on every page.
            _ = try? await client.query("ANALYZE records", logger: logger)
        }
        knownFieldIndexes.withLock {
            $0.subtract(plan.drop)
            $0.formUnion(indexed)
        }
    }

    /// The field indexes there are, and the schemas' fields marked `QUERYABLE` or `SORTABLE`.
    func fieldIndexCatalog(logger: Logger) async throws -> (names: Set<String>, catalog: FieldIndexCatalog) {
        var names = Set<String>()
        let rows = try await query(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'records' AND indexname LIKE 'records\\_field\\_%'", logger: logger)
        for try await name in rows.decode(String.self) { names.insert(name) }
        var marks: [(field: String, container: String, environment: ContainerEnvironment)] = []
        let marked = try await query(
            "SELECT field_name, container_id, environment FROM schema_fields WHERE queryable OR sortable", logger: logger)
        for try await (field, container, environment) in marked.decode((String, String, String).self) {
            if let environment = ContainerEnvironment(rawValue: environment) { marks.append((field, container, environment)) }
        }
        return (names, FieldIndexState.gather(indexNames: names, marks: marks, indexName: PostgresQueryCompiler.indexName))
    }

    public func fieldIndexes(logger: Logger) async throws -> [FieldIndexState] {
        try await fieldIndexCatalog(logger: logger).catalog.states
    }

    public func dropFieldIndex(field: String, logger: Logger) async throws -> Bool {
        let name = PostgresQueryCompiler.indexName(field)
        guard try await fieldIndexCatalog(logger: logger).names.contains(name) else { return false }
        do {
            try await client.query(PostgresQuery(unsafeSQL: "DROP INDEX CONCURRENTLY IF EXISTS \(name)"), logger: logger)
        } catch let error as PSQLError {
            throw Self.storeError(error)
        }
        knownFieldIndexes.withLock { _ = $0.remove(field) }
        return true
    }
}

/// Translates a ``RecordQuery`` into PostgreSQL, as `SQLiteQueryCompiler` does for SQLite: the same filters, sorts and
/// keyset pagination, over `jsonb` expressions of the stored fields that match the expression indexes.
///
/// A field's value is compared as `jsonb` (`(fields::jsonb) -> 'name' -> 'value'`): numbers compare as numbers,
/// strings as strings, and one expression index per field serves every type. Missing fields are NULL and sort first
/// ascending and last descending, as in the SQLite store.
struct PostgresQueryCompiler: Sendable {
    /// How a sort key's text is read back into a ``QueryKeyValue`` for the cursor.
    enum KeyKind: Sendable {
        case json, text, integer, real
    }

    private(set) var conditions: [String] = []
    private(set) var binds = PostgresBindings()
    private(set) var sortExpressions: [(expression: String, ascending: Bool, kind: KeyKind)] = []
    private(set) var indexedFields: Set<String> = []
    let query: RecordQuery
    var lastCursor: QueryCursor?

    var sortCount: Int { sortExpressions.count }
    var idAscending: Bool { sortExpressions.first?.ascending ?? true }

    /// A field name as an SQL string literal.
    static func literal(_ name: String) -> String { "'" + name.replacingOccurrences(of: "'", with: "''") + "'" }

    /// The value of a field, exactly as the expression indexes write it.
    static func fieldExpression(_ field: String) -> String { "(fields::jsonb) -> \(literal(field)) -> 'value'" }

    /// An index name within PostgreSQL's 63 bytes whatever the field's length: a 64-bit FNV-1a hash of the name.
    static func indexName(_ field: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in field.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return "records_field_" + String(hash, radix: 16)
    }

    /// Compiles a query; throws ``QueryPlan/Refusal`` for one the plan refuses.
    init(query: RecordQuery) throws {
        self.query = query
        let plan = try QueryPlan(filters: query.filters, sorts: query.sorts)
        for condition in plan.conditions { add(condition) }
        for order in plan.orders { add(order) }
    }

    /// Appends a parameter and returns its placeholder.
    private mutating func bind(_ value: some PostgresEncodable) -> String {
        try? binds.append(value, context: .default)
        return "$\(binds.count)"
    }

    private mutating func bindNull() -> String {
        binds.appendNull()
        return "$\(binds.count)"
    }

    // MARK: - Statements

    /// The statements of a page, run in order until the page is full. After a cursor, the first sort key gets a range
    /// condition an index can seek with; a page that may cross between NULL and non-NULL keys is read in two segments.
    mutating func statements(zoneRowIDs: [Int64]) -> [PostgresQuery] {
        guard let cursor = query.after, let first = sortExpressions.first else {
            return [statement(zoneRowIDs: zoneRowIDs, segment: nil)]
        }
        let key = first.expression
        switch (first.ascending, cursor.keys[0]) {
        case (true, .null):
            return [statement(zoneRowIDs: zoneRowIDs, segment: "\(key) IS NULL"), statement(zoneRowIDs: zoneRowIDs, segment: "\(key) IS NOT NULL")]
        case (true, let value):
            var copy = self
            let segment = "\(key) >= \(copy.keyBind(value, kind: first.kind))"
            return [copy.statement(zoneRowIDs: zoneRowIDs, segment: segment)]
        case (false, .null):
            return [statement(zoneRowIDs: zoneRowIDs, segment: "\(key) IS NULL")]
        case (false, let value):
            var copy = self
            let segment = "\(key) <= \(copy.keyBind(value, kind: first.kind))"
            return [copy.statement(zoneRowIDs: zoneRowIDs, segment: segment), statement(zoneRowIDs: zoneRowIDs, segment: "\(key) IS NULL")]
        }
    }

    /// One statement; `segment` narrows it to part of the first sort key's range. Binds accumulate on a copy, so each
    /// statement carries exactly its own parameters.
    private func statement(zoneRowIDs: [Int64], segment: String?) -> PostgresQuery {
        var copy = self
        var sql = "SELECT id, zone_id, \(PostgresRecordStore.recordColumns)"
        for (index, sort) in sortExpressions.enumerated() { sql += ", (\(sort.expression))::text AS sort_\(index)" }
        sql += " FROM records WHERE NOT deleted AND record_type = \(copy.bind(query.recordType))"
        sql += zoneRowIDs.count == 1 ? " AND zone_id = \(copy.bind(zoneRowIDs[0]))" : " AND zone_id = ANY(\(copy.bind(zoneRowIDs)))"
        if let access = query.access, !access.zoneWide {
            // A participant queries only the shared hierarchies.
            sql += """
                 AND record_name IN (
                    WITH RECURSIVE tree(name) AS (
                        SELECT unnest(\(copy.bind(Array(access.roots)))::text[]) COLLATE "C"
                        UNION SELECT r.record_name FROM records r JOIN tree ON r.zone_id = \(copy.bind(zoneRowIDs.first ?? 0))
                            AND r.parent_name = tree.name
                    ) SELECT name FROM tree)
                """
        }
        for condition in conditions { sql += " AND \(condition)" }
        if let segment { sql += " AND \(segment)" }
        if let cursor = query.after { sql += " AND (\(copy.keysetCondition(cursor)))" }
        sql += " ORDER BY "
        sql +=
            (sortExpressions.map { "\($0.expression) \($0.ascending ? "ASC NULLS FIRST" : "DESC NULLS LAST")" } + [
                "id \(idAscending ? "ASC" : "DESC")"
            ])
            .joined(separator: ", ")
        sql += " LIMIT \(query.limit + 1)"
        return PostgresQuery(unsafeSQL: sql, binds: copy.binds)
    }

    /// Rows after the cursor in (sort keys…, id) order, NULLs first ascending and last descending.
    private mutating func keysetCondition(_ cursor: QueryCursor) -> String {
        var disjuncts: [String] = []
        for index in 0...sortExpressions.count {
            // Nothing sorts after NULL descending: no disjunct (and no parameters) for this key.
            if index < sortExpressions.count, !sortExpressions[index].ascending, cursor.keys[index] == .null { continue }
            var terms: [String] = []
            for prior in 0..<index {
                let (expression, _, kind) = sortExpressions[prior]
                terms.append("\(expression) IS NOT DISTINCT FROM \(keyBind(cursor.keys[prior], kind: kind))")
            }
            if index == sortExpressions.count {
                terms.append(idAscending ? "id > \(bind(cursor.rowID))" : "id < \(bind(cursor.rowID))")
            } else {
                let (expression, ascending, kind) = sortExpressions[index]
                let key = cursor.keys[index]
                switch (ascending, key) {
                case (true, .null): terms.append("\(expression) IS NOT NULL")
                case (true, _): terms.append("\(expression) > \(keyBind(key, kind: kind))")
                case (false, .null): continue  // skipped above
                case (false, _):
                    let placeholder = keyBind(key, kind: kind)
                    terms.append("(\(expression) < \(placeholder) OR \(expression) IS NULL)")
                }
            }
            disjuncts.append("(" + terms.joined(separator: " AND ") + ")")
        }
        return disjuncts.joined(separator: " OR ")
    }

    /// A cursor key as a parameter of its expression's type.
    private mutating func keyBind(_ key: QueryKeyValue, kind: KeyKind) -> String {
        switch (key, kind) {
        case (.null, .json): return bindNull() + "::jsonb"
        case (.null, _): return bindNull()
        case (_, .json):
            var writer = JSONWriter()
            switch key {
            case .integer(let int): writer.int(int)
            case .real(let double): writer.double(double)
            case .text(let text): writer.string(text)
            case .null: writer.null()
            }
            return bind(String(decoding: writer.bytes, as: UTF8.self)) + "::jsonb"
        case (.integer(let int), _): return bind(int)
        case (.real(let double), _): return bind(double)
        case (.text(let text), _): return bind(text)
        }
    }

    /// Reads a sort key selected as text back into a cursor value.
    func keyValue(_ text: String?, sort index: Int) throws -> QueryKeyValue {
        guard let text else { return .null }
        switch sortExpressions[index].kind {
        case .text: return .text(text)
        case .integer: return Int64(text).map(QueryKeyValue.integer) ?? .text(text)
        case .real: return Double(text).map(QueryKeyValue.real) ?? .null
        case .json:
            if text.hasPrefix("\"") { return .text(try JSONDecoder().decode(String.self, from: Data(text.utf8))) }
            if let int = Int64(text) { return .integer(int) }
            if let double = Double(text) { return .real(double) }
            return .null
        }
    }

    // MARK: - Filters

    private static func systemColumn(_ field: QuerySystemField) -> (String, KeyKind) {
        switch field {
        case .recordName: ("record_name", .text)
        case .createdTimestamp: ("created_at", .integer)
        case .modifiedTimestamp: ("modified_at", .integer)
        case .createdUserRecordName: ("created_by", .text)
        case .modifiedUserRecordName: ("modified_by", .text)
        case .parent: ("parent_name", .text)
        case .share: ("share_name", .text)
        }
    }

    /// An operand as JSON, as stored fields hold it.
    private static func json(_ operand: QueryPlan.Operand, into writer: inout JSONWriter) {
        switch operand {
        case .integer(let integer): writer.int(integer)
        case .real(let real): writer.double(real)
        case .text(let text): writer.string(text)
        }
    }

    private static func json(_ operand: QueryPlan.Operand) -> String {
        var writer = JSONWriter()
        json(operand, into: &writer)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    private static func json(_ operands: [QueryPlan.Operand]) -> String {
        var writer = JSONWriter()
        writer.beginArray()
        for operand in operands { json(operand, into: &writer) }
        writer.endArray()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// The expression a filter reads and its operand bound as that expression's type: a system column's own type, or
    /// `jsonb`.
    private mutating func comparand(_ target: QueryPlan.Target, _ operand: QueryPlan.Operand) -> (expression: String, placeholder: String) {
        switch target {
        case .system(let system):
            let (column, _) = Self.systemColumn(system)
            switch operand {
            case .integer(let integer): return (column, bind(integer))
            case .real(let real): return (column, bind(real))
            case .text(let text): return (column, bind(text))
            }
        case .value(let name):
            indexedFields.insert(name)
            return (Self.fieldExpression(name), bind(Self.json(operand)) + "::jsonb")
        case .referenceName(let name):
            return (Self.referenceNameExpression(name), bind(Self.json(operand)) + "::jsonb")
        }
    }

    private static func referenceNameExpression(_ name: String) -> String { "(fields::jsonb) -> \(literal(name)) -> 'value' -> 'recordName'" }

    /// A field or system column as text, for prefix matching.
    private static func textExpression(_ target: QueryPlan.Target) -> String {
        switch target {
        case .system(let system): "\(systemColumn(system).0)::text"
        case .value(let name), .referenceName(let name): "((fields::jsonb) -> \(literal(name)) ->> 'value')"
        }
    }

    private mutating func add(_ condition: QueryPlan.Condition) {
        switch condition {
        case .compare(let target, let comparison, let operand):
            let (expression, placeholder) = comparand(target, operand)
            conditions.append("\(expression) \(comparison.rawValue) \(placeholder)")
        case .beginsWith(let target, let prefix, let negated):
            let condition = "starts_with(\(Self.textExpression(target)), \(bind(prefix)))"
            conditions.append(negated ? "NOT \(condition)" : condition)
        case .among(let target, let operands, let negated):
            let list = Self.json(operands)
            let condition: String
            switch target {
            case .system(let system):
                condition = "\(Self.systemColumn(system).0)::text IN (SELECT jsonb_array_elements_text(\(bind(list))::jsonb))"
            case .value(let name):
                indexedFields.insert(name)
                condition = "\(Self.fieldExpression(name)) IN (SELECT jsonb_array_elements(\(bind(list))::jsonb))"
            case .referenceName(let name):
                condition = "\(Self.referenceNameExpression(name)) IN (SELECT jsonb_array_elements(\(bind(list))::jsonb))"
            }
            conditions.append(negated ? "NOT \(condition)" : condition)
        case .listContains(let field, let operand, let references, let negated):
            let exists =
                "EXISTS (SELECT 1 FROM \(Self.elements(field)) WHERE \(Self.element(references)) = \(bind(Self.json(operand)))::jsonb)"
            conditions.append(negated ? "NOT \(exists)" : exists)
        case .listContainsAny(let field, let operands, let references, let negated):
            let wanted = bind(Self.json(operands))
            let exists =
                "EXISTS (SELECT 1 FROM \(Self.elements(field)) WHERE \(Self.element(references)) IN (SELECT jsonb_array_elements(\(wanted)::jsonb)))"
            conditions.append(negated ? "NOT \(exists)" : exists)
        case .listContainsAll(let field, let operands, let references, let negated):
            let wanted = bind(Self.json(operands))
            let all =
                "NOT EXISTS (SELECT 1 FROM jsonb_array_elements(\(wanted)::jsonb) AS w(value) WHERE w.value NOT IN "
                + "(SELECT \(Self.element(references)) FROM \(Self.elements(field))))"
            conditions.append(negated ? "NOT \(all)" : all)
        case .listMemberBeginsWith(let field, let prefix, let negated):
            let exists =
                "EXISTS (SELECT 1 FROM \(Self.elements(field)) WHERE jsonb_typeof(e.value) = 'string' AND starts_with(e.value #>> '{}', \(bind(prefix))))"
            conditions.append(negated ? "NOT \(exists)" : exists)
        case .near(let field, let center, let distance):
            let latitude = "(((fields::jsonb) -> \(Self.literal(field)) -> 'value' ->> 'latitude')::float8)"
            // A bounding box first, so the exact distance is computed only for nearby rows.
            let latitudeDelta = distance / 6_371_008.8 * 180 / .pi
            conditions.append("\(latitude) BETWEEN \(bind(center.latitude - latitudeDelta)) AND \(bind(center.latitude + latitudeDelta))")
            conditions.append(
                "\(Self.distanceExpression(field: field, latitude: center.latitude, longitude: center.longitude)) <= \(bind(distance))")
        }
    }

    /// A list field's elements, as `e(value)`; a field that is not a list (or is missing) has none, rather than failing
    /// the statement.
    private static func elements(_ field: String) -> String {
        let list = fieldExpression(field)
        return "jsonb_array_elements(CASE WHEN jsonb_typeof(\(list)) = 'array' THEN \(list) ELSE '[]'::jsonb END) AS e(value)"
    }

    /// What an element compares: itself, or a reference's record name.
    private static func element(_ references: Bool) -> String { references ? "(e.value -> 'recordName')" : "e.value" }

    /// Great-circle distance in metres, in SQL (haversine), from a location field to a point given as literals, so
    /// the expression can repeat in the keyset condition.
    private static func distanceExpression(field name: String, latitude: Double, longitude: Double) -> String {
        let location = "(fields::jsonb) -> \(literal(name)) -> 'value'"
        let lat = "((\(location) ->> 'latitude')::float8)"
        let lon = "((\(location) ->> 'longitude')::float8)"
        return """
            (2 * 6371008.8 * asin(least(1, sqrt(power(sin(radians(\(latitude) - \(lat)) / 2), 2) \
            + cos(radians(\(lat))) * cos(radians(\(latitude))) * power(sin(radians(\(longitude) - \(lon)) / 2), 2)))))
            """
    }

    // MARK: - Sorts

    private mutating func add(_ order: QueryPlan.Order) {
        switch order {
        case .system(let system, let ascending):
            let (column, kind) = Self.systemColumn(system)
            sortExpressions.append((column, ascending, kind))
        case .distance(let field, let location, let ascending):
            sortExpressions.append(
                (Self.distanceExpression(field: field, latitude: location.latitude, longitude: location.longitude), ascending, .real))
        case .value(let field, let ascending):
            indexedFields.insert(field)
            sortExpressions.append((Self.fieldExpression(field), ascending, .json))
        }
    }
}
