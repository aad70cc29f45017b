public import CumulusModel
public import CumulusStore

/// What a request wants to do with a database.
public enum DatabaseAccess: Sendable, Hashable {
    case read
    case write
}

/// The one place that decides which database a caller reaches and whether it may read or write there.
///
/// Handlers never check permissions themselves: every operation asks the policy for the ``DatabaseRef`` it acts on.
/// - A private database belongs to the signed-in user alone. Without a user the answer is `AUTHENTICATION_REQUIRED`;
///   a server-to-server key is refused, because such keys act on the public database only (as in CloudKit).
/// - The public database is readable by any caller of the container; writing needs a user or a server-to-server key,
///   and only a record's creator (or a key) may change or delete it.
/// - The shared database is a per-user view, so it needs a user too.
public struct AuthorizationPolicy: Sendable {
    public init() {}

    /// The database a caller acts on.
    public func database(for caller: Caller, scope: DatabaseScope, access: DatabaseAccess) throws(CumulusError) -> DatabaseRef {
        switch scope {
        case .public:
            if access == .write, caller.authorName == nil {
                throw CumulusError(.authenticationRequired, "writing to the public database needs a signed-in user (ckWebAuthToken)")
            }
            return .publicDatabase(container: caller.container, environment: caller.environment)
        case .private, .shared:
            if case .serverKey = caller.credential, caller.user == nil {
                throw CumulusError(.accessDenied, "server-to-server keys act on the public database only")
            }
            guard let user = caller.user else {
                throw CumulusError(.authenticationRequired, "request needs authorization: the \(scope.rawValue) database needs ckWebAuthToken")
            }
            return DatabaseRef(container: caller.container, environment: caller.environment, scope: scope, ownerRecordName: user.userRecordName)
        }
    }

    /// Whether a write may change only records the caller created: in the public database everyone reads everything, but
    /// only a record's creator, or a server-to-server key acting as the developer, may change or delete it.
    public func onlyCreatorMayModify(caller: Caller, scope: DatabaseScope) -> Bool {
        guard scope == .public else { return false }
        if case .serverKey = caller.credential { return false }
        return true
    }

    /// What a participant may see and do in an owner's zone, from the shares that list them: only accepted
    /// participations count; READ_WRITE lets them write; the owner of a share is never a participant of it.
    public func participantAccess(user: String, shares: [ShareState]) -> ParticipantAccess? {
        var zoneWide = false
        var zoneWideWritable = false
        var roots = Set<String>()
        var writableRoots = Set<String>()
        var shareRecordNames = Set<String>()
        for share in shares {
            guard let participant = share.participant(user), participant.status == .accepted, participant.type != .owner else { continue }
            shareRecordNames.insert(share.shareRecordName)
            let writable = participant.permission == .readWrite
            if let root = share.rootRecordName {
                roots.insert(root)
                if writable { writableRoots.insert(root) }
            } else {
                zoneWide = true
                zoneWideWritable = zoneWideWritable || writable
            }
        }
        guard zoneWide || !roots.isEmpty else { return nil }
        return ParticipantAccess(
            userRecordName: user, zoneWide: zoneWide, roots: roots, zoneWideWritable: zoneWideWritable, writableRoots: writableRoots,
            shareRecordNames: shareRecordNames
        )
    }

    /// How a caller stands towards a share: whether they may see it through its link, and as what.
    public enum ShareStanding: Sendable, Hashable {
        case owner
        case participant(ShareParticipantState)
        /// Not listed, but the share is public: they may join with its public permission.
        case publicCandidate
        case denied
    }

    /// Decides whether a caller may resolve or accept a share.
    public func standing(of user: String, in share: ShareState) -> ShareStanding {
        if share.database.ownerRecordName == user { return .owner }
        if let participant = share.participant(user) {
            if participant.status != .removed { return .participant(participant) }
            return share.publicPermission == .none ? .denied : .publicCandidate
        }
        return share.publicPermission == .none ? .denied : .publicCandidate
    }

    /// Resolves a zone ID from a request to a zone name in the caller's database.
    ///
    /// An owner other than the database's own cannot be reached through a private database; it answers
    /// `ZONE_NOT_FOUND`, the same as a zone that does not exist, so nothing about other users' zones leaks.
    public func zoneName(_ zoneID: ZoneID?, in database: DatabaseRef) throws(CumulusError) -> String {
        guard let zoneID else { return ZoneID.defaultZoneName }
        if let owner = zoneID.ownerRecordName, !Self.meansCaller(owner), owner != database.ownerRecordName {
            throw CumulusError(.zoneNotFound, "zone \(zoneID.zoneName) does not exist")
        }
        return zoneID.zoneName
    }

    /// The placeholders clients use for "the current user".
    static func meansCaller(_ owner: String) -> Bool {
        owner == ZoneID.currentUserOwnerName || owner == ZoneID.publicOwnerName || owner.isEmpty
    }
}
