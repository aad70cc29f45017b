public import CumulusModel

/// A zone's row as a write transaction sees it.
public struct ZoneRow: Sendable, Hashable {
    /// The zone's row ID: its incarnation, and the key of everything stored in it.
    public var id: Int64
    /// The row ID of the zone's database.
    public var databaseID: Int64
    /// The zone's change sequence as stored.
    public var changeSequence: Int64

    public init(id: Int64, databaseID: Int64, changeSequence: Int64) {
        self.id = id
        self.databaseID = databaseID
        self.changeSequence = changeSequence
    }
}

/// A share as a user's view of its zone stores it: whether it ended, and what it let them see.
public struct StoredView: Sendable, Hashable {
    public var ended: Bool
    public var access: SharedViewAccess?

    public init(ended: Bool, access: SharedViewAccess?) {
        self.ended = ended
        self.access = access
    }
}

/// A share row: its ID, and what ``SharePlanner/endings(of:deleted:)`` and the share scripts need of it.
public struct ShareRow: Sendable, Hashable {
    public var id: Int64
    public var shareRecordName: String
    public var rootRecordName: String?
    public var publicPermission: SharePermission

    public init(id: Int64, shareRecordName: String, rootRecordName: String?, publicPermission: SharePermission) {
        self.id = id
        self.shareRecordName = shareRecordName
        self.rootRecordName = rootRecordName
        self.publicPermission = publicPermission
    }
}

/// One read or write a ``TransactionScript`` asks of a store. Each store implements every action with its own SQL, in
/// the transaction the script runs in; an action decides nothing. `zone` is always a zone's row ID.
public enum StoreAction {
    // MARK: Databases and zones

    /// The live zone, and its database's row ID; PostgreSQL locks the zone's row until commit, so writers of one zone
    /// take its change sequences one after the other. Answers ``StoreAnswer/zone(_:)``.
    ///
    /// `thenReading` names the records the script reads next (``readRecords(zone:zoneID:names:)``), if any: a store may
    /// read them with the zone, when it can tell that what it read is what that read would answer (PostgreSQL does, in
    /// the same round trip, when no writer of the zone committed between its snapshot and its lock).
    case findZone(DatabaseRef, zoneName: String, lock: Bool, thenReading: [String] = [])
    /// Creates the database and its default zone if they do not exist (instances doing it at once meet on its key).
    case createDatabase(DatabaseRef, timestamp: Int64)
    /// Creates a zone if no live one has the name. Answers ``StoreAnswer/createdZone(_:created:)``.
    case createZone(databaseID: Int64, zoneName: String, timestamp: Int64)
    /// The number of live zones in a database, its default zone among them. Transactions that count the same
    /// database's zones take turns until they end (SQLite's one writer; on PostgreSQL a transaction lock of their own,
    /// which no other writer takes), so a count stays true until the transaction ends. Answers
    /// ``StoreAnswer/count(_:)``.
    case countZones(databaseID: Int64)
    /// Marks a zone deleted (its row stays, a tombstone for the database feed) and deletes its records and shares; its
    /// digest becomes empty.
    case deleteZone(zone: Int64)
    /// The zone takes `sequence` as its change sequence, if given, and moves to the head of its database's feed.
    case touchZone(zone: Int64, databaseID: Int64, sequence: Int64?)
    /// After a batch: the zone takes `sequence` and moves to the head of its database's feed and of every viewer's
    /// shared database feed (``touchZone(zone:databaseID:sequence:)`` then ``advanceViews(zone:ending:)``, in one
    /// statement where the store can), and its digest changes by `digest` (as ``adjustZoneDigest(zone:by:)``).
    case finishZoneWrite(zone: Int64, databaseID: Int64, sequence: Int64, digest: ZoneDigest)
    /// Adds `digest` to the zone's stored digest: lane by lane modulo 2³², and its record count (which may go down).
    case adjustZoneDigest(zone: Int64, by: ZoneDigest)
    /// Moves the zone to the head of every viewer's shared database feed (or, `ending`, reports it deleted there).
    case advanceViews(zone: Int64, ending: Bool)
    /// Stores the zone's change sequence.
    case setZoneSequence(zone: Int64, Int64)
    /// Takes the zone's next change sequence. Answers ``StoreAnswer/sequence(_:)``.
    case takeZoneSequence(zone: Int64)
    /// The zone's stored change sequence. Answers ``StoreAnswer/sequence(_:)``.
    case readZoneSequence(zone: Int64)

