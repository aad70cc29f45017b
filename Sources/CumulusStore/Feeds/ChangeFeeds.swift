public import CumulusModel

/// A zone in a database change feed: changed (with its current state) or deleted.
public enum DatabaseZoneChange: Sendable, Hashable {
    case changed(ZoneState)
    case deleted(ZoneID)
}

/// One page of a database change feed.
public struct DatabaseChangePage: Sendable, Hashable {
    /// Zones changed or deleted after the requested position, oldest change first, each once.
    public var zones: [DatabaseZoneChange]
    /// The position to resume from.
    public var sequence: Int64
    /// Whether more changes are waiting after ``sequence``.
    public var moreComing: Bool

    public init(zones: [DatabaseZoneChange], sequence: Int64, moreComing: Bool) {
        self.zones = zones
        self.sequence = sequence
        self.moreComing = moreComing
    }
}

/// A record in a zone change feed: its latest state, or a tombstone.
public enum ZoneRecordChange: Sendable, Hashable {
    case changed(StoredRecord)
    case deleted(recordName: String, recordType: String)
}

/// One page of a zone change feed.
public struct ZoneChangePage: Sendable, Hashable {
    public var zone: ZoneState
    /// Records changed after the requested position, in commit order, each once in its latest state.
    public var changes: [ZoneRecordChange]
    /// The position to resume from.
    public var sequence: Int64
    public var moreComing: Bool
    /// On the page that ends the feed, the digest of the zone as the reader sees it at ``sequence`` (for a participant
    /// of hierarchy shares, of what is shared with them); `nil` on other pages, when the page is filtered by record
    /// type, or while the zone's digest is not computed yet.
    public var digest: ZoneDigest?

    public init(zone: ZoneState, changes: [ZoneRecordChange], sequence: Int64, moreComing: Bool, digest: ZoneDigest? = nil) {
        self.zone = zone
        self.changes = changes
        self.sequence = sequence
        self.moreComing = moreComing
        self.digest = digest
    }
}

/// A request for one page of a zone change feed.
public struct ZoneChangeRequest: Sendable, Hashable {
    public var database: DatabaseRef
    public var zoneName: String
    /// The zone incarnation the position belongs to; `nil` when starting from the beginning.
    public var incarnation: Int64?
    /// Changes after this sequence are returned.
    public var after: Int64
    public var limit: Int
    /// Only records of these types; the position still advances past others.
    public var recordTypes: Set<String>?
    /// Set when a participant reads: only what their shares cover.
    public var access: ParticipantAccess?

    public init(
        database: DatabaseRef, zoneName: String, incarnation: Int64?, after: Int64, limit: Int, recordTypes: Set<String>? = nil,
        access: ParticipantAccess? = nil
    ) {
        self.database = database
        self.zoneName = zoneName
        self.incarnation = incarnation
        self.after = after
        self.limit = limit
        self.recordTypes = recordTypes
        self.access = access
    }

    /// Whether the position belongs to the zone incarnation a store found, or the zone was deleted and created again
    /// since (every store answers ``StoreError/Code/invalidState`` then).
    ///
    /// Incarnation 0 is the default zone before its database's first write: it has no row yet, and a token taken then
    /// stays valid once the row exists, because the default zone is never deleted.
    public func matches(incarnation found: Int64) -> Bool {
        guard let incarnation else { return true }
        return incarnation == found || (incarnation == 0 && zoneName == ZoneID.defaultZoneName)
    }
}
