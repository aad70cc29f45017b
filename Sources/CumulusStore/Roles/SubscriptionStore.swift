public import CumulusModel
public import Logging

/// Subscriptions and the push tokens their notifications go to.
public protocol SubscriptionStore: Sendable {
    /// A user's subscriptions in a database, oldest first; with `ids`, only those (missing ones are absent).
    func subscriptions(of owner: SubscriptionOwner, ids: [String]?, logger: Logger) async throws -> [StoredSubscription]

    /// Saves (creating or replacing) and deletes subscriptions of a user's database, in one transaction.
    func modifySubscriptions(of owner: SubscriptionOwner, saving: [StoredSubscription], deleting: [String], logger: Logger) async throws

    /// Stores a new push token, or replaces one (its user and delivery positions).
    func savePushToken(_ token: StoredPushToken, logger: Logger) async throws

    /// The push token with this value.
    func pushToken(_ token: String, logger: Logger) async throws -> StoredPushToken?

    /// A push token with what its look at the feeds reads, in one read (one snapshot): its user's subscriptions and the
    /// zones of each database that has some. A delivered notification pays for this look twice (the one that finds it
    /// and the renewed poll's), so it is one round to the store rather than one a database. `nil` when no such token is
    /// stored.
    func pushTokenFeeds(_ token: String, logger: Logger) async throws -> PushTokenFeeds?

    /// A look at a push token's feeds that stores where it moved the token: `look` is given what
    /// ``pushTokenFeeds(_:logger:)`` reads (`nil` when no such token is stored) and answers the token's new positions
    /// (`nil` to store nothing) with its result. An error it throws fails the call, and nothing is stored.
    ///
    /// A delivered notification is such a look, so its store work is one call. SQLite reads and writes in one write
    /// transaction: one hop to its writer instead of a read on the reader pool and a write after it. The default reads,
    /// then saves, as two round trips to a server would anyway; a look is not atomic there, and need not be (two
    /// looks at once tell a notification twice at worst).
    func advancePushToken<Result: Sendable>(
        _ token: String, logger: Logger, _ look: @escaping @Sendable (PushTokenFeeds?) throws -> (positions: [UInt8]?, result: Result)
    ) async throws -> Result

    /// Deletes a user's push tokens beyond the `keeping` most recently bound (``StoredPushToken/createdAt``), so one
    /// user cannot pile up tokens. Returns how many were deleted.
    func trimPushTokens(of userRecordName: String, container: String, environment: ContainerEnvironment, keeping: Int, logger: Logger)
        async throws -> Int
}

extension SubscriptionStore {
    public func advancePushToken<Result: Sendable>(
        _ token: String, logger: Logger, _ look: @escaping @Sendable (PushTokenFeeds?) throws -> (positions: [UInt8]?, result: Result)
    ) async throws -> Result {
        let feeds = try await pushTokenFeeds(token, logger: logger)
        let (positions, result) = try look(feeds)
        if let positions, var stored = feeds?.token {
            stored.positions = positions
            try await savePushToken(stored, logger: logger)
        }
        return result
    }
}
