public import CumulusModel
import Foundation

extension SyncEngine {
    /// Proves that this device holds exactly what the server holds, zone by zone, from the app's own tables.
    ///
    /// Each zone is fetched up to now first; the page that ends its feed carries the server's digest of the zone as
    /// this user sees it. When the digest of what the delegate reports (``SyncVerifyingDelegate``) agrees, the zone is
    /// in sync as of that token, for 40 bytes. When it does not, `records/reconcile` narrows the difference to the exact
    /// records in a few round trips (``RangeComparison``), with bytes in proportion to the differences, not the zone.
    /// Nothing is changed: ``repair(_:)`` fixes what a report names.
    public func verify(_ scope: Scope = .all) async throws -> [ZoneVerification] {
        guard let delegate = configuration.delegate as? any SyncVerifyingDelegate else {
            throw CloudError(code: .invalidResponse, reason: "verify() needs a delegate that conforms to SyncVerifyingDelegate")
        }
        let database = configuration.database
        // Zones deleted or lost since the last fetch are dropped first; zones this fetch reads to their end bring their
        // digest with them.
        forgetFetchedDigests()
        try await fetchChanges(scope)
        let zoneIDs = try await withRetries { try await database.allZones() }.filter { scope.contains($0) }
        var reports: [ZoneVerification] = []
        for zoneID in zoneIDs.sorted(by: { $0.description < $1.description }) {
            // A zone that did not change is read from its token: one empty page, which carries the digest.
            if fetchedDigest(of: zoneID) == nil { try await fetchOneZone(zoneID, startOver: false) }
            let local = try await delegate.localRecordVersions(in: zoneID, syncEngine: self)
            guard let (token, digest) = fetchedDigest(of: zoneID) else {
                throw CloudError(code: .invalidResponse, reason: "the server sent no zone digest for \(zoneID); it needs Cumulus with zone digests")
            }
            var report = ZoneVerification(zoneID: zoneID, syncToken: token)
            if SortedVersions(local.versions).digest(in: .all) != digest {
                let found = try await RangeComparison().differences(local) { ranges in
                    try await self.withRetries { try await database.reconcile(ranges, in: zoneID) }
                }
                report.missing = found.missing
                report.extra = found.extra
                report.stale = found.stale
                report.roundTrips = found.roundTrips
                report.pending = local.pending.intersection(found.missing.union(found.extra).union(found.stale))
            }
            reports.append(report)
        }
        await noteVerified(reports)
        return reports
    }

    /// Fixes what ``verify(_:)`` found, and only that: the records missing or stale on the device are fetched by name
    /// and handed to the delegate as fetched changes, the extra ones as deletions; records with a change waiting to be
    /// sent are left to that send, which settles them as any conflict. Nothing is wiped and no token is reset. Answers
    /// a new verification of the repaired zones.
    public func repair(_ reports: [ZoneVerification]) async throws -> [ZoneVerification] {
        let database = configuration.database
        var repaired = Set<ZoneID>()
        for report in reports where !report.isInSync {
            let fetch = report.missing.union(report.stale).subtracting(report.pending).sorted()
            var modified: [CloudRecord] = []
            var gone = report.extra.subtracting(report.pending)
            // Lookups of at most 200 records, the server's limit per request.
            var start = 0
            while start < fetch.count {
                let names = Array(fetch[start..<min(start + 200, fetch.count)])
                start += names.count
                let found = try await withRetries { try await database.records(named: names, in: report.zoneID) }
                for name in names {
                    if let record = found[name] { modified.append(record) } else { gone.insert(name) }
                }
            }
            let deleted = gone.sorted().map { RecordID(recordName: $0, zoneID: report.zoneID) }
            guard !modified.isEmpty || !deleted.isEmpty else { continue }
            try await configuration.delegate.handleEvent(
                .fetchedRecordZoneChanges(zoneID: report.zoneID, modified: modified, deleted: deleted), syncEngine: self)
            repaired.insert(report.zoneID)
        }
        guard !repaired.isEmpty else { return reports }
        return try await verify(.zoneIDs(repaired))
    }

    /// The worst case: fetches a zone again from the start, keeping every change waiting to be sent, and drops the
    /// rows the server no longer has (``Event/reconciledZone(zoneID:present:)``), except those with an unsent edit.
    public func resync(_ zoneID: ZoneID) async throws {
        try await fetchOneZone(zoneID, startOver: true)
    }
}
