public import CumulusModel
public import Foundation

/// Receives a sync engine's events and supplies the records it sends, as CKSyncEngineDelegate does.
public protocol SyncEngineDelegate: AnyObject, Sendable {
    /// Handles an event. Events come one at a time, in order; the engine saves a zone's change token only after the
    /// event carrying its changes was handled.
    func handleEvent(_ event: SyncEngine.Event, syncEngine: SyncEngine) async throws
    /// The next batch to send, built from pending changes (usually with ``RecordZoneChangeBatch/init(pendingChanges:recordProvider:)``);
    /// `nil` when there is nothing more.
    func nextRecordZoneChangeBatch(_ pending: [PendingRecordZoneChange], syncEngine: SyncEngine) async throws -> RecordZoneChangeBatch?
}

/// Keeps a local store in step with one database (private or shared), shaped like CKSyncEngine.
///
/// ```swift
/// let engine = SyncEngine(SyncEngine.Configuration(database: container.privateCloudDatabase, stateStore: store, delegate: adapter))
/// try await engine.sendChanges()
/// try await engine.fetchChanges()
/// ```
///
/// What it does better than CKSyncEngine: pending changes live in a ``SyncStateStore`` that can share the app's
/// transaction; batches are split to the server's limits (and halved again if the server still refuses them);
/// parents go before children; `THROTTLED`, `TRY_AGAIN_LATER` and network failures are retried with backoff that
/// honours `retryAfter`, keeping the pending change; a zone deleted on the server (or a lost share) is reported; an
/// unusable change token leads to a full re-fetch that also reports local records the server no longer has; and
/// ``status`` says what it is doing.
public actor SyncEngine {
    /// Settings.
    public struct Configuration: Sendable {
        public var database: CloudDatabase
        public var stateStore: any SyncStateStore
        public var delegate: any SyncEngineDelegate
        public var planner: SendPlanner
        public var retryPolicy: RetryPolicy
        /// Waits between retries; tests inject a faster one.
        public var sleep: @Sendable (Duration) async throws -> Void
        /// When fetched records' assets are downloaded.
        public var assetDownloads: AssetDownloads

        public init(
            database: CloudDatabase, stateStore: any SyncStateStore, delegate: any SyncEngineDelegate, planner: SendPlanner = .init(),
            retryPolicy: RetryPolicy = .init(), sleep: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) },
            assetDownloads: AssetDownloads = .onDemand
        ) {
            self.database = database
            self.stateStore = stateStore
            self.delegate = delegate
            self.planner = planner
            self.retryPolicy = retryPolicy
            self.sleep = sleep
            self.assetDownloads = assetDownloads
        }
    }

    /// When fetched records' assets are downloaded.
    public enum AssetDownloads: Sendable {
        /// The app downloads an asset when it needs it, with ``CloudDatabase/downloadAsset(_:to:)`` (from the
        /// record's `downloadURL`, which works for an hour; fetch again after that).
        case onDemand
        /// Before a page of fetched records reaches the delegate, each asset is downloaded into the directory, and the
        /// record's ``CloudRecord/downloadedAssets`` says where. The engine owns the directory: each zone's files are in
        /// a folder of their own, named by their checksum (an asset fetched again is not downloaded again), and when
        /// access to a zone ends (the zone deleted, its share stopped or the participant removed) its folder is deleted
        /// with it, as is the whole directory when the account signs out or switches.
        case onFetch(directory: URL)
    }

    /// Events, as CKSyncEngine.Event.
    public enum Event: Sendable {
        /// The account changed since this state was last used. On a sign-out or a switch, the engine has forgotten
        /// its tokens and pending changes by the time it sends this; the app drops the previous user's data.
        case accountChange(AccountChange)
        case willFetchChanges
        /// Zones changed or deleted on the server (a lost share reads as a deleted zone).
        case fetchedDatabaseChanges(modified: [ZoneID], deleted: [ZoneID])
        /// A page of a zone's changes: apply it; its token is saved after this event.
        case fetchedRecordZoneChanges(zoneID: ZoneID, modified: [CloudRecord], deleted: [RecordID])
        /// After a full re-fetch of a zone (its token was unusable): records not in `present` are gone from the server.
        case reconciledZone(zoneID: ZoneID, present: Set<String>)
        case didFetchChanges
        case willSendChanges
        case sentDatabaseChanges(savedZones: [ZoneID], deletedZones: [ZoneID])
        case sentRecordZoneChanges(ModifyRecordsResult)
        /// The server refused a save for good and the delegate did not resolve it while handling
        /// ``sentRecordZoneChanges(_:)``. The pending change stays, marked failed and counted in ``SyncStatus/failedCount``,
        /// until the app changes the record again or calls ``SyncEngine/discardFailedChanges(_:)``.
        case failedToSaveRecord(recordID: RecordID, error: CloudError)
        /// The same for a deletion.
        case failedToDeleteRecord(recordID: RecordID, error: CloudError)
        case didSendChanges
    }

    public nonisolated let configuration: Configuration
    /// Whether the account was checked since the engine started (or since the server last refused the user's token).
    private var accountChecked = false
    public private(set) var status = SyncStatus(phase: .idle, pendingCount: 0)
    private let statusContinuation: AsyncStream<SyncStatus>.Continuation
    /// The digest each zone's last complete fetch ended with, and its token: what ``verify(_:)`` compares.
    private var fetchedDigests: [ZoneID: (syncToken: String, digest: ZoneDigest)] = [:]
    /// The last verification, while the server has not been told of it.
    private var unreportedVerification: [ZoneVerification]?
    /// Status changes, for a UI.
    public nonisolated let statusUpdates: AsyncStream<SyncStatus>

    public init(_ configuration: Configuration) {
        self.configuration = configuration
        (statusUpdates, statusContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(16))
    }

    deinit { statusContinuation.finish() }

    private var database: CloudDatabase { configuration.database }
    private var store: any SyncStateStore { configuration.stateStore }
    private var delegate: any SyncEngineDelegate { configuration.delegate }

    private func setPhase(_ phase: SyncStatus.Phase) async {
        if let pending = try? await store.pendingRecordZoneChanges() {
            status.phase = phase
            status.pendingCount = pending.count
            status.failedCount = pending.count { $0.failure != nil }
        } else {
            status.phase = phase
        }
        statusContinuation.yield(status)
    }

    /// Gives up on refused changes of these records: their pending entries go, and the app keeps whatever it shows.
    public func discardFailedChanges(_ recordIDs: Set<RecordID>) async throws {
        let failed = try await store.pendingRecordZoneChanges().filter { entry in
            entry.failure != nil && recordIDs.contains { Scope.sameRecord($0, entry.change.recordID) }
        }
        try await store.removeRecordZoneChanges(failed)
        await setPhase(status.phase)
    }

    /// Adds pending changes outside an app transaction (a GRDB app enqueues in its own transaction instead).
    public func add(pendingRecordZoneChanges changes: [PendingRecordZoneChange]) async throws {
        try await store.add(changes)
        await setPhase(status.phase)
    }

    public func add(pendingDatabaseChanges changes: [PendingDatabaseChange]) async throws {
        try await store.add(changes)
    }

    /// Which zones or records a fetch or send covers, as CKSyncEngine's `FetchChangesOptions.Scope` and
    /// `SendChangesOptions.Scope`.
    public enum Scope: Sendable, Hashable {
        case all
        case zoneIDs(Set<ZoneID>)
        case allExcluding(Set<ZoneID>)
        /// Sending only: these records.
        case recordIDs(Set<RecordID>)

        func contains(_ zoneID: ZoneID) -> Bool {
            switch self {
            case .all, .recordIDs: true
            case .zoneIDs(let zones): zones.contains { $0.isSameZone(as: zoneID) }
            case .allExcluding(let zones): !zones.contains { $0.isSameZone(as: zoneID) }
            }
        }

        func contains(_ change: PendingRecordZoneChange) -> Bool {
            if case .recordIDs(let ids) = self {
                return ids.contains { Self.sameRecord($0, change.recordID) }
            }
            return contains(change.recordID.zoneID)
        }

        static func sameRecord(_ a: RecordID, _ b: RecordID) -> Bool {
            a.recordName == b.recordName && a.zoneID.isSameZone(as: b.zoneID)
        }
    }

    // MARK: - Syncing by itself

    /// Keeps the local store in step by itself, as CKSyncEngine does when it syncs automatically: it fetches when the
    /// server's courier says something changed (a burst of notifications makes one fetch), sends pending changes
    /// shortly after they appear (`sendDelay`), and fetches every `fallbackInterval` whatever the courier says, so a
    /// courier that is down or a missed notification delays changes, never loses them. Runs until the task running it
    /// is cancelled: start it beside the app's other work (`Task { try await engine.run() }`, or a task group);
    /// ``fetchChanges(_:)`` and ``sendChanges(_:)`` keep working alongside. Failed fetches and sends show in
    /// ``status`` and are retried at the next occasion.
    ///
    /// The courier is kept for as long as `run()` runs: its setup (the engine's subscription, then a push token) and a
    /// dropped connection are retried as any transient failure is (``Configuration/retryPolicy``'s backoff, the
    /// server's `retryAfter`), never given up, and each time it becomes live, at first and after every loss, the
    /// engine fetches once, so nothing that changed while it was away, nor between the first fetch and the token,
    /// waits for the fallback. ``SyncStatus/isPushLive`` tells whether it is live.
    public func run(sendDelay: Duration = .milliseconds(500), fallbackInterval: Duration = .seconds(60)) async {
        let (fetches, fetch) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        fetch.yield(())
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.listenToTheCourier(fetch: fetch) }
            group.addTask {
                while (try? await Task.sleep(for: fallbackInterval)) != nil { fetch.yield(()) }
            }
            group.addTask {
                while (try? await Task.sleep(for: sendDelay)) != nil {
                    if (try? await self.hasChangesToSend()) == true { try? await self.sendChanges() }
                }
            }
            // Fetches one at a time: notifications arriving during a fetch make one more fetch, not one each.
            for await _ in fetches {
                if Task.isCancelled { break }
                try? await fetchChanges()
            }
            group.cancelAll()
        }
    }

    /// The courier of ``run(sendDelay:fallbackInterval:)``: the engine's database subscription (as CKSyncEngine keeps
    /// one, so any change in the database is told), a push token, and long polls, each step retried until the task is
    /// cancelled. A fetch is asked for whenever a notification comes and whenever the courier becomes live: a token
    /// starts from the server's current positions, so what happened before it (since the first fetch began, or while
    /// the courier was away) is fetched then, once.
    private func listenToTheCourier(fetch: AsyncStream<Void>.Continuation) async {
        let database = self.database
        let subscription = Subscription(subscriptionID: "CumulusSyncEngine.\(database.scope.rawValue)", kind: .database)
        let policy = configuration.retryPolicy
        // Transient or not (a refused user token may be renewed by the app), the courier is tried again: at the
        // backoff's pace, which a server's `retryAfter` sets when it gives one.
        let events = database.container.courierEvents(
            setUp: { try await database.modifySubscriptions(saving: [subscription]) }, sleep: configuration.sleep
        ) { failures, error in
            policy.backoff(afterFailure: failures, retryAfter: (error as? CloudError)?.retryAfter)
        }
        do {
            for try await event in events {
                switch event {
                case .live:
                    setPushLive(true)
                    fetch.yield(())
                case .notification:
                    status.lastNotificationAt = Date()
                    fetch.yield(())
                case .lost:
                    setPushLive(false)
                }
            }
        } catch {}
        setPushLive(false)
    }

    private func setPushLive(_ live: Bool) {
        guard status.isPushLive != live else { return }
        status.isPushLive = live
        statusContinuation.yield(status)
    }

    /// Whether changes wait to be sent that the server has not refused for good.
    private func hasChangesToSend() async throws -> Bool {
        if try await store.pendingRecordZoneChanges().contains(where: { $0.failure == nil }) { return true }
        return try await !store.pendingDatabaseChanges().isEmpty
    }

    // MARK: - The account

    /// Compares the signed-in user with the one the state belongs to, and reports a change (at the first fetch or send
    /// of an engine, and again after the server refused the user's token). On a sign-out or a switch, tokens and
    /// pending changes of the previous user are forgotten first: they must never reach another account.
    public func checkAccount() async throws {
        let container = database.container
        let current = try await withRetries { try await container.userRecordName() }
        let previous = try await store.accountUserRecordName()
        defer { accountChecked = current != nil }
        guard current != previous else { return }
        let change: AccountChange
        switch (previous, current) {
        case (nil, let current?): change = .signIn(currentUser: current)
        case (let previous?, nil): change = .signOut(previousUser: previous)
        case (let previous?, let current?): change = .switchAccounts(previousUser: previous, currentUser: current)
        case (nil, nil): return
        }
        if previous != nil {
            try await store.reset()
            // The previous user's files go with their rows.
            removeDownloadedAssets(of: nil)
        }
        try await store.setAccountUserRecordName(current)
        try await delegate.handleEvent(.accountChange(change), syncEngine: self)
        await setPhase(status.phase)
    }

    /// Checks the account once per engine, and again after an authentication failure.
    private func checkAccountIfNeeded() async throws {
        guard !accountChecked else { return }
        try await checkAccount()
        if !accountChecked { throw CloudError(code: .server(.authenticationRequired), reason: "no one is signed in") }
    }

    private func noteFailure(_ error: any Error) {
        if let error = error as? CloudError, error.code == .server(.authenticationFailed) || error.code == .server(.authenticationRequired) {
            accountChecked = false
        }
    }

    // MARK: - Fetching

    /// Fetches everything that changed since the last fetch (in the zones of `scope`) and hands it to the delegate.
    public func fetchChanges(_ scope: Scope = .all) async throws {
        try await running(.fetching) {
            try await checkAccountIfNeeded()
            try await delegate.handleEvent(.willFetchChanges, syncEngine: self)
            var zones = Set<ZoneID>()
            var token = try await store.databaseToken()
            var more = true
            while more {
                let since = token
                let changes: DatabaseChanges
                do {
                    changes = try await withRetries { try await self.database.databaseChanges(since: since) }
                } catch let error as CloudError where error.code == .changeTokenExpired && since != nil {
                    // The server no longer accepts the token (restored from a backup, its token secret replaced): every
                    // zone is fetched again from its own position, and a refused zone position starts over too.
                    token = nil
                    continue
                }
                if !changes.changed.isEmpty || !changes.deleted.isEmpty {
                    try await delegate.handleEvent(.fetchedDatabaseChanges(modified: changes.changed, deleted: changes.deleted), syncEngine: self)
                }
                for zoneID in changes.deleted {
                    removeDownloadedAssets(of: zoneID)
                    zones.remove(zoneID)
                    try await store.setZoneToken(nil, for: zoneID)
                }
                zones.formUnion(changes.changed)
                token = changes.syncToken
                more = changes.moreComing
            }
            for zoneID in zones.sorted(by: { $0.description < $1.description }) where scope.contains(zoneID) {
                try await fetchZone(zoneID)
            }
            // A scoped fetch leaves the database position alone, so the other zones are fetched next time.
            if scope == .all { try await store.setDatabaseToken(token) }
            try await delegate.handleEvent(.didFetchChanges, syncEngine: self)
            status.lastFetchedAt = Date()
        }
        await reportVerificationIfUnreported()
    }

    /// The digest a zone's last complete fetch ended with, and its token.
    func fetchedDigest(of zoneID: ZoneID) -> (String, ZoneDigest)? {
        fetchedDigests[zoneID].map { ($0.syncToken, $0.digest) }
    }

    func forgetFetchedDigests() {
        fetchedDigests = [:]
    }

    /// Notes a verification, and tells the server what it found (``CloudDatabase/reportVerification(_:)``) so the
    /// operator sees it; a report the server cannot take now goes with the next fetch, and never fails the verification.
    func noteVerified(_ reports: [ZoneVerification]) async {
        noteVerified(inSync: reports.allSatisfy(\.isInSync))
        unreportedVerification = reports
        await reportVerificationIfUnreported()
    }

    /// Sends the last verification if the server has not had it. A device without an ID (`CloudContainer.deviceID`)
    /// reports nothing: the server keeps verifications per device.
    func reportVerificationIfUnreported() async {
        guard let reports = unreportedVerification else { return }
        guard database.container.deviceID != nil else {
            unreportedVerification = nil
            return
        }
        do {
            _ = try await withRetries { try await self.database.reportVerification(reports) }
            if unreportedVerification == reports { unreportedVerification = nil }
            status.lastVerificationReported = true
        } catch let error as CloudError where !error.isTransient {
            // Refused for good (a server without the extension): kept from asking again.
            unreportedVerification = nil
            status.lastVerificationReported = false
        } catch {
            status.lastVerificationReported = false
        }
        statusContinuation.yield(status)
    }

    func noteVerified(inSync: Bool) {
        status.lastVerifiedAt = Date()
        status.lastVerifiedInSync = inSync
        statusContinuation.yield(status)
    }

    /// Fetches one zone from its token (which ends with the zone's digest), or (`startOver`) from the start,
    /// reporting at the end the records the server no longer has.
    func fetchOneZone(_ zoneID: ZoneID, startOver: Bool) async throws {
        try await running(.fetching) {
            try await checkAccountIfNeeded()
            try await fetchZone(zoneID, startOver: startOver)
            status.lastFetchedAt = Date()
        }
    }

    /// Runs a fetch or a send: the status shows `phase` while it runs, then idle, or the error it threw (which also
    /// has the account checked again after an authentication failure).
    private func running(_ phase: SyncStatus.Phase, _ body: () async throws -> Void) async throws {
        await setPhase(phase)
        do {
            try await body()
            await setPhase(.idle)
        } catch {
            noteFailure(error)
            await setPhase(.error("\(error)"))
            throw error
        }
    }

    /// Pages are pipelined: the next page is requested as soon as a page arrives, while the delegate applies that
    /// one, so the server's and the network's work overlaps the device's. A token is saved only after its page is
    /// applied, so a crash at any point resumes from the last applied page.
    private func fetchZone(_ zoneID: ZoneID, startOver: Bool = false) async throws {
        let database = self.database
        func request(_ since: String?) -> Task<ZoneChanges, any Error> {
            Task { try await self.withRetries { try await database.zoneChanges(zoneID, since: since) } }
        }
        let token = startOver ? nil : try await store.zoneToken(for: zoneID)
        // Starting over reports, at the end, the records the server no longer has.
        var reconciling = startOver
        var present = Set<String>()
        var next: Task<ZoneChanges, any Error>? = request(token)
        defer { next?.cancel() }
        var requestedWithToken = token != nil
        while let pending = next {
            let changes: ZoneChanges
            do {
                changes = try await pending.value
            } catch let error as CloudError where error.code == .changeTokenExpired && requestedWithToken {
                // The token is unusable (the zone was recreated): start over and reconcile.
                reconciling = true
                present = []
                try await store.setZoneToken(nil, for: zoneID)
                requestedWithToken = false
                next = request(nil)
                continue
            } catch let error as CloudError where error.code == .server(.zoneNotFound) {
                next = nil
                try await delegate.handleEvent(.fetchedDatabaseChanges(modified: [], deleted: [zoneID]), syncEngine: self)
                try await store.setZoneToken(nil, for: zoneID)
                removeDownloadedAssets(of: zoneID)
                return
            }
            next = changes.moreComing ? request(changes.syncToken) : nil
            requestedWithToken = true
            if reconciling { present.formUnion(changes.records.map(\.recordID.recordName)) }
            var records = changes.records
            if case .onFetch(let directory) = configuration.assetDownloads {
                records = try await downloadAssets(of: records, into: Self.assetFolder(of: zoneID, in: directory))
            }
            try await delegate.handleEvent(
                .fetchedRecordZoneChanges(zoneID: zoneID, modified: records, deleted: changes.deletions.map(\.recordID)), syncEngine: self
            )
            try await store.setZoneToken(changes.syncToken, for: zoneID)
            if !changes.moreComing, let digest = changes.digest { fetchedDigests[zoneID] = (changes.syncToken, digest) }
        }
        if reconciling {
            try await delegate.handleEvent(.reconciledZone(zoneID: zoneID, present: present), syncEngine: self)
        }
    }

    // MARK: - Sending

    /// Sends pending changes (those in `scope`), batch after batch, until none is left (or only failures the app must
    /// resolve).
    /// Downloads the assets of fetched records into a directory, retrying as every request is, and notes where.
    private func downloadAssets(of records: [CloudRecord], into directory: URL) async throws -> [CloudRecord] {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var records = records
        for index in records.indices {
            for (field, value) in records[index].fields {
                guard case .asset(let asset) = value, asset.downloadURL != nil else { continue }
                // Named by content: the same bytes fetched again are already here.
                let name = (asset.fileChecksum ?? asset.receipt ?? UUID().uuidString)
                    .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "=", with: "")
                let file = directory.appendingPathComponent(name)
                if !FileManager.default.fileExists(atPath: file.path) {
                    let database = configuration.database
                    try await withRetries { try await database.downloadAsset(asset, to: file) }
                }
                records[index].downloadedAssets[field] = file
            }
        }
        return records
    }

    /// The folder of a zone's downloaded assets: its name and owner, each spelled with only letters, digits, `-`, `_`
    /// and `.` (others percent-encoded), so no two zones share one.
    static func assetFolder(of zoneID: ZoneID, in directory: URL) -> URL {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-_.")
        func spelled(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text }
        return directory.appendingPathComponent("\(spelled(zoneID.zoneName))~\(spelled(zoneID.ownerRecordName ?? ""))", isDirectory: true)
    }

    /// Deletes the assets downloaded for a zone whose access ended, or for every zone (`nil`). A file that cannot be
    /// deleted now is left; nothing points to it any more.
    private func removeDownloadedAssets(of zoneID: ZoneID?) {
        guard case .onFetch(let directory) = configuration.assetDownloads else { return }
        if let zoneID {
            try? FileManager.default.removeItem(at: Self.assetFolder(of: zoneID, in: directory))
        } else {
            try? FileManager.default.removeItem(at: directory)
        }
    }

    public func sendChanges(_ scope: Scope = .all) async throws {
        try await running(.sending) {
            try await checkAccountIfNeeded()
            try await delegate.handleEvent(.willSendChanges, syncEngine: self)
            try await sendDatabaseChanges()
            var attemptsWithoutProgress = 0
            while attemptsWithoutProgress < 2 {
                // Refused changes wait for the app; everything else is sent.
                let pending = try await store.pendingRecordZoneChanges().filter { $0.failure == nil && scope.contains($0.change) }
                guard !pending.isEmpty else { break }
                guard let batch = try await delegate.nextRecordZoneChangeBatch(pending.map(\.change), syncEngine: self) else { break }
                let progressed = try await send(batch, pending: pending)
                attemptsWithoutProgress = progressed ? 0 : attemptsWithoutProgress + 1
            }
            try await delegate.handleEvent(.didSendChanges, syncEngine: self)
            status.lastSentAt = Date()
        }
    }

    private func sendDatabaseChanges() async throws {
        let pending = try await store.pendingDatabaseChanges()
        guard !pending.isEmpty else { return }
        var saves: [ZoneID] = []
        var deletes: [ZoneID] = []
        for entry in pending {
            switch entry.change {
            case .saveZone(let zoneID): saves.append(zoneID)
            case .deleteZone(let zoneID): deletes.append(zoneID)
            }
        }
        let (zonesToSave, zonesToDelete) = (saves, deletes)
        if !zonesToSave.isEmpty { try await withRetries { try await self.database.save(zones: zonesToSave) } }
        if !zonesToDelete.isEmpty { try await withRetries { try await self.database.delete(zones: zonesToDelete) } }
        try await store.removeDatabaseChanges(pending)
        try await delegate.handleEvent(.sentDatabaseChanges(savedZones: saves, deletedZones: deletes), syncEngine: self)
    }

    /// Sends one batch, zone by zone; returns whether any pending change was settled.
    private func send(_ batch: RecordZoneChangeBatch, pending: [PendingEntry<PendingRecordZoneChange>]) async throws -> Bool {
        var settled: [PendingEntry<PendingRecordZoneChange>] = []
        // Results name zones with their owner where pending changes may name the current user's zones without one.
        // Indexed by name first, so matching a large batch against many pending changes stays linear.
        let byName = Dictionary(grouping: pending) { $0.change.recordID.zoneID.zoneName + "\u{0}" + $0.change.recordID.recordName }
        let entries = { (id: RecordID) in
            byName[id.zoneID.zoneName + "\u{0}" + id.recordName]?.filter { Scope.sameRecord($0.change.recordID, id) }
                .max { $0.sequence < $1.sequence }
        }
        settled += batch.skipped.compactMap { entries($0) }
        var zones: [ZoneID] = []
        for zoneID in batch.recordsToSave.map(\.recordID.zoneID) + batch.recordIDsToDelete.map(\.zoneID) where !zones.contains(zoneID) {
            zones.append(zoneID)
        }
        for zoneID in zones {
            let saves = batch.recordsToSave.filter { $0.recordID.zoneID == zoneID }
            let deletes = batch.recordIDsToDelete.filter { $0.zoneID == zoneID }
            for request in configuration.planner.requests(saving: saves, deleting: deletes) {
                let answer = try await modify(saving: request.saves, deleting: request.deletes, zoneID: zoneID)
                let result = SendSettlement.settlingOwnEarlierWrites(answer)
                // Saved and deleted: settled. Refused for a reason retrying will not fix: marked failed, so it is
                // neither sent again nor dropped; the delegate resolves what it can (a conflict merged and enqueued
                // again replaces the entry), and what is left is reported.
                let done = (result.saved.map(\.recordID) + result.deleted).compactMap { entries($0) }
                var refused: [(entry: PendingEntry<PendingRecordZoneChange>, failure: SyncFailure)] = []
                var errors: [Int64: CloudError] = [:]
                for failure in result.failedSaves where !failure.error.isTransient {
                    guard let entry = entries(failure.record.recordID) else { continue }
                    refused.append((entry, failure.error.syncFailure))
                    errors[entry.sequence] = failure.error
                }
                for (recordID, error) in result.failedDeletes where !error.isTransient {
                    guard let entry = entries(recordID) else { continue }
                    refused.append((entry, error.syncFailure))
                    errors[entry.sequence] = error
                }
                settled += done + refused.map(\.entry)
                try await store.removeRecordZoneChanges(done)
                try await store.markFailed(refused)
                try await delegate.handleEvent(.sentRecordZoneChanges(result), syncEngine: self)
                try await reportUnresolved(errors)
            }
        }
        if !batch.skipped.isEmpty { try await store.removeRecordZoneChanges(batch.skipped.compactMap { entries($0) }) }
        return !settled.isEmpty
    }

    /// Reports the refused changes the delegate left as they were (same sequence, still failed).
    private func reportUnresolved(_ errors: [Int64: CloudError]) async throws {
        guard !errors.isEmpty else { return }
        for entry in try await store.pendingRecordZoneChanges() where entry.failure != nil {
            guard let error = errors[entry.sequence] else { continue }
            switch entry.change {
            case .saveRecord(let id): try await delegate.handleEvent(.failedToSaveRecord(recordID: id, error: error), syncEngine: self)
            case .deleteRecord(let id): try await delegate.handleEvent(.failedToDeleteRecord(recordID: id, error: error), syncEngine: self)
            }
        }
    }

    /// One `records/modify`, retried on transient failures. A request the server refuses as a whole never blocks the
    /// queue: a refusal that concerns the zone (`ZONE_NOT_FOUND`, `ACCESS_DENIED`) becomes every record's own failure;
    /// any other (too large, a bad value) splits the request in half until the records at fault are alone, and then
    /// becomes their own failure, so the rest is saved and only they wait for the app.
    private func modify(saving: [CloudRecord], deleting: [RecordID], zoneID: ZoneID) async throws -> ModifyRecordsResult {
        do {
            return try await withRetries { try await self.database.modifyRecords(saving: saving, deleting: deleting, zoneID: zoneID) }
        } catch let error as CloudError where !error.isTransient && !error.concernsTheAccount {
            if saving.count + deleting.count > 1, !error.concernsTheZone {
                let half = (saving.count + deleting.count) / 2
                let firstSaves = Array(saving.prefix(half))
                let firstDeletes = Array(deleting.prefix(max(0, half - saving.count)))
                var first = try await modify(saving: firstSaves, deleting: firstDeletes, zoneID: zoneID)
                let second = try await modify(
                    saving: Array(saving.dropFirst(firstSaves.count)), deleting: Array(deleting.dropFirst(firstDeletes.count)), zoneID: zoneID
                )
                first.saved += second.saved
                first.deleted += second.deleted
                first.failedSaves += second.failedSaves
                first.failedDeletes.merge(second.failedDeletes) { $1 }
                return first
            }
            var result = ModifyRecordsResult()
            result.failedSaves = saving.map { .init(record: $0, error: error) }
            for recordID in deleting { result.failedDeletes[recordID] = error }
            return result
        }
    }

    /// Retries transient failures (throttling, unavailable, network) with backoff honouring `retryAfter`.
    nonisolated func withRetries<T: Sendable>(_ operation: @Sendable () async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await operation()
            } catch let error as CloudError where error.isTransient {
                guard let delay = configuration.retryPolicy.delay(afterAttempt: attempt, retryAfter: error.retryAfter) else { throw error }
                try await configuration.sleep(delay)
                attempt += 1
            }
        }
    }
}
