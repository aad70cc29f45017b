public import CumulusModel

/// What a store hands a scan of a zone's live records, in name order: the number first, then each record's name and
/// change sequence. A scan is a value the store fills in one read and returns, so what it keeps (a digest, boundaries,
/// the names of a small range) is its own business and memory stays bounded by it.
public protocol RecordSequenceScan: Sendable {
    /// The number of records the scan will see.
    mutating func begin(count: Int)
    /// One record, in name order.
    mutating func add(recordName: String, changeSequence: Int64)
}

/// The digest of the records a scan sees.
public struct DigestScan: RecordSequenceScan {
    public private(set) var digest = ZoneDigest.empty

    public init() {}

    public mutating func begin(count: Int) {}

    public mutating func add(recordName: String, changeSequence: Int64) {
        digest.add(ZoneDigest(recordName: recordName, changeTag: ChangeTag.make(changeSequence)))
    }
}

/// A zone whose stored digest did not match its records (or was not computed yet), and was set right.
public struct ZoneDigestRepair: Sendable, Hashable {
    public var database: DatabaseRef
    public var zoneName: String
    /// The digest that was stored; `nil` when none was computed yet (a zone from before digests).
    public var stored: ZoneDigest?
    /// The digest of its records, now stored.
    public var computed: ZoneDigest

    public init(database: DatabaseRef, zoneName: String, stored: ZoneDigest?, computed: ZoneDigest) {
        self.database = database
        self.zoneName = zoneName
        self.stored = stored
        self.computed = computed
    }
}
