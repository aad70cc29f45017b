public import CumulusClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStoreSQLite
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle

/// A Cumulus server the runnable examples start in their own process: a free loopback port, SQLite in a temporary
/// directory, one container, and signed-in users. It stops as `cumulus serve` stops on SIGTERM, then its files go.
public enum DemoServer {
    /// Runs `body` with a client container for each user (by name; each user's email is `{name}@example.com`).
    public static func run(
        container identifier: String, users: [String], _ body: @escaping @Sendable ([String: CloudContainer]) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var logger = Logger(label: "cumulus-demo")
        logger.logLevel = .warning
        let store = try SQLiteRecordStore(path: directory.appendingPathComponent("cumulus.sqlite").path)
        let accounts = AccountService(store: store)
        try await accounts.createContainer(identifier, logger: logger)
        let apiToken = try await accounts.createAPIToken(container: identifier, environment: .development, logger: logger)
        var webAuthTokens: [String: String] = [:]
        for name in users {
            let user = try await accounts.createUser(container: identifier, name: name, password: nil, email: "\(name)@example.com", logger: logger)
            webAuthTokens[name] = try await accounts.issueWebAuthToken(for: user, logger: logger)
        }

        let (urls, announce) = AsyncStream.makeStream(of: String.self)
        let application = buildApplication(
            configuration: ServerConfiguration(host: "127.0.0.1", port: 0), store: store, logger: logger,
            onServerRunning: { url in announce.yield(url) })
        let services = ServiceGroup(services: [application], logger: logger)
        let tokens = webAuthTokens
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await services.run() }
            var iterator = urls.makeAsyncIterator()
            guard let text = await iterator.next(), let url = URL(string: text) else { throw CancellationError() }
            print("Cumulus is serving at \(url) (SQLite in \(directory.path))")
            let containers = tokens.mapValues { token in
                CloudContainer(serverURL: url, containerIdentifier: identifier, apiToken: apiToken, webAuthToken: token)
            }
            do {
                try await body(containers)
            } catch {
                await services.triggerGracefulShutdown()
                throw error
            }
            await services.triggerGracefulShutdown()
            try await group.waitForAll()
        }
    }
}
