import CumulusStore
public import Logging

/// Who may use the web console (`/console`): whoever opens a sign-in link the command line printed
/// (`cumulus console`). A link works once, within ``consoleSignInLifetime``; it starts a session of
/// ``consoleSessionLifetime`` for that one container. Only hashes of both tokens are stored.
extension AccountService {
    /// 15 minutes, in milliseconds.
    public static let consoleSignInLifetime: Int64 = 15 * 60 * 1000
    /// 12 hours, in milliseconds.
    public static let consoleSessionLifetime: Int64 = 12 * 3600 * 1000

    /// A new one-use sign-in token for the console of a container.
    public func createConsoleSignIn(container: String, logger: Logger) async throws -> String {
        try await requireContainer(container, logger: logger)
        return try await saveConsoleCredential(container: container, kind: .signIn, lifetime: Self.consoleSignInLifetime, logger: logger)
    }

    /// Uses a sign-in token (once) and starts a session; `nil` for a token that is unknown, used or expired.
    public func startConsoleSession(signInToken: String, logger: Logger) async throws -> (sessionToken: String, container: String)? {
        guard
            let signIn = try await store.takeConsoleCredential(
                hash: TokenCodec.hash(signInToken), kind: .signIn, now: clock.milliseconds(), logger: logger)
        else { return nil }
        let session = try await saveConsoleCredential(
            container: signIn.container, kind: .session, lifetime: Self.consoleSessionLifetime, logger: logger)
        return (session, signIn.container)
    }

    /// The container a console session token is for; `nil` when it is unknown or expired.
    public func consoleContainer(sessionToken: String, logger: Logger) async throws -> String? {
        let credential = try await store.consoleCredential(hash: TokenCodec.hash(sessionToken), now: clock.milliseconds(), logger: logger)
        guard let credential, credential.kind == .session else { return nil }
        return credential.container
    }

    /// Ends a console session.
    public func endConsoleSession(sessionToken: String, logger: Logger) async throws {
        _ = try await store.takeConsoleCredential(hash: TokenCodec.hash(sessionToken), kind: .session, now: clock.milliseconds(), logger: logger)
    }

    private func saveConsoleCredential(container: String, kind: ConsoleCredential.Kind, lifetime: Int64, logger: Logger) async throws -> String {
        let token = TokenCodec.makeToken()
        let now = clock.milliseconds()
        try await store.saveConsoleCredential(
            ConsoleCredential(tokenHash: TokenCodec.hash(token), container: container, kind: kind, expiresAt: now + lifetime), now: now,
            logger: logger)
        return token
    }
}