    // MARK: Records

    /// The live records with these names. Answers ``StoreAnswer/records(_:)``.
    case readRecords(zone: Int64, zoneID: ZoneID, names: [String])
    /// For each name, its nearest ancestor (or itself) among `roots`, following parents, tombstones included. Answers
    /// ``StoreAnswer/names(_:)``, keyed by name.
    case readRoots(zone: Int64, names: [String], among: Set<String>)
    /// For each candidate, one record below it (not itself) among `roots`. Answers ``StoreAnswer/names(_:)``.
    case readRootsBelow(zone: Int64, candidates: [String], among: Set<String>)
    /// The records `roots` and everything below them, tombstones included. Answers ``StoreAnswer/list(_:)``.
    case readSubtree(zone: Int64, roots: [String])
    /// Writes records, each with its change sequence (a name written twice keeps its last write), and replaces their
    /// `DELETE_SELF` references. Answers ``StoreAnswer/liveSequences(_:)``: the rows it replaced that were live.
    ///
    /// Every action that changes which records are live, or their change sequences, answers the sequences the live
    /// rows had before it, so the script keeps the zone's digest (``ZoneDigest``) in the same transaction.
    case saveRecords(zone: Int64, writes: [PlannedWrite], sequences: [Int64])
    /// A batch that only writes, and already knows what its writes replace, in one step (one statement where the store
    /// can): ``keepVersions(zone:names:replacedAt:)`` of `keepingVersionsOf` unless empty,
    /// ``saveRecords(zone:writes:sequences:)``, then ``finishZoneWrite(zone:databaseID:sequence:digest:)`` with the last of
    /// `sequences`. Answers nothing.
    case saveRecordsFinishingZone(
        ZoneRow, writes: [PlannedWrite], sequences: [Int64], keepingVersionsOf: [String], replacedAt: Int64, digest: ZoneDigest)
    /// Live records with a `DELETE_SELF` reference to one of `targets`. Answers ``StoreAnswer/list(_:)``.
    case readReferrers(zone: Int64, targets: [String])
    /// Turns live records into tombstones, each with its change sequence, and drops their references. Answers
    /// ``StoreAnswer/liveSequences(_:)``.
    case deleteRecords(zone: Int64, names: [String], sequences: [Int64], modified: RecordStamp)
    /// Gives records new change sequences. Answers ``StoreAnswer/liveSequences(_:)``.
    case renumberRecords(zone: Int64, names: [String], sequences: [Int64])
    /// Records that `names` left the hierarchy under `root` at these sequences, for its participants' feeds.
    case recordExits(zone: Int64, root: String, names: [String], sequences: [Int64])
    /// The next `limit` record names of the zone after `after` (live or deleted), in byte order, with when each was last
    /// written or deleted. Answers ``StoreAnswer/modifiedTimes(_:)``.
    case scanRecordNames(zone: Int64, after: String, limit: Int)
    /// The names in `(after, through]` with a version in the history that was live at `since` and replaced after it.
    /// Answers ``StoreAnswer/list(_:)``.
    case readNamesReplaced(zone: Int64, after: String, through: String, since: Int64)
    /// The versions these records had at a moment, from the history (those replaced after it while live then).
    /// Answers ``StoreAnswer/records(_:)``.
    case readVersions(zone: Int64, zoneID: ZoneID, names: [String], at: Int64)
    /// Copies the live versions of these records into the zone's history, replaced at `replacedAt`, before a write
    /// replaces or deletes them (``RecordHistoryStore``).
    case keepVersions(zone: Int64, names: [String], replacedAt: Int64)
    /// Attaches uploaded assets to the records that reference them.
    case attachAssets([AssetAttachment])

    // MARK: Shares

