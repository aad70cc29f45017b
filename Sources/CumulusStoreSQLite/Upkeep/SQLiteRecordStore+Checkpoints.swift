public import CumulusStore
import Foundation
import GRDB
public import Logging
import Synchronization

/// Write-ahead log checkpoints off the request path.
///
/// SQLite copies its write-ahead log into the database file (a checkpoint, with an `fdatasync`) inside whichever commit
/// finds the log past 1,000 pages: that request waits for it, and so does every write queued behind it. While a server
/// runs, the store's writer does not checkpoint; a connection of the maintenance task's own runs passive checkpoints,
/// which never block a writer or a reader, every ``SQLiteRecordStore/Configuration/checkpointInterval``.
extension SQLiteRecordStore: BackgroundMaintenance {
    public func maintainInBackground(logger: Logger) async {
        // An in-memory store has no log to checkpoint.
        guard let path, writer is DatabasePool else { return }
        let checkpointer: DatabaseQueue
        do {
            var configuration = GRDB.Configuration()
            configuration.busyMode = .timeout(busyTimeout)
            configuration.label = "cumulus.checkpoints"
            checkpointer = try DatabaseQueue(path: path, configuration: configuration)
        } catch {
            logger.error("could not open the checkpoint connection; the writer keeps checkpointing", metadata: ["error": "\(error)"])
            return
        }
        do {
            try await writer.writeWithoutTransaction { try $0.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        } catch {
            logger.error("could not hand checkpoints to the background", metadata: ["error": "\(error)"])
            return
        }
        let pageSize = (try? await checkpointer.read { try Int.fetchOne($0.cachedStatement(sql: "PRAGMA page_size")) } ?? 4096) ?? 4096
        let restartFrames = Int(maximumWriteAheadLogBytes) / pageSize
        while !Task.isCancelled {
            do {
                let (logFrames, checkpointedFrames) = try await checkpointer.writeWithoutTransaction { try $0.checkpoint(.passive) }
                if logFrames - checkpointedFrames > restartFrames {
                    // Readers pin what they read; a log grown this far despite passive checkpoints is copied with a
                    // restart, which makes new writes wait until the readers in it finish (seldom: reads are one page each).
                    logger.notice("the write-ahead log outgrew its bound; restarting it", metadata: ["cumulus.wal.frames": "\(logFrames)"])
                    _ = try await checkpointer.writeWithoutTransaction { try $0.checkpoint(.restart) }
                } else if logFrames > restartFrames {
                    // A write starts the log over only when it finds every frame copied, and under a steady stream of
                    // writes one always commits while a checkpoint runs: the log grew without end. Copying the last
                    // few frames between two writes, on the writer's own queue, lets the next write start it over
                    // (and cut the file back); it costs one write's wait once per bound's worth of log.
                    _ = try await writer.writeWithoutTransaction { try $0.checkpoint(.passive) }
                }
                checkpointsRun.add(1, ordering: .relaxed)
            } catch {
                // A server stopping is no failure: GRDB answers a cancelled task, or interrupts its statement
                // (SQLITE_INTERRUPT); the last checkpoint happens when the database closes.
                if error is CancellationError || Task.isCancelled { break }
                logger.warning("background checkpoint failed", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: checkpointInterval)
        }
        // Back to SQLite's own checkpoints, for whoever uses the store next (a command, a test); in a task of its own,
        // since this one is cancelled and GRDB refuses work to cancelled tasks.
        let writer = self.writer
        await Task { _ = try? await writer.writeWithoutTransaction { try $0.execute(sql: "PRAGMA wal_autocheckpoint = 1000") } }.value
        try? checkpointer.close()
    }
}
