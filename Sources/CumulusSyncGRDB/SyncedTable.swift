import Crypto
public import CumulusClient
public import CumulusModel
import Foundation
import GRDB

/// A column of a synced table and the record field it maps to.
public struct SyncedColumn: Sendable, Hashable {
    public var column: String
    public var field: String
    /// `STRING` (TEXT), `INT64` (INTEGER), `DOUBLE` (REAL), `TIMESTAMP` (INTEGER milliseconds), `BYTES` (BLOB), or
    /// `ASSETID` (TEXT: the path of a local file, uploaded when it changed; fetched records write the path of the
    /// downloaded file, so the engine needs `assetDownloads: .onFetch(directory:)`).
    public var type: FieldType

    public init(_ column: String, field: String? = nil, type: FieldType) {
        self.column = column
        self.field = field ?? column
        self.type = type
    }
}

/// How a GRDB table maps to a record type: each row is a record named by its primary key (a UUID string).
///
/// ```swift
/// let drives = SyncedTable(
///     tableName: "drives", recordType: "Drive", zoneID: ZoneID(zoneName: "Drives"),
///     columns: [SyncedColumn("distance", type: .double), SyncedColumn("coordinatesData", type: .bytes)],
///     modificationColumn: "modifiedAt"
/// )
/// ```
public struct SyncedTable: Sendable, Hashable {
    public var tableName: String
    public var recordType: String
    public var zoneID: ZoneID
    public var primaryKey: String
    public var columns: [SyncedColumn]
    /// A column holding the parent's primary key: it becomes the record's `parent` (shares follow it), and a new row
    /// goes to its parent's zone, database and owner (see ``GRDBSyncRouter``).
    public var parentColumn: String?
    /// The table of the parent rows; `nil` when parents are rows of this table (folders in folders). Tables of one
    /// hierarchy name the same zone, as CloudKit keeps a hierarchy in one zone.
    public var parentTable: String?
    /// An INTEGER column of milliseconds set on every local edit: conflicts keep the later edit.
    public var modificationColumn: String?
    /// A TEXT column holding the zone owner's user record name, for a table that holds rows of several owners' zones
    /// of the same name (a participant's shared store: "even when they have the same name, they have different
    /// owners"). Rows are then keyed by (owner, primary key): the table needs a unique index on those two columns.
    public var ownerColumn: String?

    public init(
        tableName: String, recordType: String, zoneID: ZoneID, primaryKey: String = "id", columns: [SyncedColumn], parentColumn: String? = nil,
        parentTable: String? = nil, modificationColumn: String? = nil, ownerColumn: String? = nil
    ) {
        self.tableName = tableName
        self.recordType = recordType
        self.zoneID = zoneID
        self.primaryKey = primaryKey
        self.columns = columns
        self.parentColumn = parentColumn
        self.parentTable = parentTable
        self.modificationColumn = modificationColumn
        self.ownerColumn = ownerColumn
    }

    /// The record ID of a row of a table with one zone.
    public func recordID(_ primaryKey: String) -> RecordID { RecordID(recordName: primaryKey, zoneID: zoneID) }

    /// The record ID of a row in the zone of `owner` (with ``ownerColumn``), or in the table's own zone.
    public func recordID(_ primaryKey: String, owner: String?) -> RecordID {
        guard ownerColumn != nil, let owner else { return recordID(primaryKey) }
        return RecordID(recordName: primaryKey, zoneID: ZoneID(zoneName: zoneID.zoneName, ownerRecordName: owner))
    }

    /// Whether a zone's records belong in this table: same name, and the same owner unless rows carry their owner. A
    /// table whose zone names no owner is the current user's own zone, which the server names with the user's name.
    public func holds(_ zone: ZoneID) -> Bool {
        if ownerColumn != nil { return zone.zoneName == zoneID.zoneName }
        return zoneID.isSameZone(as: zone)
    }

    /// The SQL condition and argument that select the rows of one record: by primary key, and owner if rows carry one.
    private func rowCondition(_ id: RecordID) -> (String, StatementArguments) {
        if let ownerColumn {
            return ("\(Self.quoted(primaryKey)) = ? AND \(Self.quoted(ownerColumn)) = ?", [id.recordName, id.zoneID.ownerRecordName ?? ""])
        }
        return ("\(Self.quoted(primaryKey)) = ?", [id.recordName])
    }