    /// Every share of the zone, with its active participants. Answers ``StoreAnswer/shares(_:)``.
    case readShareFacts(zone: Int64)
    /// The zone's shares whose share record or root is among `names`, or all of them when `nil`. Answers
    /// ``StoreAnswer/shareRows(_:)``.
    case readShareRows(zone: Int64, names: [String]?)
    /// A share read in full. Answers ``StoreAnswer/share(_:)``.
    case readShare(ShareKey)
    /// A share's participants, in order. Answers ``StoreAnswer/participants(_:)``.
    case readParticipants(shareID: Int64)
    /// The short GUID of a record (or, without one, of the zone). Answers ``StoreAnswer/text(_:)``.
    case readShortGUID(zone: Int64, recordName: String?)
    /// Points a hierarchy's root at its new share, with the share's short GUID and a new change sequence. Answers
    /// ``StoreAnswer/liveSequences(_:)``.
    case pointRootAtShare(zone: Int64, rootRecordName: String, shareRecordName: String, shortGUID: String, sequence: Int64)
    /// Gives the zone the short GUID of its zone-wide share.
    case setZoneShortGUID(zone: Int64, shortGUID: String)
    /// Creates a share row. Answers ``StoreAnswer/sequence(_:)`` with its ID.
    case insertShare(zone: Int64, shareRecordName: String, rootRecordName: String?, shortGUID: String, publicPermission: SharePermission)
    case setPublicPermission(shareID: Int64, SharePermission)
    /// Replaces a share's participants with these, in order.
    case replaceParticipants(shareID: Int64, [ShareParticipantState])
    /// Sets one participant's status (a participant who accepts or leaves).
    case setParticipantStatus(shareID: Int64, userRecordName: String, ParticipantStatus)
    /// Adds a public user who accepted a share open to anyone with the link.
    case addPublicParticipant(shareID: Int64, userRecordName: String, permission: SharePermission)
    case deleteShare(shareID: Int64)
    /// Clears a root's reference to its ended share, with a new change sequence. Answers ``StoreAnswer/liveSequences(_:)``.
    case clearShareReference(zone: Int64, rootRecordName: String, sequence: Int64)

    // MARK: Shared database views

    /// What a user's accepted shares of the zone let them see. Answers ``StoreAnswer/viewAccess(_:)``.
    case readViewAccess(zone: Int64, userRecordName: String)
    /// A user's stored view of the zone. Answers ``StoreAnswer/view(_:)``.
    case readView(zone: Int64, userRecordName: String)
    /// Takes the next position of a user's shared database feed. Answers ``StoreAnswer/sequence(_:)``.
    case takeSharedDatabaseSequence(userRecordName: String)
    /// Starts (or restarts) a user's view of the zone at a position, from nothing: their changes of it are dropped.
    case beginView(zone: Int64, userRecordName: String, position: Int64, access: SharedViewAccess)
    /// Ends a user's view of the zone at a position.
    case endView(zone: Int64, userRecordName: String, position: Int64)
    /// Moves a user's view to a position with what it now lets them see.
    case changeView(zone: Int64, userRecordName: String, position: Int64, access: SharedViewAccess)
    /// Gives every record seen under exactly one of two accesses a new position in the user's zone feed (the zone's
    /// sequence advances past them), so the feed reports it: as it is if they see it now, as a deletion if not.
    case recordAccessChange(zone: Int64, userRecordName: String, from: SharedViewAccess, to: SharedViewAccess)
    // MARK: Users

    /// The container of a user. Answers ``StoreAnswer/text(_:)``, `nil` for no such user.
    case readUserContainer(userRecordName: String)
    /// The names of a zone's live records a user created. Answers ``StoreAnswer/list(_:)``.
    case readRecordsCreated(zone: Int64, by: String)
    /// A user's live private zones in a container, locked where the store locks. Answers ``StoreAnswer/zones(_:)``.
    case readUserZones(userRecordName: String, container: String)
    /// How many live records (`records`) and shares (`shares`) these zones hold. Answers ``StoreAnswer/counts(_:)``.
    case countZoneContents(zones: [Int64])
    /// Deletes the history of these zones (only the versions of records `createdBy` created, when given). Answers
    /// ``StoreAnswer/count(_:)``.
    case deleteHistory(zones: [Int64], createdBy: String?)
    /// The shares of other users a user takes part in (not as owner). Answers ``StoreAnswer/participations(_:)``.
    case readParticipations(userRecordName: String)
    /// Takes a user off every share they are a participant of.
    case removeParticipant(userRecordName: String)
    /// Deletes the asset receipts of a user's private zones and of their public records. Answers
    /// ``StoreAnswer/removed(_:files:)`` with the files no receipt names any more.
    case deleteAssetReceipts(userRecordName: String, container: String)
    /// Records and versions a user created or last changed name `erased` instead (and receipts they uploaded). Answers
    /// ``StoreAnswer/count(_:)``: the records changed.
    case anonymizeAuthor(userRecordName: String, as: String)
    /// Deletes a user's row and what hangs on it (shared database, views, subscriptions, push tokens, devices, web auth
    /// tokens, their database's zone rows no view needs) and sign-in attempt counts whose keys start with a prefix.
    /// Answers ``StoreAnswer/counts(_:)``: `subscriptions`, `pushTokens`, `devices`, `webAuthTokens`.
    case deleteUserRows(userRecordName: String, attemptKeyPrefixes: [String])
}

