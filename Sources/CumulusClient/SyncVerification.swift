public import CumulusModel

/// What a device holds of one zone, as the app's own tables show it: for each record, the change tag of the server
/// version it holds (or that its unsent edit is based on). ``SyncEngine/verify(_:)`` compares it with the server.
///
/// A delegate builds it from the rows the app reads, not from the engine's bookkeeping, so a row deleted or changed
/// behind the engine's back is found: a row whose values no longer match the version it was given is listed with a
/// tag no server version has (``alteredTag(_:)``), and a row the server never gave (with no unsent creation) with
/// ``unknownTag``.
public struct LocalRecordVersions: Sendable, Hashable {
    /// Change tags by record name.
    public var versions: [String: String]
    /// Records with a change waiting to be sent: a difference in them is expected, and ``SyncEngine/repair(_:)``
    /// leaves them to the next send, which settles them as any conflict.
    public var pending: Set<String>

    public init(versions: [String: String], pending: Set<String>) {
        self.versions = versions
        self.pending = pending
    }

    /// The tag of a row whose values differ from the version `tag` it was given, with no edit waiting to be sent.
    public static func alteredTag(_ tag: String) -> String { "altered:\(tag)" }
    /// The tag of a row the server never gave and no edit waits to create.
    public static let unknownTag = "unknown"
}

/// A delegate that can tell what the device holds (``LocalRecordVersions``) and so lets ``SyncEngine/verify(_:)`` and
/// ``SyncEngine/repair(_:)`` work. `GRDBSyncAdapter` is one.
public protocol SyncVerifyingDelegate: SyncEngineDelegate {
    /// What the device holds of a zone, read from the app's tables.
    func localRecordVersions(in zoneID: ZoneID, syncEngine: SyncEngine) async throws -> LocalRecordVersions
}

/// How one zone on this device compares with the server.
public struct ZoneVerification: Sendable, Hashable {
    public var zoneID: ZoneID
    /// The token the comparison was made at: the device had fetched every change up to it.
    public var syncToken: String?
    /// Records the server holds that the device does not.
    public var missing: Set<String>
    /// Records the device holds that the server does not.
    public var extra: Set<String>
    /// Records both hold in different versions (or whose row was changed behind the engine's back).
    public var stale: Set<String>
    /// Of those, the records with a change waiting to be sent, which ``SyncEngine/repair(_:)`` leaves alone.
    public var pending: Set<String>
    /// The requests `records/reconcile` took to find the differences (0 when the digests agreed).
    public var roundTrips: Int

    /// Whether the device holds exactly what the server holds.
    public var isInSync: Bool { missing.isEmpty && extra.isEmpty && stale.isEmpty }

    public init(
        zoneID: ZoneID, syncToken: String?, missing: Set<String> = [], extra: Set<String> = [], stale: Set<String> = [], pending: Set<String> = [],
        roundTrips: Int = 0
    ) {
        self.zoneID = zoneID
        self.syncToken = syncToken
        self.missing = missing
        self.extra = extra
        self.stale = stale
        self.pending = pending
        self.roundTrips = roundTrips
    }
}

/// Finds the records that differ between a device and the server, by range fingerprints: the device sends the digest
/// of what it holds in each range still in question, the server answers each as matching, cut into parts with its own
/// digests, or (when small) with its records. Pure but for `reconcile`, the round trip, so it is tested without a server.
public struct RangeComparison: Sendable {
    /// The most ranges one request carries (the server's limit).
    public static let maximumRangesPerRequest = 64

    public init() {}

    /// The differences between `local` and what `reconcile` answers for.
    public func differences(
        _ local: LocalRecordVersions, reconcile: @Sendable ([RangeDigest]) async throws -> [RangeReconciliation]
    ) async throws -> (missing: Set<String>, extra: Set<String>, stale: Set<String>, roundTrips: Int) {
        let index = SortedVersions(local.versions)
        var missing = Set<String>()
        var extra = Set<String>()
        var stale = Set<String>()
        var roundTrips = 0
        var open = [RangeDigest(range: .all, digest: index.digest(in: .all))]
        while !open.isEmpty {
            let batch = Array(open.prefix(Self.maximumRangesPerRequest))
            open.removeFirst(batch.count)
            roundTrips += 1
            for answer in try await reconcile(batch) {
                switch answer {
                case .match:
                    continue
                case .split(_, let parts):
                    for part in parts {
                        let mine = index.digest(in: part.range)
                        if mine != part.digest { open.append(RangeDigest(range: part.range, digest: mine)) }
                    }
                case .list(let range, let records):
                    var theirs: [String: String] = [:]
                    for record in records { theirs[record.recordName] = record.recordChangeTag }
                    for name in index.names(in: range) {
                        guard let tag = local.versions[name] else { continue }
                        if let server = theirs[name] {
                            if server != tag { stale.insert(name) }
                        } else {
                            extra.insert(name)
                        }
                    }
                    for name in theirs.keys where local.versions[name] == nil { missing.insert(name) }
                }
            }
        }
        return (missing, extra, stale, roundTrips)
    }
}

/// A device's versions sorted by the bytes of their names, with running sums of their digests, so the digest of any
/// range is two binary searches and a subtraction: a zone of 100,000 records is hashed once, not once per range.
struct SortedVersions {
    private let names: [String]
    private let keys: [[UInt8]]
    /// `sums[i]`: the digest of the first `i` records.
    private let sums: [ZoneDigest]

    init(_ versions: [String: String]) {
        let sorted = versions.map { (key: Array($0.key.utf8), name: $0.key, tag: $0.value) }
            .sorted { $0.key.lexicographicallyPrecedes($1.key) }
        names = sorted.map(\.name)
        keys = sorted.map(\.key)
        var sums = [ZoneDigest.empty]
        sums.reserveCapacity(sorted.count + 1)
        for entry in sorted { sums.append(sums[sums.count - 1].adding(ZoneDigest(recordName: entry.name, changeTag: entry.tag))) }
        self.sums = sums
    }

    /// The position of the first name not before `bound` (`nil`: the end given).
    private func position(_ bound: String?, open: Int) -> Int {
        guard let bound else { return open }
        let key = Array(bound.utf8)
        var low = 0
        var high = keys.count
        while low < high {
            let middle = (low + high) / 2
            if keys[middle].lexicographicallyPrecedes(key) { low = middle + 1 } else { high = middle }
        }
        return low
    }

    func digest(in range: RecordNameRange) -> ZoneDigest {
        let start = position(range.lowerBound, open: 0)
        let end = max(start, position(range.upperBound, open: keys.count))
        var digest = sums[end]
        digest.subtract(sums[start])
        return digest
    }

    func names(in range: RecordNameRange) -> ArraySlice<String> {
        let start = position(range.lowerBound, open: 0)
        return names[start..<max(start, position(range.upperBound, open: keys.count))]
    }
}
