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

    /// Deletes a user's push tokens beyond the `keeping` most recently bound (``StoredPushToken/createdAt``), so one
    /// user cannot pile up tokens. Returns how many were deleted.
    func trimPushTokens(of userRecordName: String, container: String, environment: ContainerEnvironment, keeping: Int, logger: Logger)
        async throws -> Int
}
