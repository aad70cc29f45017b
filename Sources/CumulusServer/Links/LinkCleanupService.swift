import CumulusCore
import Logging
import ServiceLifecycle

/// Deletes expired share-a-copy snapshots for good, once an hour (and once at start). Nothing else keeps them.
struct LinkCleanupService: Service {
    let links: LinkService
    let interval: Duration
    let logger: Logger

    func run() async throws {
        while !Task.isShuttingDownGracefully {
            do {
                let deleted = try await links.deleteExpired(logger: logger)
                if deleted > 0 { logger.info("deleted expired link snapshots", metadata: ["cumulus.links.deleted": "\(deleted)"]) }
            } catch {
                logger.error("link cleanup failed", metadata: ["error": "\(error)"])
            }
            // Sleeping ends early on graceful shutdown.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
