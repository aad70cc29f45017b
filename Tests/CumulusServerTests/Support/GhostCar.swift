import CumulusClient
import CumulusModel
import CumulusSyncGRDB
import Foundation
import GRDB
import GhostCarExample

/// One device: its own SQLite file, sync store, adapter and engine.
final class Device: @unchecked Sendable {
    // Mutated only by the test that owns the device, one step at a time.
    let path: String
    let queue: DatabaseQueue
    let store: GRDBSyncStore
    let adapter: GRDBSyncAdapter
    var engine: SyncEngine
    let zone: ZoneID

    init(
        path: String, database: CloudDatabase, scope: String = "private", zone: ZoneID = GhostCar.zone,
        onReport: (@Sendable (GRDBSyncAdapter.Report) -> Void)? = nil
    ) throws {
        self.path = path
        self.zone = zone
        queue = try DatabaseQueue(path: path)
        try GhostCar.migrate(queue)
        store = try GRDBSyncStore(writer: queue, scope: scope)
        adapter = try GRDBSyncAdapter(writer: queue, store: store, tables: [GhostCar.drivesTable(zone: zone)], onReport: onReport)
        engine = SyncEngine(Self.configuration(database: database, store: store, adapter: adapter))
    }

    static func configuration(database: CloudDatabase, store: GRDBSyncStore, adapter: GRDBSyncAdapter) -> SyncEngine.Configuration {
        // Retries back off in milliseconds here, so offline tests stay fast.
        SyncEngine.Configuration(
            database: database, stateStore: store, delegate: adapter, retryPolicy: RetryPolicy(maximumAttempts: 3, initialDelay: .milliseconds(10)),
            sleep: { try await Task.sleep(for: min($0, .milliseconds(50))) }
        )
    }

    /// Points the engine at another server address (a restarted server), keeping all local state.
    func reconnect(_ database: CloudDatabase) {
        engine = SyncEngine(Self.configuration(database: database, store: store, adapter: adapter))
    }

    /// Records a drive: the row and its pending change in one transaction.
    @discardableResult
    func recordDrive(id: String = UUID().uuidString, name: String?, distance: Double, at time: Int64) throws -> String {
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
    func recordNumberedDrives(_ count: Int) async throws {
        try await queue.write { [store, zone] db in
            for index in 0..<count {
                let id = String(format: "drive-%04d", index)
                try db.execute(sql: "INSERT INTO drives (id, distance, modifiedAt) VALUES (?, ?, 1)", arguments: [id, Double(index)])
                try store.enqueue([.saveRecord(RecordID(recordName: id, zoneID: zone))], in: db)
            }
        }
    }

    func rename(_ id: String, to name: String, at time: Int64) throws {
        try queue.write { db in
            try db.execute(sql: "UPDATE drives SET customName = ?, modifiedAt = ? WHERE id = ?", arguments: [name, time, id])
            try store.enqueue([.saveRecord(RecordID(recordName: id, zoneID: zone))], in: db)
        }
    }

    /// Changes the distance only (another field than ``rename(_:to:at:)``).
    func setDistance(_ id: String, to distance: Double, at time: Int64) throws {
        try queue.write { db in
            try db.execute(sql: "UPDATE drives SET distance = ?, modifiedAt = ? WHERE id = ?", arguments: [distance, time, id])
            try store.enqueue([.saveRecord(RecordID(recordName: id, zoneID: zone))], in: db)
        }
    }

    func distances() throws -> [String: Double] {
        try queue.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, distance FROM drives").map { ($0[0] as String, $0[1] as Double) })
        }
    }

    func delete(_ id: String) throws {
        try queue.write { db in
            try db.execute(sql: "DELETE FROM drives WHERE id = ?", arguments: [id])
            try store.enqueue([.deleteRecord(RecordID(recordName: id, zoneID: zone))], in: db)
        }
    }

    func names() throws -> [String: String?] {
        try queue.read { db in
            Dictionary(
                uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, customName FROM drives").map { ($0[0] as String, $0[1] as String?) })
        }
    }

    func count() throws -> Int { try queue.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM drives") ?? 0 } }
}
