public import CumulusModel
public import Logging

/// Shares of record hierarchies and zones, their participants, and what each participant's shared database shows.
public protocol ShareStore: Sendable {
    /// The share with this short GUID.
    func share(shortGUID: String, logger: Logger) async throws -> ShareState?

    /// The shares with these record names in a zone of an owner's database.
    func shares(named names: [String], zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState]

    /// The shares of a zone that list a user (any status).
    func shares(listing userRecordName: String, zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState]

    /// Marks a user's participation accepted, adding them as a public participant with `publicPermission` if the share
    /// does not list them. The zone appears in their shared database.
    func acceptShare(shortGUID: String, userRecordName: String, logger: Logger) async throws -> ShareState

    /// The zones currently shared with a user in a container environment.
    func sharedZones(userRecordName: String, container: String, environment: ContainerEnvironment, logger: Logger) async throws -> [SharedZone]

    /// A user's shared database feed: zones that appeared, changed or went away after a position.
    func sharedDatabaseChanges(
        userRecordName: String, container: String, environment: ContainerEnvironment, after position: SharedDatabasePosition, limit: Int,
        logger: Logger
    ) async throws -> SharedDatabasePage
}
