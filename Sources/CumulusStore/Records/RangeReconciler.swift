public import CumulusModel

/// How the server answers one range of `records/reconcile`, written once for every store: a scan of the records it
/// holds in the range (``RecordSequenceScan``), compared with the digest the device sent.
///
/// A range whose digests agree matches. One that differs and holds at most ``listLimit`` records on the server is
/// answered with those records (name and change tag), so the device sees exactly what differs. A larger one is cut into
/// at most ``fanOut`` parts of equal count, each with the server's digest, for the device to compare again: a zone of a
/// million records with a handful of differences is narrowed to them in about five round trips, and the bytes grow
/// with the differences, not the zone.
public struct RangeReconciler: RecordSequenceScan {
    /// The most records a differing range is answered with, rather than cut.
    public static let listLimit = 32
    /// The parts a differing range is cut into.
    public static let fanOut = 16

    let range: RecordNameRange
    let theirs: ZoneDigest
    private var ours = ZoneDigest.empty
    private var count = 0
    private var seen = 0
    private var partSize = 1
    private var listed: [RecordVersion] = []
    private var parts: [(lowerBound: String, digest: ZoneDigest)] = []

    /// A reconciler of `range`, where the device holds records of digest `theirs`.
    public init(range: RecordNameRange, theirs: ZoneDigest) {
        self.range = range
        self.theirs = theirs
    }

    public mutating func begin(count: Int) {
        self.count = count
        partSize = max(1, (count + Self.fanOut - 1) / Self.fanOut)
    }

    public mutating func add(recordName: String, changeSequence: Int64) {
        let tag = ChangeTag.make(changeSequence)
        let digest = ZoneDigest(recordName: recordName, changeTag: tag)
        ours.add(digest)
        if count <= Self.listLimit {
            listed.append(RecordVersion(recordName: recordName, recordChangeTag: tag))
        } else {
            if seen % partSize == 0 { parts.append((recordName, .empty)) }
            parts[parts.count - 1].digest.add(digest)
        }
        seen += 1
    }

    /// The answer for the range.
    public var reconciliation: RangeReconciliation {
        if ours == theirs { return .match(range) }
        if count <= Self.listLimit { return .list(range, listed) }
        // Parts cover the whole range: the first starts at its lower bound, each ends where the next starts.
        let cut = parts.indices.map { index in
            RangeDigest(
                range: RecordNameRange(
                    lowerBound: index == 0 ? range.lowerBound : parts[index].lowerBound,
                    upperBound: index == parts.count - 1 ? range.upperBound : parts[index + 1].lowerBound),
                digest: parts[index].digest)
        }
        return .split(range, cut)
    }
}