/// How a ``StoreAction`` names a share.
public enum ShareKey: Sendable, Hashable {
    case shortGUID(String)
    case id(Int64)
    case record(zone: Int64, shareRecordName: String)
}

/// A store's answer to a ``StoreAction``.
public enum StoreAnswer {
    case none
    case zone(ZoneRow?)
    case createdZone(ZoneRow, created: Bool)
    case sequence(Int64)
    case text(String?)
    case records([String: StoredRecord])
    case names([String: String])
    case list([String])
    case shares([String: ExistingShare])
    case shareRows([ShareRow])
    /// A share, and its row ID.
    case share((id: Int64, state: ShareState)?)
    case participants([ShareParticipantState])
    case viewAccess(SharedViewAccess?)
    case view(StoredView?)
    /// Records' change sequences, by name: those an action found live before it changed them.
    case liveSequences([String: Int64])
    case count(Int)
    case counts([String: Int])
    /// Record names with when each was last written or deleted, in order.
    case modifiedTimes([(name: String, modified: Int64)])
    case zones([ZoneRow])
    case participations([Participation])
    /// Rows removed, and the files no row names any more.
    case removed(Int, files: [String])
}

extension StoreAnswer {
    // A store that answers an action with the wrong kind of answer is a programming error in that store; each accessor
    // fails the transaction rather than guessing.
    private func mismatch(_ expected: String) -> StoreError {
        StoreError(.unexpected, "the store answered \(self) where \(expected) was expected")
    }

    public var zone: ZoneRow? {
        get throws { if case .zone(let zone) = self { return zone } else { throw mismatch("a zone") } }
    }
    public var createdZone: (zone: ZoneRow, created: Bool) {
        get throws { if case .createdZone(let zone, let created) = self { return (zone, created) } else { throw mismatch("a created zone") } }
    }
    public var sequence: Int64 {
        get throws { if case .sequence(let value) = self { return value } else { throw mismatch("a sequence") } }
    }
    public var text: String? {
        get throws { if case .text(let value) = self { return value } else { throw mismatch("a text") } }
    }
    public var records: [String: StoredRecord] {
        get throws { if case .records(let value) = self { return value } else { throw mismatch("records") } }
    }
    public var names: [String: String] {
        get throws { if case .names(let value) = self { return value } else { throw mismatch("names") } }
    }
    public var list: [String] {
        get throws { if case .list(let value) = self { return value } else { throw mismatch("a list") } }
    }
    public var shares: [String: ExistingShare] {
        get throws { if case .shares(let value) = self { return value } else { throw mismatch("shares") } }
    }
    public var shareRows: [ShareRow] {
        get throws { if case .shareRows(let value) = self { return value } else { throw mismatch("share rows") } }
    }
    public var share: (id: Int64, state: ShareState)? {
        get throws { if case .share(let value) = self { return value } else { throw mismatch("a share") } }
    }
    public var participants: [ShareParticipantState] {
        get throws { if case .participants(let value) = self { return value } else { throw mismatch("participants") } }
    }
    public var viewAccess: SharedViewAccess? {
        get throws { if case .viewAccess(let value) = self { return value } else { throw mismatch("a view's access") } }
    }
    public var view: StoredView? {
        get throws { if case .view(let value) = self { return value } else { throw mismatch("a view") } }
    }
    public var liveSequences: [String: Int64] {
        get throws { if case .liveSequences(let value) = self { return value } else { throw mismatch("live sequences") } }
    }
    public var modifiedTimes: [(name: String, modified: Int64)] {
        get throws { if case .modifiedTimes(let value) = self { return value } else { throw mismatch("modification times") } }
    }
    public var count: Int {
        get throws { if case .count(let value) = self { return value } else { throw mismatch("a count") } }
    }
    public var counts: [String: Int] {
        get throws { if case .counts(let value) = self { return value } else { throw mismatch("counts") } }
    }
    public var zones: [ZoneRow] {
        get throws { if case .zones(let value) = self { return value } else { throw mismatch("zones") } }
    }
    public var participations: [Participation] {
        get throws { if case .participations(let value) = self { return value } else { throw mismatch("participations") } }
    }
    public var removed: (Int, [String]) {
        get throws { if case .removed(let count, let files) = self { return (count, files) } else { throw mismatch("rows removed") } }
    }
}
