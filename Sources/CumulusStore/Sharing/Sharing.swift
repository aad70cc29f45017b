public import CumulusModel

/// A participant of a share, as stored.
public struct ShareParticipantState: Sendable, Hashable {
    public var userRecordName: String
    public var type: ParticipantType
    public var permission: SharePermission
    public var status: ParticipantStatus
    /// The email the owner invited them by, if any.
    public var email: String?

    public init(userRecordName: String, type: ParticipantType, permission: SharePermission, status: ParticipantStatus, email: String? = nil) {
        self.userRecordName = userRecordName
        self.type = type
        self.permission = permission
        self.status = status
        self.email = email
    }
}

/// A share: a hierarchy share of a root record, or a zone-wide share, with its participants.
public struct ShareState: Sendable, Hashable {
    /// The owner's private database.
    public var database: DatabaseRef
    public var zoneName: String
    public var zoneIncarnation: Int64
    public var shareRecordName: String
    /// The root of a hierarchy share; `nil` for a zone-wide share.
    public var rootRecordName: String?
    /// The stable link identifier: the same for the same root (or zone) across re-sharing.
    public var shortGUID: String
    public var publicPermission: SharePermission
    /// Everyone the share lists, the owner first.
    public var participants: [ShareParticipantState]
    /// The `cloudkit.share` record itself.
    public var shareRecord: StoredRecord?

    public init(
        database: DatabaseRef, zoneName: String, zoneIncarnation: Int64, shareRecordName: String, rootRecordName: String?, shortGUID: String,
        publicPermission: SharePermission, participants: [ShareParticipantState], shareRecord: StoredRecord?
    ) {
        self.database = database
        self.zoneName = zoneName
        self.zoneIncarnation = zoneIncarnation
        self.shareRecordName = shareRecordName
        self.rootRecordName = rootRecordName
        self.shortGUID = shortGUID
        self.publicPermission = publicPermission
        self.participants = participants
        self.shareRecord = shareRecord
    }

    /// The participant entry of a user, if any.
    public func participant(_ userRecordName: String) -> ShareParticipantState? {
        participants.first { $0.userRecordName == userRecordName }
    }
}

/// What a participant may see and change in an owner's zone, as the authorization policy grants it.
///
/// The store enforces it on the data: lookups, queries and feeds see only records under `roots` (or the whole zone),
/// and writes are checked against it inside the write transaction.
public struct ParticipantAccess: Sendable, Hashable {
    public var userRecordName: String
    /// The whole zone is shared.
    public var zoneWide: Bool
    /// Roots of the hierarchy shares the user has accepted in this zone.
    public var roots: Set<String>
    /// Whether the user may write (READ_WRITE) in the zone-wide share.
    public var zoneWideWritable: Bool
    /// Roots under which the user may write.
    public var writableRoots: Set<String>
    /// The share records the user may read.
    public var shareRecordNames: Set<String>

    public init(
        userRecordName: String, zoneWide: Bool, roots: Set<String>, zoneWideWritable: Bool, writableRoots: Set<String>, shareRecordNames: Set<String>
    ) {
        self.userRecordName = userRecordName
        self.zoneWide = zoneWide
        self.roots = roots
        self.zoneWideWritable = zoneWideWritable
        self.writableRoots = writableRoots
        self.shareRecordNames = shareRecordNames
    }
}

/// A participant resolved to a user, for a share change.
public struct ResolvedParticipant: Sendable, Hashable {
    public var userRecordName: String
    public var email: String?
    public var permission: SharePermission
    /// `removed` takes the participant off the share.
    public var removed: Bool

    public init(userRecordName: String, email: String?, permission: SharePermission, removed: Bool) {
        self.userRecordName = userRecordName
        self.email = email
        self.permission = permission
        self.removed = removed
    }
}

/// A change to a share's metadata, made with its `cloudkit.share` record in the same batch.
public struct ShareChange: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        /// Create or update; `nil` values leave that part unchanged.
        case save(rootRecordName: String?, publicPermission: SharePermission?, participants: [ResolvedParticipant]?)
        case delete
    }

    /// The name of the share record.
    public var recordName: String
    public var kind: Kind

    public init(recordName: String, kind: Kind) {
        self.recordName = recordName
        self.kind = kind
    }
}

/// A zone shared with a user, as their shared database shows it.
public struct SharedZone: Sendable, Hashable {
    /// The owner's zone: `ownerRecordName` is the owner.
    public var zoneID: ZoneID
    public var incarnation: Int64
    public var changeSequence: Int64
    public var deleted: Bool

    public init(zoneID: ZoneID, incarnation: Int64, changeSequence: Int64, deleted: Bool) {
        self.zoneID = zoneID
        self.incarnation = incarnation
        self.changeSequence = changeSequence
        self.deleted = deleted
    }
}

extension SharedZone {
    /// The order a user's shared zones are listed in: by owner, then by zone name, byte by byte (`COLLATE "C"`).
    public static func listedBefore(_ left: SharedZone, _ right: SharedZone) -> Bool {
        let (leftOwner, rightOwner) = (left.zoneID.ownerRecordName ?? "", right.zoneID.ownerRecordName ?? "")
        return leftOwner == rightOwner
            ? left.zoneID.zoneName.utf8.lexicographicallyPrecedes(right.zoneID.zoneName.utf8)
            : leftOwner.utf8.lexicographicallyPrecedes(rightOwner.utf8)
    }
}

/// One page of a user's shared database feed.
public struct SharedDatabasePage: Sendable, Hashable {
    public var zones: [SharedZone]
    /// Where the next page starts.
    public var position: SharedDatabasePosition
    public var moreComing: Bool

    public init(zones: [SharedZone], position: SharedDatabasePosition, moreComing: Bool) {
        self.zones = zones
        self.position = position
        self.moreComing = moreComing
    }
}

/// A position in a user's shared database feed: one sequence per database that holds zones shared with them.
///
/// A store on one database keeps one sequence, under number 0. A store sharded over several databases
/// (`ShardedPostgresStore`) keeps one per database, by the database's number: the zones shared with a user are their
/// owners', and live where their owners do, each database counting its own changes.
public struct SharedDatabasePosition: Sendable, Hashable {
    public var sequences: [Int: Int64]

    public init(sequences: [Int: Int64] = [:]) {
        self.sequences = sequences
    }

    /// A store on one database: its one sequence.
    public init(sequence: Int64) {
        self.sequences = [0: sequence]
    }

    /// The sequence in database `number`; 0 (the start) where the position has none.
    public subscript(number: Int) -> Int64 {
        get { sequences[number] ?? 0 }
        set { sequences[number] = newValue }
    }
}