    /// An SQL identifier. Pure Swift: it runs for every column of every fetched row, where Foundation's
    /// `replacingOccurrences` took a tenth of an initial sync.
    static func quoted(_ name: String) -> String {
        guard name.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + name + "\"" }
        return "\"" + name.split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"") + "\""
    }

    /// All mapped columns, the modification column included as an INT64 field of the same name.
    var allColumns: [SyncedColumn] {
        var all = columns
        if let modificationColumn, !columns.contains(where: { $0.column == modificationColumn }) {
            all.append(SyncedColumn(modificationColumn, type: .int64))
        }
        return all
    }

    /// Reads a row into a record. An asset column's file goes into ``CloudRecord/assetFiles`` to be uploaded, unless
    /// it is the file of the server's last version (`ancestor`), whose asset the record then keeps.
    func record(_ id: RecordID, ancestor: ServerFields? = nil, in db: Database) throws -> CloudRecord? {
        var selected = allColumns.map { Self.quoted($0.column) }
        if let parentColumn { selected.append(Self.quoted(parentColumn)) }
        let (condition, arguments) = rowCondition(id)
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT \(selected.joined(separator: ", ")) FROM \(Self.quoted(tableName)) WHERE \(condition)"),
                arguments: arguments
            )
        else { return nil }
        var record = CloudRecord(recordType: recordType, recordID: recordID(id.recordName, owner: id.zoneID.ownerRecordName))
        for (index, column) in allColumns.enumerated() {
            let value: DatabaseValue = row[index]
            if column.type == .asset {
                if case .string(let path) = value.storage { try Self.attach(path, to: &record, field: column.field, ancestor: ancestor) }
                continue
            }
            if let field = Self.fieldValue(value, type: column.type) { record.fields[column.field] = field }
        }
        if let parentColumn { record.parent = row[parentColumn] }
        return record
    }

    /// Puts a local file into an asset field: the server's asset when the file is the one it holds (no upload),
    /// else the file, to upload, with its checksum as the field's value, so a merge sees a change.
    static func attach(_ path: String, to record: inout CloudRecord, field: String, ancestor: ServerFields?) throws {
        let file = URL(fileURLWithPath: path)
        let (checksum, size) = try checksum(of: file)
        if case .asset(let held)? = ancestor?.values[field], held.fileChecksum == checksum {
            var kept = held
            kept.downloadURL = nil
            record.fields[field] = .asset(kept)
        } else {
            record.fields[field] = .asset(Asset(fileChecksum: checksum, size: size))
            record.assetFiles[field] = file
        }
    }

    /// A file's SHA-256, base64 (as the server's `fileChecksum`), and size, read in chunks.
    static func checksum(of file: URL) throws -> (String, Int64) {
        let handle = try FileHandle(forReadingFrom: file)
        defer { try? handle.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            hasher.update(data: chunk)
            size += Int64(chunk.count)
        }
        return (Data(hasher.finalize()).base64EncodedString(), size)
    }

    /// What a column holds when a record lacks its field: its `DEFAULT` (NULL when it has none), by column name. A
    /// default that is not a constant (`CURRENT_TIMESTAMP`, a function, an expression in parentheses) is unknown, and
    /// left out: such a column keeps the row's value.
    func columnDefaults(in db: Database) throws -> [String: DatabaseValue] {
        var defaults: [String: DatabaseValue] = [:]
        let mapped = Set(allColumns.filter { $0.type != .asset }.map(\.column))
        for column in try db.columns(in: tableName) where mapped.contains(column.name) {
            guard let sql = column.defaultValueSQL else {
                if !column.isNotNull { defaults[column.name] = .null }
                continue
            }
            let upper = sql.uppercased()
            guard !upper.contains("("), !upper.contains("CURRENT_"), !upper.contains("RANDOM") else { continue }
            defaults[column.name] = try DatabaseValue.fetchOne(db, sql: "SELECT \(sql)") ?? .null
        }
        return defaults
    }

    /// Writes a fetched record into its row. A field the record lacks is the column's default, as in a new row: the
    /// server's version has no value there (another device removed it, or never set it), and a value kept from before
    /// would be one the server does not hold.
    func upsert(_ record: CloudRecord, in db: Database) throws {
        try upsert([record], in: db)
    }

    /// Writes fetched records into their rows: one multi-row statement per set of present columns (usually one per
    /// page of a feed), as per-row statements cost more than the rows themselves. Fields a record lacks take their
    /// column's default (``columnDefaults(in:)``); an asset column without a downloaded file keeps the row's value.
    func upsert(_ records: [CloudRecord], in db: Database) throws {
        guard !records.isEmpty else { return }
        let columns = allColumns
        // Read only when some record lacks a field: most pages carry every field of every record.
        var defaults: [String: DatabaseValue]?
        // Which columns each record carries, as a bit set: records with the same set share a statement.
        var groups: [[Bool]: [CloudRecord]] = [:]
        // An asset column is written from the downloaded file's path; without one it keeps the row's value.
        for record in records {
            groups[columns.map { $0.type == .asset ? record.downloadedAssets[$0.field] != nil : record.fields[$0.field] != nil }, default: []]
                .append(record)
        }
        for (present, group) in groups {
            var names = [Self.quoted(primaryKey)]
            var conflictTarget = Self.quoted(primaryKey)
            if let ownerColumn {
                names.append(Self.quoted(ownerColumn))
                conflictTarget = "\(Self.quoted(ownerColumn)), \(Self.quoted(primaryKey))"
            }
            let keyCount = names.count
            var mapped = zip(columns, present).filter(\.1).map(\.0)
            let absent = zip(columns, present).filter { !$0.1 && $0.0.type != .asset }.map(\.0)
            if !absent.isEmpty {
                let known = try defaults ?? columnDefaults(in: db)
                defaults = known
                mapped += absent.filter { known[$0.column] != nil }
            }
            names += mapped.map { Self.quoted($0.column) }
            if let parentColumn { names.append(Self.quoted(parentColumn)) }
            let updates = names.dropFirst(keyCount).map { "\($0) = excluded.\($0)" }
            let tuple = "(" + Array(repeating: "?", count: names.count).joined(separator: ", ") + ")"
            // SQLite allows 32,766 parameters per statement.
            let rowsPerStatement = max(1, 32_000 / names.count)
            var start = 0
            while start < group.count {
                let chunk = group[start..<min(start + rowsPerStatement, group.count)]
                start += chunk.count
                var values: [DatabaseValue] = []
                values.reserveCapacity(chunk.count * names.count)
                for record in chunk {
                    values.append(record.recordID.recordName.databaseValue)
                    if ownerColumn != nil { values.append((record.recordID.zoneID.ownerRecordName ?? "").databaseValue) }
                    for column in mapped {
                        if column.type == .asset {
                            values.append(record.downloadedAssets[column.field].map { $0.path.databaseValue } ?? .null)
                        } else {
                            values.append(record.fields[column.field].map(Self.databaseValue) ?? defaults?[column.column] ?? .null)
                        }
                    }
                    if parentColumn != nil { values.append(record.parent?.databaseValue ?? .null) }
                }
                let sql =
                    "INSERT INTO \(Self.quoted(tableName)) (\(names.joined(separator: ", "))) VALUES "
                    + Array(repeating: tuple, count: chunk.count).joined(separator: ", ")
                    + (updates.isEmpty
                        ? " ON CONFLICT DO NOTHING" : " ON CONFLICT (\(conflictTarget)) DO UPDATE SET \(updates.joined(separator: ", "))")
                // A full page repeats the same text: prepared once, reused.
                try db.cachedStatement(sql: sql).execute(arguments: StatementArguments(values))
            }
        }
    }

    func delete(_ id: RecordID, in db: Database) throws {
        let (condition, arguments) = rowCondition(id)
        try db.cachedStatement(sql: "DELETE FROM \(Self.quoted(tableName)) WHERE \(condition)").execute(arguments: arguments)
    }

    /// Deletes the rows of a zone: all of them, or those of its owner when rows carry one.
    func deleteRows(of zone: ZoneID, in db: Database) throws {
        if let ownerColumn {
            try db.execute(
                sql: "DELETE FROM \(Self.quoted(tableName)) WHERE \(Self.quoted(ownerColumn)) = ?", arguments: [zone.ownerRecordName ?? ""])
        } else {
            try db.execute(sql: "DELETE FROM \(Self.quoted(tableName))")
        }
    }

    /// The record IDs of a zone's rows.
    func recordIDs(of zone: ZoneID, in db: Database) throws -> [RecordID] {
        if let ownerColumn {
            let owner = zone.ownerRecordName ?? ""
            return try String.fetchAll(
                db, sql: "SELECT \(Self.quoted(primaryKey)) FROM \(Self.quoted(tableName)) WHERE \(Self.quoted(ownerColumn)) = ?", arguments: [owner]
            ).map { recordID($0, owner: owner) }
        }
        return try String.fetchAll(db, sql: "SELECT \(Self.quoted(primaryKey)) FROM \(Self.quoted(tableName))").map { recordID($0) }
    }

    static func fieldValue(_ value: DatabaseValue, type: FieldType) -> FieldValue? {
        switch (value.storage, type) {
        case (.null, _): nil
        case (.string(let text), .string): .string(text)
        case (.int64(let int), .int64): .int64(int)
        case (.double(let double), .int64): .int64(Int64(double))
        case (.int64(let int), .double): .double(Double(int))
        case (.double(let double), .double): .double(double)
        case (.int64(let int), .timestamp): .timestamp(int)
        case (.double(let double), .timestamp): .timestamp(Int64(double))
        case (.blob(let data), .bytes): .bytes(data)
        case (.string(let text), .bytes): .bytes(Data(text.utf8))
        default: nil
        }
    }

    static func databaseValue(_ field: FieldValue) -> DatabaseValue {
        switch field {
        case .string(let text): text.databaseValue
        case .int64(let int): int.databaseValue
        case .double(let double): double.databaseValue
        case .timestamp(let milliseconds): milliseconds.databaseValue
        case .bytes(let data): data.databaseValue
        case .reference(let reference): reference.recordName.databaseValue
        default: .null
        }
    }
}
