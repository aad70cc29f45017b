public import CumulusClient
public import CumulusModel
public import CumulusSyncGRDB
public import Foundation
public import GRDB

/// One device of the Ghost Car app: its own SQLite file with the `drives` table, a sync store and adapter in it, and a
/// sync engine keeping it in step. `swift run GhostCarDemo` and the sync tests drive it.
public final class GhostCarDevice: @unchecked Sendable {
    // Used by one task, one step at a time.
    public let path: String
    public let queue: DatabaseQueue
    public let store: GRDBSyncStore
    public let adapter: GRDBSyncAdapter
    public var engine: SyncEngine
    public let zone: ZoneID

    private let configure: @Sendable (inout SyncEngine.Configuration) -> Void

    /// - Parameters:
    ///   - configure: Changes the engine's configuration (its retry policy, say) before the engine is made.
    ///   - onReport: What the adapter reports of each fetch.
    public init(
        path: String, database: CloudDatabase, scope: String = "private", zone: ZoneID = GhostCar.zone,
        configure: @escaping @Sendable (inout SyncEngine.Configuration) -> Void = { _ in },
        onReport: (@Sendable (GRDBSyncAdapter.Report) -> Void)? = nil
    ) throws {
        self.path = path
        self.zone = zone
        self.configure = configure
        queue = try DatabaseQueue(path: path)
        try GhostCar.migrate(queue)
        store = try GRDBSyncStore(writer: queue, scope: scope)
        adapter = try GRDBSyncAdapter(writer: queue, store: store, tables: [GhostCar.drivesTable(zone: zone)], onReport: onReport)
        engine = SyncEngine(Self.engineConfiguration(database: database, store: store, adapter: adapter, configure: configure))
    }

    private static func engineConfiguration(
        database: CloudDatabase, store: GRDBSyncStore, adapter: GRDBSyncAdapter, configure: (inout SyncEngine.Configuration) -> Void
    ) -> SyncEngine.Configuration {
        var configuration = SyncEngine.Configuration(database: database, stateStore: store, delegate: adapter)
        configure(&configuration)
        return configuration
    }

    /// Points the engine at another server address (a restarted server), keeping all local state.
    public func reconnect(_ database: CloudDatabase) {
        engine = SyncEngine(Self.engineConfiguration(database: database, store: store, adapter: adapter, configure: configure))
    }

    /// Records a drive: the row and its pending change in one transaction.
    @discardableResult
    public func recordDrive(id: String = UUID().uuidString, name: String?, distance: Double, at time: Int64) throws -> String {
        try queue.write { db in
            let coordinates = try JSONEncoder().encode([["lat": 51.5, "lon": -0.12], ["lat": 51.51, "lon": -0.13]])
            try db.execute(
                sql: """
                    INSERT INTO drives (id, startTime, duration, distance, averageSpeed, maxSpeed, coordinatesData, customName, modifiedAt)
                    VALUES (?, ?, 600, ?, 10, 20, ?, ?, ?)
                    """,
                arguments: [id, time, distance, coordinates, name, time]
            )
            try store.enqueue([.saveRecord(RecordID(recordName: id, zoneID: zone))], in: db)
        }
        return id
    }

    /// Records `count` bare drives (`drive-0000`, `drive-0001`, …) with their pending changes, in one transaction.
    public func recordNumberedDrives(_ count: Int) async throws {
        try await queue.write { [store, zone] db in
            for index in 0..<count {
                let id = String(format: "drive-%04d", index)
                try db.execute(sql: "INSERT INTO drives (id, distance, modifiedAt) VALUES (?, ?, 1)", arguments: [id, Double(index)])
                try store.enqueue([.saveRecord(RecordID(recordName: id, zoneID: zone))], in: db)
            }
        }
    }

    public func rename(_ id: String, to name: String, at time: Int64) throws {
        try queue.write { db in
            try db.execute(sql: "UPDATE drives SET customName = ?, modifiedAt = ? WHERE id = ?", arguments: [name, time, id])
            try store.enqueue([.saveRecord(RecordID(recordName: id, zoneID: zone))], in: db)
        }
    }

    /// Changes the distance only (another field than ``rename(_:to:at:)``).
    public func setDistance(_ id: String, to distance: Double, at time: Int64) throws {
        try queue.write { db in
            try db.execute(sql: "UPDATE drives SET distance = ?, modifiedAt = ? WHERE id = ?", arguments: [distance, time, id])
            try store.enqueue([.saveRecord(RecordID(recordName: id, zoneID: zone))], in: db)
        }
    }

    public func distances() throws -> [String: Double] {
        try queue.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, distance FROM drives").map { ($0[0] as String, $0[1] as Double) })
        }
    }

    public func delete(_ id: String) throws {
        try queue.write { db in
            try db.execute(sql: "DELETE FROM drives WHERE id = ?", arguments: [id])
            try store.enqueue([.deleteRecord(RecordID(recordName: id, zoneID: zone))], in: db)
        }
    }

    public func names() throws -> [String: String?] {
        try queue.read { db in
            Dictionary(
                uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, customName FROM drives").map { ($0[0] as String, $0[1] as String?) })
        }
    }

    public func count() throws -> Int { try queue.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM drives") ?? 0 } }

    /// What the device's table holds, in words: `“Morning commute”, 12.4 km; …`.
    public func describe() throws -> String {
        let rows = try queue.read { db in try Row.fetchAll(db, sql: "SELECT customName, distance FROM drives ORDER BY startTime, id") }
        guard !rows.isEmpty else { return "no drives" }
        return rows.map { row in
            let name: String = row[0] ?? "a drive"
            let distance: Double = row[1]
            return "“\(name)”, \(String(format: "%.1f", distance / 1000)) km"
        }.joined(separator: "; ")
    }
}
