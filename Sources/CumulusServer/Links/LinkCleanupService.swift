import CumulusCore
import Logging
import ServiceLifecycle

/// Deletes expired share-a-copy snapshots for good, once an hour (and once at start). Nothing else keeps them.
struct LinkCleanupService: Service {
    let links: LinkService
    let interval: Duration
    let logger: Logger

    func run() async throws {
        // Cancellation (not only graceful shutdown) ends the loop: otherwise every pass fails at once and spins.
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            do {
                let deleted = try await links.deleteExpired(logger: logger)
                if deleted > 0 { logger.info("deleted expired link snapshots", metadata: ["cumulus.links.deleted": "\(deleted)"]) }
            } catch  where Task.isCancelled {
                return
            } catch {
                logger.error("link cleanup failed", metadata: ["error": "\(error)"])
            }
            // Sleeping ends early on graceful shutdown.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
