import CumulusModel
import CumulusStore
import Logging

/// Which database and zone a request acts on: the caller's own, or, in the shared database, the owner's zone with what
/// the caller's accepted shares allow there. Every service that touches a zone's records asks here first, so the rule
/// of who reaches which zone is written once.
public struct ZoneAccess: Sendable {
    /// Read for the shares that list the caller.
    let shares: any ShareStore
    let policy: AuthorizationPolicy

    /// The database and zone a record request acts on, and, in the shared database, what the caller may do there.
    func zone(_ zoneID: ZoneID?, caller: Caller, scope: DatabaseScope, access: DatabaseAccess, logger: Logger) async throws
        -> (DatabaseRef, String, ParticipantAccess?)
    {
        let database = try policy.database(for: caller, scope: scope, access: access)
        if scope == .shared { return try await sharedZone(caller: caller, zoneID: zoneID, logger: logger) }
        let zoneName = try policy.zoneName(zoneID, in: database)
        if scope == .public, zoneName != ZoneID.defaultZoneName {
            throw CumulusError(.zoneNotFound, "zone \(zoneName) does not exist; the public database has only _defaultZone")
        }
        return (database, zoneName, nil)
    }

    /// The owner's zone a shared-database request names, and what the caller may do in it.
    ///
    /// A zone the caller has no accepted share in answers `ZONE_NOT_FOUND`, as a zone that does not exist.
    func sharedZone(caller: Caller, zoneID: ZoneID?, logger: Logger) async throws -> (DatabaseRef, String, ParticipantAccess) {
        guard let user = caller.user else { throw CumulusError(.authenticationRequired, "request needs authorization") }
        guard let zoneID, let owner = zoneID.ownerRecordName, !AuthorizationPolicy.meansCaller(owner), owner != user.userRecordName else {
            throw CumulusError(
                .zoneNotFound, "zone \(zoneID?.zoneName ?? "") does not exist in the shared database; name the owner in zoneID.ownerRecordName")
        }
        let ownerDatabase = DatabaseRef(container: caller.container, environment: caller.environment, scope: .private, ownerRecordName: owner)
        let shares = try await shares.shares(listing: user.userRecordName, zoneName: zoneID.zoneName, in: ownerDatabase, logger: logger)
        guard let access = policy.participantAccess(user: user.userRecordName, shares: shares) else {
            throw CumulusError(.zoneNotFound, "zone \(zoneID.zoneName) does not exist in the shared database")
        }
        return (ownerDatabase, zoneID.zoneName, access)
    }
}
