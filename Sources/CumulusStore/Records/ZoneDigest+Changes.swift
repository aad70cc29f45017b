public import CumulusModel

extension ZoneDigest {
    /// How a zone's digest changes when rows that were live with `replaced` sequences become `written` (a name absent
    /// from `written` is no longer live): each replaced record's contribution goes, each written one's comes.
    ///
    /// Both sides are the change tags the feeds hand out (``ChangeTag/make(_:)``), so the digest a device computes
    /// from the records it received is the one the zone keeps.
    public static func change(replacing replaced: [String: Int64], with written: [String: Int64]) -> ZoneDigest {
        var change = ZoneDigest.empty
        for (name, sequence) in replaced { change.subtract(ZoneDigest(recordName: name, changeTag: ChangeTag.make(sequence))) }
        for (name, sequence) in written { change.add(ZoneDigest(recordName: name, changeTag: ChangeTag.make(sequence))) }
        return change
    }
}

extension TransactionScript where Output == Void {
    /// Runs an action that changes records' change sequences (renumbering, pointing a root at a share, clearing its
    /// reference), then adjusts the zone's digest by what it answered: each record it found live now has the
    /// sequence `sequences` gives it.
    static func changeRecords(_ action: StoreAction, zone: Int64, to sequences: [String: Int64]) -> Self {
        .perform(action) { answer in
            let replaced = try answer.liveSequences
            guard !replaced.isEmpty else { return .finished }
            let written = sequences.filter { replaced[$0.key] != nil }
            return .perform(.adjustZoneDigest(zone: zone, by: ZoneDigest.change(replacing: replaced, with: written)))
        }
    }

    /// Runs an action that deletes records, then takes their contributions out of the zone's digest.
    static func deleteRecords(_ action: StoreAction, zone: Int64) -> Self {
        .perform(action) { answer in
            let replaced = try answer.liveSequences
            guard !replaced.isEmpty else { return .finished }
            return .perform(.adjustZoneDigest(zone: zone, by: ZoneDigest.change(replacing: replaced, with: [:])))
        }
    }
}
