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

    /// Deletes a user's push tokens beyond the `keeping` most recently bound (``StoredPushToken/createdAt``), so one
    /// user cannot pile up tokens. Returns how many were deleted.
    func trimPushTokens(of userRecordName: String, container: String, environment: ContainerEnvironment, keeping: Int, logger: Logger)
        async throws -> Int
}
