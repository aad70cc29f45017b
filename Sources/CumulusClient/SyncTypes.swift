public import CumulusModel
public import Foundation

/// A record change waiting to be sent.
public enum PendingRecordZoneChange: Sendable, Hashable {
    case saveRecord(RecordID)
    case deleteRecord(RecordID)

    public var recordID: RecordID {
        switch self {
        case .saveRecord(let id), .deleteRecord(let id): id
        }
    }
}

/// A zone change waiting to be sent.
public enum PendingDatabaseChange: Sendable, Hashable {
    case saveZone(ZoneID)
    case deleteZone(ZoneID)
}

/// Why the server refused a pending change for good: kept with the change until the app resolves it.
public struct SyncFailure: Sendable, Hashable {
    /// The server's code (`ACCESS_DENIED`, `BAD_REQUEST`, `QUOTA_EXCEEDED`, …).
    public var code: ServerErrorCode
    public var reason: String

    public init(code: ServerErrorCode, reason: String) {
        self.code = code
        self.reason = reason
    }
}

/// A pending change as the state store keeps it: with an increasing sequence number, so the engine removes only the
/// entries a send actually covered, never one added while the batch was in flight.
public struct PendingEntry<Change: Sendable & Hashable>: Sendable, Hashable {
    public var sequence: Int64
    public var change: Change
    /// Set when the server refused the change for a reason retrying cannot fix: it is not sent again until the app
    /// changes the record (which replaces the entry) or discards the failure.
    public var failure: SyncFailure?

    public init(sequence: Int64, change: Change, failure: SyncFailure? = nil) {
        self.sequence = sequence
        self.change = change
        self.failure = failure
    }
}

/// Where a sync engine keeps its state: change tokens and pending changes.
///
/// Implementations persist it; `GRDBSyncStore` (module `CumulusSyncGRDB`) keeps it in the app's own SQLite database,
/// so an app can enqueue a pending change in the same transaction as the edit that causes it.
public protocol SyncStateStore: Sendable {
    func pendingRecordZoneChanges() async throws -> [PendingEntry<PendingRecordZoneChange>]
    func pendingDatabaseChanges() async throws -> [PendingEntry<PendingDatabaseChange>]
    /// Adds changes; a later change to the same record replaces an earlier one (save then delete keeps the delete).
    func add(_ changes: [PendingRecordZoneChange]) async throws
    func add(_ changes: [PendingDatabaseChange]) async throws
    /// Removes pending record changes up to these sequence numbers.
    func removeRecordZoneChanges(_ entries: [PendingEntry<PendingRecordZoneChange>]) async throws
    /// Marks pending record changes as refused for good (entries by sequence number); they stay until replaced or removed.
    func markFailed(_ failures: [(entry: PendingEntry<PendingRecordZoneChange>, failure: SyncFailure)]) async throws
    func removeDatabaseChanges(_ entries: [PendingEntry<PendingDatabaseChange>]) async throws
    func databaseToken() async throws -> String?
    func setDatabaseToken(_ token: String?) async throws
    func zoneToken(for zoneID: ZoneID) async throws -> String?
    func setZoneToken(_ token: String?, for zoneID: ZoneID) async throws
    /// The user record name the state belongs to, as last seen; `nil` before the first check.
    func accountUserRecordName() async throws -> String?
    func setAccountUserRecordName(_ userRecordName: String?) async throws
    /// Forgets every token, pending change and per-record state: the account changed.
    func reset() async throws
}

/// A change of the signed-in account, as CKSyncEngine reports it.
public enum AccountChange: Sendable, Hashable {
    /// Someone signed in where no account was known (the first sync included).
    case signIn(currentUser: String)
    /// The user signed out: the container has no token. (An expired token is not a sign-out: requests fail with
    /// `AUTHENTICATION_FAILED` until the app signs in again, and nothing is forgotten unless another user signs in.)
    case signOut(previousUser: String)
    /// Another user signed in on this device.
    case switchAccounts(previousUser: String, currentUser: String)
}

/// A batch of record changes to send, as the delegate supplies it.
public struct RecordZoneChangeBatch: Sendable {
    public var recordsToSave: [CloudRecord]
    public var recordIDsToDelete: [RecordID]
    /// Pending saves whose record no longer exists locally: dropped without sending.
    public var skipped: [RecordID]

    public init(recordsToSave: [CloudRecord] = [], recordIDsToDelete: [RecordID] = []) {
        self.recordsToSave = recordsToSave
        self.recordIDsToDelete = recordIDsToDelete
        self.skipped = []
    }

    /// Builds a batch from pending changes, asking `recordProvider` for each record to save.
    public init(pendingChanges: [PendingRecordZoneChange], recordProvider: (RecordID) async throws -> CloudRecord?) async rethrows {
        self.init()
        for change in pendingChanges {
            switch change {
            case .saveRecord(let id):
                if let record = try await recordProvider(id) { recordsToSave.append(record) } else { skipped.append(id) }
            case .deleteRecord(let id):
                recordIDsToDelete.append(id)
            }
        }
    }
}

/// What the engine is doing, for an app to show.
public struct SyncStatus: Sendable, Hashable {
    public enum Phase: Sendable, Hashable {
        case idle
        case fetching
        case sending
        /// The last run failed; it keeps the reason.
        case error(String)
    }

