import CumulusModel
public import Logging

/// Containers and the credentials that open them: API tokens, server-to-server keys (and the signatures they made, so
/// none is replayed), sign-in attempts, and the server's secret.
public protocol ContainerStore: Sendable {
    /// Creates a container. Throws ``StoreError/Code/duplicate`` if it exists.
    func createContainer(_ container: String, createdAt: Int64, logger: Logger) async throws

    /// Whether a container exists.
    func containerExists(_ container: String, logger: Logger) async throws -> Bool

    /// Stores a new API token.
    func saveAPIToken(_ token: StoredAPIToken, logger: Logger) async throws

    /// The API token with this hash, revoked or not.
    func apiToken(hash: [UInt8], logger: Logger) async throws -> StoredAPIToken?

    /// Revokes an API token. Throws ``StoreError/Code/notFound`` if there is none.
    func revokeAPIToken(hash: [UInt8], logger: Logger) async throws

    /// Stores a server-to-server key.
    func saveServerKey(_ key: StoredServerKey, logger: Logger) async throws

    /// The server-to-server key with this ID.
    func serverKey(id: String, logger: Logger) async throws -> StoredServerKey?

    /// Records one use of a server-to-server signature, identified by `digest`, kept until `expiresAt` (when the
    /// request's date leaves the accepted window). Answers `false` if the signature was used before: a replay. Uses
    /// that expired before `now` are forgotten. Over a shared store, a signature is used once across all instances.
    func useSignature(digest: [UInt8], expiresAt: Int64, now: Int64, logger: Logger) async throws -> Bool

    /// Counts one attempt against each key in the fixed window that starts at `windowStart` and answers each key's count
    /// in that window, this attempt included, in `keys` order. Counts of windows that started before `forgetBefore`
    /// are deleted. Sign-in and sign-up throttles count here, so they hold across instances sharing the store.
    func countAttempts(keys: [String], windowStart: Int64, forgetBefore: Int64, logger: Logger) async throws -> [Int]

    /// Every container, by identifier.
    func listContainers(logger: Logger) async throws -> [StoredContainer]

    /// A container's API tokens, revoked ones included, oldest first.
    func listAPITokens(container: String, logger: Logger) async throws -> [StoredAPIToken]

    /// A container's server-to-server keys, revoked ones included, oldest first.
    func listServerKeys(container: String, logger: Logger) async throws -> [StoredServerKey]

    /// Revokes a server-to-server key. Throws ``StoreError/Code/notFound`` if there is none.
    func revokeServerKey(id: String, logger: Logger) async throws

    /// Deletes a container and everything in it (users, credentials, databases, zones, records, shares, subscriptions,
    /// links, schemas), in one transaction. Throws ``StoreError/Code/notFound`` if there is none.
    func deleteContainer(_ container: String, logger: Logger) async throws

    /// A random secret created once per store and kept: it signs change tokens and continuation markers, so they stay
    /// valid across restarts and across servers sharing the store. A store inserts ``ServerSecret/makeCandidate()``
    /// only if no secret exists and returns the stored one: the first writer wins, from any process.
    func serverSecret(logger: Logger) async throws -> [UInt8]
}
