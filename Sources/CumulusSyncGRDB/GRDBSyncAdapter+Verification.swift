public import CumulusClient
public import CumulusModel
import Foundation
import GRDB

extension GRDBSyncAdapter: SyncVerifyingDelegate {
    /// What this device holds of a zone, read from the app's tables in one read: each row with the change tag of the
    /// version it was given; a row whose values differ from that version with no edit waiting is listed as altered,
    /// a row the server never gave as unknown, and a row deleted behind the engine's back is absent, so
    /// ``SyncEngine/verify(_:)`` finds each. Records no table holds (share records, types the app does not map) are
    /// held as their last version.
    ///
    /// Asset columns are not compared (their files are the app's); a field the server's version did not carry must hold
    /// its column's default.
    public func localRecordVersions(in zoneID: ZoneID, syncEngine: SyncEngine) async throws -> LocalRecordVersions {
        let shared = syncEngine.configuration.database.scope == .shared
        let zone = normalizedZone(zoneID, shared: shared)
        let store = self.store
        let tables = self.tables.filter { $0.holds(zone) }
        return try await writer.read { db in
            let metadata = try store.metadata(of: zone, in: db)
            let pending = try store.pendingNames(of: zone, in: db)
            var versions: [String: String] = [:]
            var rows = Set<String>()
            for table in tables {
                let defaults = try table.columnDefaults(in: db)
                try table.forEachRow(of: zone, in: db) { name, fields in
                    rows.insert(name)
                    guard let held = metadata[name], let tag = held.changeTag else {
                        // A row the server never gave: its creation waits to be sent, or it appeared behind the engine.
                        if !pending.contains(name) { versions[name] = LocalRecordVersions.unknownTag }
                        return
                    }
                    if !pending.contains(name), let ancestor = held.serverFields, table.differs(fields, from: ancestor, defaults: defaults) {
                        versions[name] = LocalRecordVersions.alteredTag(tag)
                    } else {
                        versions[name] = tag
                    }
                }
            }
            for (name, held) in metadata where !rows.contains(name) {
                guard let tag = held.changeTag else { continue }
                // Kept without a row (no table holds its type), or its deletion waits to be sent: the device holds
                // that version. A row of a mapped type that is gone with nothing pending is missing.
                let mapped = tables.contains { $0.recordType == held.recordType }
                if !mapped || pending.contains(name) { versions[name] = tag }
            }
            return LocalRecordVersions(versions: versions, pending: pending)
        }
    }
}

extension SyncedTable {
    /// Calls `body` with each row of a zone: its primary key and its non-asset fields, in one statement.
    func forEachRow(of zone: ZoneID, in db: Database, _ body: (String, [String: FieldValue]) throws -> Void) throws {
        let columns = allColumns.filter { $0.type != .asset }
        let selected = ([primaryKey] + columns.map(\.column)).map(Self.quoted).joined(separator: ", ")
        var sql = "SELECT \(selected) FROM \(Self.quoted(tableName))"
        var arguments: StatementArguments = []
        if let ownerColumn {
            sql += " WHERE \(Self.quoted(ownerColumn)) = ?"
            arguments = [zone.ownerRecordName ?? ""]
        }
        let rows = try Row.fetchCursor(db, sql: sql, arguments: arguments)
        while let row = try rows.next() {
            var fields: [String: FieldValue] = [:]
            for (index, column) in columns.enumerated() {
                if let value = Self.fieldValue(row[index + 1], type: column.type) { fields[column.field] = value }
            }
            try body(row[0], fields)
        }
    }

    /// Whether a row's fields differ from the version it was given: a field that version carried holds another value,
    /// or a field it lacked holds something other than the column's default (`defaults`, ``columnDefaults(in:)``;
    /// a column whose default is unknown is not compared there).
    func differs(_ fields: [String: FieldValue], from version: ServerFields, defaults: [String: DatabaseValue]) -> Bool {
        allColumns.contains { column in
            guard column.type != .asset else { return false }
            if version.carries(column.field) { return !version.holds(column.field, fields[column.field]) }
            guard let fallback = defaults[column.column] else { return false }
            return fields[column.field] != Self.fieldValue(fallback, type: column.type)
        }
    }
}

extension ServerFields {
    /// Whether this version carried `field`.
    func carries(_ field: String) -> Bool { values[field] != nil || digests[field] != nil }
}

extension GRDBSyncStore {
    /// The records this device keeps a version of in a zone: type, change tag and last server fields, in one read.
    func metadata(of zone: ZoneID, in db: Database) throws -> [String: (recordType: String, changeTag: String?, serverFields: ServerFields?)] {
        var held: [String: (recordType: String, changeTag: String?, serverFields: ServerFields?)] = [:]
        let rows = try Row.fetchCursor(
            db,
            sql:
                "SELECT record_name, record_type, change_tag, server_fields FROM cumulus_sync_metadata WHERE scope = ? AND zone_name = ? AND owner = ?",
            arguments: [scope, zone.zoneName, Self.owner(zone)])
        while let row = try rows.next() {
            let bytes: [UInt8]? = (row[3] as Data?).map { Array($0) }
            held[row[0]] = (row[1], row[2], bytes.flatMap(ServerFieldsCoding.decode))
        }
        return held
    }

    /// The records of a zone with a change waiting to be sent.
    func pendingNames(of zone: ZoneID, in db: Database) throws -> Set<String> {
        Set(
            try String.fetchAll(
                db, sql: "SELECT record_name FROM cumulus_sync_pending WHERE scope = ? AND zone_name = ? AND owner = ? AND record_name <> ''",
                arguments: [scope, zone.zoneName, Self.owner(zone)]))
    }
}