    public var phase: Phase
    /// Changes waiting to be sent, refused ones included.
    public var pendingCount: Int
    /// Changes the server refused for good, waiting for the app to resolve them (see ``SyncEngine/Event/failedToSaveRecord(_:error:)``).
    public var failedCount: Int
    /// Whether ``SyncEngine/run(sendDelay:fallbackInterval:)`` hears of changes through the server's courier; while it
    /// does not (no network, a server restarting), changes arrive at its fallback fetches.
    public var isPushLive: Bool
    /// When a fetch last completed.
    public var lastFetchedAt: Date?
    /// When a send last completed.
    public var lastSentAt: Date?
    /// When ``SyncEngine/verify(_:)`` last completed, and whether every zone was in sync then.
    public var lastVerifiedAt: Date?
    public var lastVerifiedInSync: Bool?
    /// Whether the server was told of the last verification (`devices/verification`); `false` while a report waits
    /// for the next fetch, `nil` before the first.
    public var lastVerificationReported: Bool?
    /// When the courier last told of a change.
    public var lastNotificationAt: Date?

    public init(phase: Phase, pendingCount: Int, failedCount: Int = 0, isPushLive: Bool = false) {
        self.phase = phase
        self.pendingCount = pendingCount
        self.failedCount = failedCount
        self.isPushLive = isPushLive
    }
}

/// Orders and splits a batch for the server: parents before children, at most `maximumCount` operations and about
/// `maximumBytes` of fields per request. Pure, so it is tested without a server.
public struct SendPlanner: Sendable {
    public var maximumCount: Int
    public var maximumBytes: Int

    public init(maximumCount: Int = 200, maximumBytes: Int = 1_500_000) {
        self.maximumCount = maximumCount
        self.maximumBytes = maximumBytes
    }

    /// Saves sorted so every parent in the batch comes before its children; unrelated order is kept.
    public func parentsFirst(_ records: [CloudRecord]) -> [CloudRecord] {
        let byName = Dictionary(records.map { ($0.recordID, $0) }, uniquingKeysWith: { first, _ in first })
        var placed = Set<RecordID>()
        var ordered: [CloudRecord] = []
        ordered.reserveCapacity(records.count)
        func place(_ record: CloudRecord, depth: Int) {
            guard !placed.contains(record.recordID) else { return }
            if depth < 1000, let parent = record.parent, let parentRecord = byName[RecordID(recordName: parent, zoneID: record.recordID.zoneID)] {
                place(parentRecord, depth: depth + 1)
            }
            if placed.insert(record.recordID).inserted { ordered.append(record) }
        }
        for record in records { place(record, depth: 0) }
        return ordered
    }

    /// Requests for one zone: saves (parents first) then deletions, split by count and size.
    public func requests(saving: [CloudRecord], deleting: [RecordID]) -> [(saves: [CloudRecord], deletes: [RecordID])] {
        var requests: [(saves: [CloudRecord], deletes: [RecordID])] = []
        var saves: [CloudRecord] = []
        var bytes = 0
        for record in parentsFirst(saving) {
            let size = RecordFieldsCoding.canonical(record.fields).count
            if !saves.isEmpty, saves.count >= maximumCount || bytes + size > maximumBytes {
                requests.append((saves, []))
                saves = []
                bytes = 0
            }
            saves.append(record)
            bytes += size
        }
        if !saves.isEmpty { requests.append((saves, [])) }
        for start in stride(from: 0, to: deleting.count, by: maximumCount) {
            requests.append(([], Array(deleting[start..<min(start + maximumCount, deleting.count)])))
        }
        return requests
    }
}

/// What a `records/modify` answer settles, apart from I/O.
enum SendSettlement {
    /// A `create` the server answers `EXISTS` with a record equal to the one sent was this device's own earlier write,
    /// applied while its answer was lost: it is saved, and the server's record (with its change tag) is the result.
    static func settlingOwnEarlierWrites(_ result: ModifyRecordsResult) -> ModifyRecordsResult {
        var settled = result
        settled.failedSaves = []
        for failure in result.failedSaves {
            if failure.error.code == .server(.exists), failure.record.recordChangeTag == nil, let server = failure.error.serverRecord,
                server.recordType == failure.record.recordType, server.fields == failure.record.fields, server.parent == failure.record.parent
            {
                settled.saved.append(server)
            } else {
                settled.failedSaves.append(failure)
            }
        }
        return settled
    }
}

/// Backoff between retries of transient failures: the server's `retryAfter` when it gives one, else exponential.
public struct RetryPolicy: Sendable, Hashable {
    public var maximumAttempts: Int
    public var initialDelay: Duration
    public var maximumDelay: Duration

    public init(maximumAttempts: Int = 5, initialDelay: Duration = .milliseconds(200), maximumDelay: Duration = .seconds(60)) {
        self.maximumAttempts = maximumAttempts
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
    }

    /// The delay before attempt `attempt` (1-based, after a failure), or `nil` when attempts are exhausted.
    public func delay(afterAttempt attempt: Int, retryAfter: Int?) -> Duration? {
        guard attempt < maximumAttempts else { return nil }
        return backoff(afterFailure: attempt, retryAfter: retryAfter)
    }

    /// The delay after `failures` failures in a row, for work that is never given up (the sync engine's courier).
    public func backoff(afterFailure failures: Int, retryAfter: Int?) -> Duration {
        if let retryAfter { return min(.seconds(retryAfter), maximumDelay) }
        let exponential = initialDelay * (1 << min(max(failures, 1) - 1, 20))
        return min(exponential, maximumDelay)
    }
}
