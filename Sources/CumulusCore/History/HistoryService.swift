import CumulusModel
public import CumulusStore
import Foundation
public import Logging

/// What a zone restore did, or with `dryRun` would do.
public struct ZoneRestoreReport: Sendable, Hashable {
    /// Records changed since the moment, brought back as they were.
    public var changed = 0
    /// Records deleted since, brought back.
    public var deleted = 0
    /// Records created since, deleted.
    public var created = 0
    /// Operations the store refused (a record whose type changed since, a parent that no longer exists).
    public var failures: [RecordFailure] = []
    /// When the restore's writes began (milliseconds): restoring to the moment before undoes it.
    public var startedAt: Int64 = 0

    public init() {}
}

/// The records' past: restoring a zone to a moment, listing and undeleting deleted records, and dropping versions past
/// the retention. Writes keep versions in their own transactions (``ModifyRecordsScript``); this service reads them.
public struct HistoryService: Sendable, WriteHealthReporting {
    /// The versions, and the zone writes a restore is made of.
    let store: any RecordHistoryStore & RecordZoneStore
    let limits: Limits
    let clock: WallClock
    let changes: ChangeSignal?
    let writeHealth: WriteHealth
    /// How long replaced and deleted versions are kept; zero keeps none.
    let historyRetention: Duration

    var keepsHistory: Bool { historyRetention > .zero }

    /// The oldest moment the history reaches back to now (milliseconds).
    func historyHorizon(now: Int64) -> Int64 {
        now - historyRetention.components.seconds * 1000 - historyRetention.components.attoseconds / 1_000_000_000_000_000
    }

    private func checkRestorable(_ time: Int64, now: Int64, path: String) throws(CumulusError) {
        guard keepsHistory else { throw CumulusError(.badRequest, "\(path): history is off on this server (--history-retention 0)") }
        guard time < now else { throw CumulusError(.badRequest, "\(path): \(time) is not in the past") }
        let horizon = historyHorizon(now: now)
        guard time >= horizon else {
            throw CumulusError(.badRequest, "\(path): \(time) is before the history window, which reaches back to \(horizon) (--history-retention)")
        }
    }

    /// Restores a zone to how it was at `time` (milliseconds), as new changes: records changed since come back as they
    /// were, records deleted since come back, records created since are deleted (``RestoreDifference``). Devices fetch it
    /// from their feeds like any other change, with no token reset; a device's unsent edit then meets the restored record
    /// as an ordinary conflict. Share records and who a zone is shared with are left as they are.
    ///
    /// The zone is read and written in pages of `pageSize` records, each page one transaction: a restore stopped midway
    /// has restored some pages, and running it again finishes it (records already restored show no difference).
    /// Operations that name a parent restored by a later page are retried at the end.
    ///
    /// - Parameter difference: Called with each difference, in the byte order of record names (before it is written).
    public func restoreZone(
        _ zoneName: String, in database: DatabaseRef, to time: Int64, dryRun: Bool, pageSize: Int = 400, logger: Logger,
        difference: (RestoreDifference) -> Void = { _ in }
    ) async throws -> ZoneRestoreReport {
        let now = clock.milliseconds()
        try checkRestorable(time, now: now, path: "to")
        var report = ZoneRestoreReport()
        report.startedAt = now
        var after: String?
        var retry: [RecordModification] = []
        while true {
            let page = try await mapStoreErrors {
                try await store.recordsChanged(since: time, zoneName: zoneName, in: database, after: after, limit: pageSize, logger: logger)
            }
            var operations: [RecordModification] = []
            for change in page.changes {
                guard let found = RestoreDifference.between(change) else { continue }
                difference(found)
                switch found {
                case .changed: report.changed += 1
                case .deleted: report.deleted += 1
                case .created: report.created += 1
                }
                operations.append(try found.modification())
            }
            if !dryRun, !operations.isEmpty {
                for failure in try await write(operations, zoneName: zoneName, in: database, logger: logger) {
                    if failure.code == .validatingReferenceError, let operation = operations.first(where: { $0.recordName == failure.recordName }) {
                        retry.append(operation)
                    } else {
                        report.failures.append(failure)
                    }
                }
            }
            guard let next = page.next else { break }
            after = next
        }
        // Children whose parents came back in a later page.
        var start = retry.startIndex
        while start < retry.endIndex {
            let end = min(start + pageSize, retry.endIndex)
            report.failures += try await write(Array(retry[start..<end]), zoneName: zoneName, in: database, logger: logger)
            start = end
        }
        logger.notice(
            "restored a zone",
            metadata: [
                "cumulus.zone": "\(zoneName)", "cumulus.owner": "\(database.ownerRecordName)", "cumulus.restore.to": "\(time)",
                "cumulus.restore.dry_run": "\(dryRun)", "cumulus.restore.changed": "\(report.changed)",
                "cumulus.restore.deleted": "\(report.deleted)", "cumulus.restore.created": "\(report.created)",
                "cumulus.restore.failed": "\(report.failures.count)",
            ])
        return report
    }

