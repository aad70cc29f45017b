public import CumulusModel
public import CumulusStore
public import Logging

/// `records/reconcile` and the operator's check of every zone's digest: how a device, or an operator, finds which
/// records differ from what they hold.
public struct ReconciliationService: Sendable, WriteHealthReporting {
    let store: any RecordZoneStore
    let zones: ZoneAccess
    let clock: WallClock
    let writeHealth: WriteHealth

    /// The most ranges one `records/reconcile` compares.
    public static let maximumReconcileRanges = 64

    /// `records/reconcile` (a Cumulus extension): compares ranges of a zone's record names with the digests a device
    /// holds in them, each answered by ``RangeReconciler``. A participant compares what is shared with them.
    ///
    /// The ranges of one request may not overlap, so a request reads each record of the zone once at most, as a feed
    /// from the start does: one holder of a token cannot make one request cost more than reading their zone. The public
    /// database, which has no change feeds to verify, has none either.
    public func reconcile(caller: Caller, scope: DatabaseScope, request: RecordsReconcileRequest, logger: Logger) async throws
        -> RecordsReconcileResponse
    {
        if scope == .public {
            throw CumulusError(.badRequest, "records/reconcile is not available in the public database, which has no change feeds")
        }
        guard !request.ranges.isEmpty else { throw CumulusError(.badRequest, "ranges: name at least one range") }
        guard request.ranges.count <= Self.maximumReconcileRanges else {
            throw CumulusError(
                .badRequest, "ranges: \(request.ranges.count) ranges; the limit is \(Self.maximumReconcileRanges) per request")
        }
        for (index, entry) in request.ranges.enumerated() {
            if let lower = entry.range.lowerBound, let upper = entry.range.upperBound, !lower.utf8.lexicographicallyPrecedes(upper.utf8) {
                throw CumulusError(.badRequest, "ranges[\(index)].upperBound: must come after lowerBound")
            }
            if entry.digest.recordCount < 0 {
                throw CumulusError(.badRequest, "ranges[\(index)].recordCount: must not be negative")
            }
        }
        let ordered = request.ranges.enumerated().sorted { first, second in
            guard let a = first.element.range.lowerBound else { return second.element.range.lowerBound != nil }
            guard let b = second.element.range.lowerBound else { return false }
            return a.utf8.lexicographicallyPrecedes(b.utf8)
        }
        for (previous, next) in zip(ordered, ordered.dropFirst()) {
            guard let end = previous.element.range.upperBound, let start = next.element.range.lowerBound,
                !start.utf8.lexicographicallyPrecedes(end.utf8)
            else {
                throw CumulusError(.badRequest, "ranges[\(next.offset)]: overlaps ranges[\(previous.offset)]; ranges of one request must not overlap")
            }
        }
        let (database, zoneName, access) = try await zones.zone(request.zoneID, caller: caller, scope: scope, access: .read, logger: logger)
        var answers: [RangeReconciliation] = []
        answers.reserveCapacity(request.ranges.count)
        for entry in request.ranges {
            let reconciler = try await mapStoreErrors {
                try await store.scanRecords(
                    RangeReconciler(range: entry.range, theirs: entry.digest), in: entry.range, zoneName: zoneName, database: database,
                    access: access,
                    logger: logger)
            }
            answers.append(reconciler.reconciliation)
        }
        return RecordsReconcileResponse(zoneID: database.zoneID(zoneName), ranges: answers)
    }

    /// Recomputes every zone's digest from its records and sets right those that differ (`cumulus zones
    /// check-digests`): a digest kept in the transaction of every write should never differ, so any it answers is a
    /// fault worth reporting.
    public func checkZoneDigests(logger: Logger) async throws -> [ZoneDigestRepair] {
        try await mapStoreErrors { try await store.refreshZoneDigests(unknownOnly: false, logger: logger) }
    }
}
