import CumulusCore
import Logging
import ServiceLifecycle

/// Drops versions of records older than the history's retention, every `interval` (and once at start).
struct HistoryPruningService: Service {
    let database: DatabaseService
    let interval: Duration
    let logger: Logger

    func run() async throws {
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            do {
                let pruned = try await database.pruneHistory(logger: logger)
                if pruned > 0 { logger.info("pruned record history", metadata: ["cumulus.history.pruned": "\(pruned)"]) }
            } catch  where Task.isCancelled {
                return
            } catch {
                logger.error("history pruning failed", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
