import CumulusCore
import CumulusStore
import Logging

/// Deletes what no record holds: receipts never saved in a record (after ``AssetLimits/unattachedLifetime``), receipts
/// whose record dropped them or was deleted, or whose zone was deleted (after ``AssetLimits/detachedGrace``; kept as
/// long as the record history when it is on, out of the uploader's quota), and the
/// files no receipt names any more.
struct AssetCleanup: Sendable {
    let database: DatabaseService
    let storage: any AssetStorage
    let clock: WallClock
    let limits: AssetLimits

    /// One pass; answers how many files it deleted.
    @discardableResult
    func run(logger: Logger) async throws -> Int {
        let now = clock.milliseconds()
        func milliseconds(_ duration: Duration) -> Int64 { duration.components.seconds * 1000 }
        let files = try await database.assets.collectGarbage(
            unattachedBefore: now - milliseconds(limits.unattachedLifetime), detachedBefore: now - milliseconds(limits.detachedGrace), logger: logger)
        // The receipts are gone first: a file is never deleted while a receipt still names it.
        try await storage.delete(fileIDs: files)
        return files.count
    }
}
