import CumulusStore
import Foundation
import GRDB

/// Backups of an SQLite store, for `cumulus backup` and `cumulus restore`.
extension SQLiteRecordStore {
    /// Writes a consistent copy of the database at `source` to a new file at `destination`, with SQLite's online backup
    /// from one read snapshot: a server may keep writing meanwhile, and the copy holds every commit before the snapshot
    /// and none after.
    public static func backup(databaseAt source: String, to destination: String) throws {
        guard FileManager.default.fileExists(atPath: source) else { throw StoreError(.notFound, "no database at \(source)") }
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw StoreError(.duplicate, "\(destination) exists; a backup never overwrites a file")
        }
        do {
            var configuration = GRDB.Configuration()
            configuration.readonly = true
            let pool = try DatabasePool(path: source, configuration: configuration)
            let copy = try DatabaseQueue(path: destination)
            try pool.backup(to: copy)
            try copy.close()
            try pool.close()
        } catch let error as StoreError {
            throw error
        } catch {
            try? FileManager.default.removeItem(atPath: destination)
            throw storeError(error, "the backup failed")
        }
    }

    /// Replaces the database at `destination` (created if missing) with the backup at `backup`, after checking that
    /// the backup is a whole Cumulus database. Stop the server first: it keeps caches of what it read.
    ///
    /// The restored store gets a new token secret, so devices' change tokens from after the backup (which would point
    /// past changes made again since) are refused and the devices fetch from scratch. Users stay signed in.
    public static func restore(backupAt backup: String, to destination: String) throws {
        guard FileManager.default.fileExists(atPath: backup) else { throw StoreError(.notFound, "no backup at \(backup)") }
        do {
            var configuration = GRDB.Configuration()
            configuration.readonly = true
            let source = try DatabaseQueue(path: backup, configuration: configuration)
            let check = try source.read { db in
                (
                    try String.fetchOne(db, sql: "PRAGMA quick_check"),
                    try db.tableExists("containers") && db.tableExists("records") && db.tableExists("grdb_migrations")
                )
            }
            guard check.0 == "ok" else { throw StoreError(.corrupt, "\(backup) is damaged: \(check.0 ?? "no answer")") }
            guard check.1 else { throw StoreError(.invalidState, "\(backup) is not a Cumulus database") }
            let target = try DatabasePool(path: destination)
            try source.backup(to: target)
            try target.write { try $0.execute(sql: "DELETE FROM server_secrets") }
            try target.close()
            try source.close()
        } catch let error as StoreError {
            throw error
        } catch {
            throw storeError(error, "the restore failed")
        }
    }
}