    /// Records of a zone deleted within the history window, newest deletion first, each as it was before.
    public func deletedRecords(_ zoneName: String, in database: DatabaseRef, names: [String]? = nil, limit: Int = 200, logger: Logger)
        async throws -> [DeletedRecord]
    {
        let horizon = historyHorizon(now: clock.milliseconds())
        return try await mapStoreErrors {
            try await store.deletedRecords(since: horizon, zoneName: zoneName, in: database, names: names, limit: limit, logger: logger)
        }
    }

    /// Brings deleted records back as they were before their deletion, each with a new change tag; a name that is live
    /// or whose deletion is older than the history window fails with `NOT_FOUND`.
    public func undeleteRecords(_ names: [String], zoneName: String, in database: DatabaseRef, logger: Logger) async throws
        -> [RecordModificationResult]
    {
        try limits.checkCount(names.count, path: "recordNames")
        let deleted = Dictionary(
            try await deletedRecords(zoneName, in: database, names: names, limit: names.count, logger: logger).map {
                ($0.record.header.recordName, $0)
            },
            uniquingKeysWith: { newest, _ in newest })
        var results: [String: RecordModificationResult] = [:]
        var operations: [RecordModification] = []
        for name in names {
            if let record = deleted[name]?.record {
                operations.append(try RestoreDifference.deleted(record).modification())
            } else {
                results[name] = .failed(
                    RecordFailure(recordName: name, code: .notFound, reason: "record \(name) was not deleted within the history window"))
            }
        }
        if !operations.isEmpty {
            let batch = restoreBatch(operations, zoneName: zoneName, in: database)
            for result in try await mapStoreErrors(writing: true, { try await store.modifyRecords(batch, logger: logger) }) {
                switch result {
                case .saved(let record): results[record.header.recordName] = result
                case .failed(let failure): results[failure.recordName] = result
                case .deleted(let name): results[name] = result
                }
            }
            changes?.changed([ChangeSignal.key(database)])
        }
        return names.compactMap { results[$0] }
    }

    /// Writes a page of a restore; answers the operations that failed.
    private func write(_ operations: [RecordModification], zoneName: String, in database: DatabaseRef, logger: Logger) async throws
        -> [RecordFailure]
    {
        let batch = restoreBatch(operations, zoneName: zoneName, in: database)
        let results = try await mapStoreErrors(writing: true) { try await store.modifyRecords(batch, logger: logger) }
        changes?.changed([ChangeSignal.key(database)])
        return results.compactMap { if case .failed(let failure) = $0 { failure } else { nil } }
    }

    /// A restore's writes: by the database's owner from the device `cumulus-restore`, not atomic (one refused record
    /// does not hold back the others), kept in the history so that the restore itself can be undone.
    private func restoreBatch(_ operations: [RecordModification], zoneName: String, in database: DatabaseRef) -> RecordBatch {
        RecordBatch(
            database: database, zoneName: zoneName, atomic: false, operations: operations, author: database.ownerRecordName,
            deviceID: Self.restoreDeviceID, timestamp: clock.milliseconds(), maximumRecordSize: limits.maximumRecordSize, keepsHistory: keepsHistory)
    }

    /// The device a restore or an undelete writes as, so the console and devices can tell it from a user's edit.
    public static let restoreDeviceID = "cumulus-restore"

    /// Drops the versions older than the retention (every version, when history is off); answers how many.
    public func prune(logger: Logger) async throws -> Int {
        let now = clock.milliseconds()
        return try await mapStoreErrors {
            try await store.pruneHistory(replacedBefore: keepsHistory ? historyHorizon(now: now) : now + 1, logger: logger)
        }
    }
}

/// A moment as people and scripts write it, for restores.
public enum HistoryMoment {
    /// Milliseconds since 1970 from ISO 8601 (`2026-11-26T09:30:00Z`, with fractional seconds or an offset; without a
    /// zone, as a browser's `datetime-local` sends it, UTC) or from the milliseconds themselves.
    public static func milliseconds(parsing text: String) -> Int64? {
        let text = text.trimmingCharacters(in: .whitespaces)
        if let milliseconds = Int64(text) { return milliseconds }
        var candidates = [text]
        // `2026-11-26T09:30` and `2026-11-26T09:30:15`: no zone, UTC.
        if text.count >= 16, !text.hasSuffix("Z"), !text.dropFirst(16).contains(where: { $0 == "+" || $0 == "-" }) {
            candidates.append(text.count == 16 ? text + ":00Z" : text + "Z")
        }
        let formatter = ISO8601DateFormatter()
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime], [.withInternetDateTime, .withFractionalSeconds]] {
            formatter.formatOptions = options
            for candidate in candidates {
                if let date = formatter.date(from: candidate) { return Int64((date.timeIntervalSince1970 * 1000).rounded()) }
            }
        }
        return nil
    }

    /// ISO 8601 with milliseconds, UTC.
    public static func text(_ milliseconds: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }
}
