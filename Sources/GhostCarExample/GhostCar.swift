import CumulusClient
public import CumulusModel
public import CumulusSyncGRDB
import Foundation
public import GRDB

/// The Ghost Car example (seed 000): a flat `drives` table, coordinates as one encoded blob, synced with Cumulus.
/// docs/SYNC.md walks through this same code.
public enum GhostCar {
    /// The custom zone the drives live in.
    public static let zone = ZoneID(zoneName: "Drives")

    /// The `drives` table as a record type: one row, one `Drive` record; the later `modifiedAt` wins conflicts.
    public static func drivesTable(zone: ZoneID = zone) -> SyncedTable {
        SyncedTable(
            tableName: "drives", recordType: "Drive", zoneID: zone,
            columns: [
                SyncedColumn("startTime", type: .timestamp), SyncedColumn("duration", type: .double), SyncedColumn("distance", type: .double),
                SyncedColumn("averageSpeed", type: .double), SyncedColumn("maxSpeed", type: .double), SyncedColumn("coordinatesData", type: .bytes),
                SyncedColumn("customName", type: .string),
            ],
            modificationColumn: "modifiedAt"
        )
    }

    /// The app's own schema: every column has a default or is optional, as CloudKit-synced models need.
    public static func migrate(_ writer: any DatabaseWriter) throws {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("drives") { db in
            try db.execute(
                sql: """
                    CREATE TABLE drives (
                        id TEXT PRIMARY KEY NOT NULL,
                        startTime INTEGER NOT NULL DEFAULT 0,
                        duration REAL NOT NULL DEFAULT 0,
                        distance REAL NOT NULL DEFAULT 0,
                        averageSpeed REAL NOT NULL DEFAULT 0,
                        maxSpeed REAL NOT NULL DEFAULT 0,
                        coordinatesData BLOB NOT NULL DEFAULT x'',
                        customName TEXT,
                        modifiedAt INTEGER NOT NULL DEFAULT 0
                    )
                    """
            )
        }
        try migrator.migrate(writer)
    }
}
