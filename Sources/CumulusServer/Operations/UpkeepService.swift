import Logging
import ServiceLifecycle

/// Runs one upkeep job of the server's (expired links, assets no record holds, old history) every `interval`, and
/// once at start, until shutdown. A failed pass is logged and the next one comes at its time.
struct UpkeepService: Service {
    /// What the job does, for the log ("link cleanup").
    let name: String
    let interval: Duration
    let logger: Logger
    /// One pass; answers how many things it removed and what they are ("expired link snapshots"), to log when some were.
    let pass: @Sendable (Logger) async throws -> (count: Int, what: String)

    func run() async throws {
        // Cancellation (not only graceful shutdown) ends the loop: otherwise every pass fails at once and spins.
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            do {
                let (count, what) = try await pass(logger)
                if count > 0 { logger.info("deleted \(what)", metadata: ["cumulus.upkeep": "\(name)", "cumulus.upkeep.deleted": "\(count)"]) }
            } catch  where Task.isCancelled {
                return
            } catch {
                logger.error("\(name) failed", metadata: ["error": "\(error)"])
            }
            // Sleeping ends early on graceful shutdown.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
