public import CumulusModel
public import CumulusStore
import Foundation
public import Logging
import Synchronization

/// Wakes waiting long polls when this instance commits a change. Changes committed by other instances are found by the
/// waiters' periodic re-check, so a missed wake-up delays a notification by at most that interval and loses nothing.
public final class ChangeSignal: Sendable {
    private struct State {
        var next: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var cancelled: Set<UInt64> = []
    }

    private let state = Mutex(State())
    /// Tells other instances (a store shared by several), after waking this one's waiters.
    private let announce: (@Sendable () -> Void)?

    public init(announce: (@Sendable () -> Void)? = nil) {
        self.announce = announce
    }

    /// Something was committed here: this instance's waiters re-check, and other instances are told.
    public func changed() {
        wake()
        announce?()
    }

    /// Something changed, here or on another instance: every waiter re-checks.
    public func wake() {
        let waiters = state.withLock { state in
            defer { state.waiters = [:] }
            return state.waiters
        }
        for waiter in waiters.values { waiter.resume() }
    }

    /// Returns when something changes, or after `timeout`.
    public func wait(upTo timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: timeout) }
            group.addTask { await self.waitForChange() }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForChange() async {
        let id = state.withLock { state in
            state.next += 1
            return state.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let cancelled = state.withLock { state in
                    if state.cancelled.remove(id) != nil { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if cancelled { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if let waiter = state.waiters.removeValue(forKey: id) { return waiter }
                state.cancelled.insert(id)
                return nil
            }
            waiter?.resume()
        }
    }
}

/// CloudKit's push delivery, served by Cumulus itself: push tokens (`tokens/create`, `tokens/register`) and the
/// courier a client long-polls for notifications.
///
/// Notifications are derived from the change feeds, not kept in memory: a token stores, for each of its user's
/// subscriptions and each zone, the feed position it was last notified at. A poll compares them with the zones'
/// current positions; a subscription whose zone moved on fires (a query subscription only for a changed record that
/// matches it, ``SubscriptionMatcher``). So nothing is lost between polls, bursts coalesce into one notification per
/// subscription and zone, and any instance can answer any poll.
public struct PushService: Sendable {
    let store: any RecordStore
    let clock: WallClock
    public let signal: ChangeSignal
    /// How often a waiting poll re-checks the feeds for changes other instances committed.
    public var recheckInterval: Duration

    public init(store: any RecordStore, signal: ChangeSignal = ChangeSignal(), clock: WallClock = .system, recheckInterval: Duration = .seconds(1)) {
        self.store = store
        self.signal = signal
        self.clock = clock
        self.recheckInterval = recheckInterval
    }

    /// `tokens/create`: a new token, bound to the caller's user when signed in. It is notified of changes from now on.
    public func createToken(caller: Caller, logger: Logger) async throws -> PushTokenRecord {
        var bytes = [UInt8](repeating: 0, count: 32)
        var generator = SystemRandomNumberGenerator()
        for index in bytes.indices { bytes[index] = generator.next() }
        var token = PushTokenRecord(
            token: bytes.map { String(format: "%02x", $0) }.joined(), container: caller.container, environment: caller.environment,
            userRecordName: caller.user?.userRecordName, createdAt: clock.milliseconds())
        if let user = token.userRecordName {
            token.positions = try await Positions(current: try await currentPositions(user: user, token: token, logger: logger)).json
        }
        try await mapStoreErrors { try await store.savePushToken(token, logger: logger) }
        return token
    }

    /// `tokens/register`: binds a token to the signed-in caller; it is notified of their changes from now on.
    public func registerToken(_ value: String, caller: Caller, logger: Logger) async throws -> PushTokenRecord {
        guard let user = caller.user else { throw CumulusError(.authenticationRequired, "registering a push token needs ckWebAuthToken") }
        guard var token = try await mapStoreErrors({ try await store.pushToken(value, logger: logger) }), token.container == caller.container,
            token.environment == caller.environment
        else {
            throw CumulusError(.notFound, "apnsToken: no such token in this container")
        }
        if token.userRecordName != user.userRecordName {
            token.userRecordName = user.userRecordName
            token.positions = try await Positions(current: try await currentPositions(user: user.userRecordName, token: token, logger: logger)).json
            try await mapStoreErrors { try await store.savePushToken(token, logger: logger) }
        }
        return token
    }

    /// The courier: the next notification for a token, as CloudKit's APNs-shaped JSON, waiting up to `timeout` for one;
    /// `nil` when none came.
    public func nextNotification(token value: String, container: String, environment: ContainerEnvironment, timeout: Duration, logger: Logger)
        async throws -> [UInt8]?
    {
        let deadline = ContinuousClock.now + timeout
        while true {
            guard let token = try await mapStoreErrors({ try await store.pushToken(value, logger: logger) }), token.container == container,
                token.environment == environment
            else {
                throw CumulusError(.notFound, "no such push token")
            }
            if let notification = try await pending(token, logger: logger) { return notification }
            let left = deadline - ContinuousClock.now
            if left <= .zero { return nil }
            await signal.wait(upTo: min(left, recheckInterval))
            try Task.checkCancellation()
        }
    }

    // MARK: - Positions

    /// Feed positions by key: subscription, database and zone.
    struct Positions {
        var values: [String: Int64]

        init(current: [String: Int64]) { values = current }

        init(json: [UInt8]) {
            values = [:]
            if case .object(let members)? = try? JSONValue(parsing: json) {
                for (key, value) in members { if case .number(let text) = value, let number = Int64(text) { values[key] = number } }
            }
        }

        var json: [UInt8] {
            var writer = JSONWriter()
            writer.beginObject()
            for (key, value) in values.sorted(by: { $0.key < $1.key }) {
                writer.key(key)
                writer.int(value)
            }
            writer.endObject()
            return writer.bytes
        }
    }

    /// A zone a subscription watches, with its current position.
    struct WatchedZone {
        var database: DatabaseRef
        var scope: DatabaseScope
        var zoneID: ZoneID
        var sequence: Int64
    }

    static func key(_ subscription: Subscription, scope: DatabaseScope, zone: ZoneID) -> String {
        "\(scope.rawValue)|\(subscription.subscriptionID)|\(zone.ownerRecordName ?? "")|\(zone.zoneName)"
    }

    /// The user's subscriptions with the zones each watches.
    func watched(user: String, token: PushTokenRecord, logger: Logger) async throws -> [(Subscription, DatabaseScope, [WatchedZone])] {
        var result: [(Subscription, DatabaseScope, [WatchedZone])] = []
        for scope in [DatabaseScope.private, .shared, .public] {
            let owner = SubscriptionOwner(container: token.container, environment: token.environment, scope: scope, userRecordName: user)
            let subscriptions = try await mapStoreErrors { try await store.subscriptions(of: owner, ids: nil, logger: logger) }
            let decoded = subscriptions.compactMap(\.subscription)
            guard !decoded.isEmpty else { continue }
            var zones: [WatchedZone] = []
            switch scope {
            case .private, .public:
                let database =
                    scope == .public
                    ? DatabaseRef.publicDatabase(container: token.container, environment: token.environment)
                    : DatabaseRef(container: token.container, environment: token.environment, scope: .private, ownerRecordName: user)
                for zone in try await mapStoreErrors({ try await store.zones(in: database, logger: logger) }) {
                    zones.append(
                        WatchedZone(database: database, scope: scope, zoneID: ZoneID(zoneName: zone.zoneID.zoneName), sequence: zone.changeSequence))
                }
            case .shared:
                for zone in try await mapStoreErrors({
                    try await store.sharedZones(userRecordName: user, container: token.container, environment: token.environment, logger: logger)
                }) {
                    let database = DatabaseRef(
                        container: token.container, environment: token.environment, scope: .private,
                        ownerRecordName: zone.zoneID.ownerRecordName ?? "")
                    zones.append(WatchedZone(database: database, scope: scope, zoneID: zone.zoneID, sequence: zone.changeSequence))
                }
            }
            for subscription in decoded {
                let covered = zones.filter { zone in
                    switch subscription.kind {
                    case .database: return true
                    case .zone: return subscription.zoneID.map { SubscriptionMatcher.sameZone($0, zone.zoneID) } ?? false
                    case .query:
                        if subscription.zoneWide { return true }
                        return subscription.zoneID.map { SubscriptionMatcher.sameZone($0, zone.zoneID) } ?? false
                    }
                }
                result.append((subscription, scope, covered))
            }
        }
        return result
    }

    func currentPositions(user: String, token: PushTokenRecord, logger: Logger) async throws -> [String: Int64] {
        var positions: [String: Int64] = [:]
        for (subscription, scope, zones) in try await watched(user: user, token: token, logger: logger) {
            for zone in zones { positions[Self.key(subscription, scope: scope, zone: zone.zoneID)] = zone.sequence }
        }
        return positions
    }

    /// The first notification due for a token, advancing its positions past it; `nil` when nothing is due.
    func pending(_ token: PushTokenRecord, logger: Logger) async throws -> [UInt8]? {
        guard let user = token.userRecordName else { return nil }
        var positions = Positions(json: token.positions)
        let before = positions.values
        var notification: [UInt8]?
        search: for (subscription, scope, zones) in try await watched(user: user, token: token, logger: logger) {
            for zone in zones {
                let key = Self.key(subscription, scope: scope, zone: zone.zoneID)
                // A subscription or zone seen for the first time starts from now.
                guard let seen = positions.values[key] else {
                    positions.values[key] = zone.sequence
                    continue
                }
                // A zone deleted and created again starts its sequence over.
                let from = zone.sequence < seen ? 0 : seen
                guard zone.sequence > from else { continue }
                // In the shared database a participant is told only of changes to records their shares cover.
                var access: ParticipantAccess?
                if scope == .shared {
                    let shares = try await mapStoreErrors {
                        try await store.shares(listing: user, zoneName: zone.zoneID.zoneName, in: zone.database, logger: logger)
                    }
                    guard let granted = AuthorizationPolicy().participantAccess(user: user, shares: shares) else { continue }
                    access = granted
                }
                switch subscription.kind {
                case .zone, .database:
                    positions.values[key] = zone.sequence
                    if let access {
                        let visible = try await mapStoreErrors {
                            try await store.zoneChanges(
                                ZoneChangeRequest(
                                    database: zone.database, zoneName: zone.zoneID.zoneName, incarnation: nil, after: from, limit: 1, access: access),
                                logger: logger)
                        }
                        guard !visible.changes.isEmpty else { continue }
                    }
                    notification = Self.notification(subscription, scope: scope, zone: zone.zoneID, user: user, token: token, record: nil)
                case .query:
                    guard let query = subscription.query else { continue }
                    var after = from
                    var reached = zone.sequence
                    while notification == nil {
                        let page = try await mapStoreErrors {
                            try await store.zoneChanges(
                                ZoneChangeRequest(
                                    database: zone.database, zoneName: zone.zoneID.zoneName, incarnation: nil, after: after, limit: 200,
                                    recordTypes: [query.recordType], access: access), logger: logger)
                        }
                        for change in page.changes {
                            let event: RecordChangeEvent
                            switch change {
                            case .changed(let record):
                                let header = record.header
                                let created =
                                    header.created.timestamp == header.modified.timestamp && header.created.deviceID == header.modified.deviceID
                                event = RecordChangeEvent(header: header, event: created ? .create : .update, fields: (try? record.fields()) ?? [:])
                            case .deleted(let name, let type):
                                let stamp = RecordStamp(timestamp: 0, userRecordName: "", deviceID: "")
                                event = RecordChangeEvent(
                                    header: RecordHeader(
                                        recordName: name, recordType: type, recordChangeTag: "", created: stamp, modified: stamp, parent: nil,
                                        share: nil,
                                        zoneID: zone.zoneID, shortGUID: nil), event: .delete, fields: [:])
                            }
                            if SubscriptionMatcher.fires(subscription, for: event, in: zone.zoneID) {
                                notification = Self.notification(
                                    subscription, scope: scope, zone: zone.zoneID, user: user, token: token, record: event)
                                break
                            }
                        }
                        // One notification covers the page it was found in: the client fetches every change anyway.
                        reached = page.moreComing ? page.sequence : zone.sequence
                        after = reached
                        if !page.moreComing { break }
                    }
                    positions.values[key] = reached
                }
                if notification != nil {
                    if subscription.firesOnce {
                        let owner = SubscriptionOwner(container: token.container, environment: token.environment, scope: scope, userRecordName: user)
                        try await mapStoreErrors {
                            try await store.modifySubscriptions(of: owner, saving: [], deleting: [subscription.subscriptionID], logger: logger)
                        }
                    }
                    break search
                }
            }
        }
        if positions.values != before {
            var updated = token
            updated.positions = positions.json
            try await mapStoreErrors { try await store.savePushToken(updated, logger: logger) }
        }
        return notification
    }

    // MARK: - The notification

    /// CloudKit's database scope numbers in notifications: public 1, private 2, shared 3.
    static func scopeNumber(_ scope: DatabaseScope) -> Int {
        switch scope {
        case .public: 1
        case .private: 2
        case .shared: 3
        }
    }

    /// An APNs payload as CloudKit's courier sends it: `aps` from the subscription's `notificationInfo`, and `ck` with
    /// `met` (zone and database subscriptions) or `qry` (query subscriptions, `fo`: 1 created, 2 updated, 3 deleted).
    static func notification(
        _ subscription: Subscription, scope: DatabaseScope, zone: ZoneID, user: String, token: PushTokenRecord, record: RecordChangeEvent?
    ) -> [UInt8] {
        let info = subscription.notificationInfo
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("aps")
        writer.beginObject()
        if let body = info?["alertBody"]?.stringValue {
            writer.key("alert")
            writer.beginObject()
            writer.key("body")
            writer.string(body)
            writer.endObject()
        }
        if let sound = info?["soundName"]?.stringValue {
            writer.key("sound")
            writer.string(sound)
        }
        if info?["shouldBadge"] == .bool(true) {
            writer.key("badge")
            writer.int(1)
        }
        if info == nil || info?["shouldSendContentAvailable"] == .bool(true) || info?["alertBody"] == nil {
            writer.key("content-available")
            writer.int(1)
        }
        writer.endObject()
        writer.key("ck")
        writer.beginObject()
        writer.key("nid")
        writer.string(UUID().uuidString)
        writer.key("ce")
        writer.int(token.environment == .production ? 2 : 1)
        writer.key("cid")
        writer.string(token.container)
        writer.key("ckuserid")
        writer.string(user)
        writer.key(record == nil ? "met" : "qry")
        writer.beginObject()
        writer.key("dbs")
        writer.int(scopeNumber(scope))
        writer.key("sid")
        writer.string(subscription.subscriptionID)
        if let record {
            writer.key("rid")
            writer.string(record.header.recordName)
            writer.key("fo")
            writer.int(record.event == .create ? 1 : record.event == .update ? 2 : 3)
        }
        writer.key("zid")
        writer.string(zone.zoneName)
        writer.key("zoid")
        writer.string(zone.ownerRecordName ?? (scope == .shared ? "" : user))
        writer.endObject()
        writer.endObject()
        writer.endObject()
        return writer.bytes
    }
}
