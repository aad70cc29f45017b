public import CumulusModel
public import CumulusStore
import Foundation
public import Logging
import Synchronization

/// Limits of push delivery, per instance and per user.
public struct PushLimits: Sendable, Hashable {
    /// Courier polls and streams one instance holds open at once; beyond it a new one is answered `TRY_AGAIN_LATER`.
    public var maximumConnections: Int
    /// Of those, how many may be of tokens no user has registered yet (made with the API token alone, before signing
    /// in): they carry no notification, and anyone with the app's API token can make them, so they never take the
    /// places of signed-in users' devices.
    public var maximumAnonymousConnections: Int
    /// Push tokens one user may have in a container environment; binding one more forgets their least recently bound.
    /// A token holds one connection at a time, so this also bounds one user's connections.
    public var maximumTokensPerUser: Int

    public init(maximumConnections: Int = 10_000, maximumAnonymousConnections: Int? = nil, maximumTokensPerUser: Int = 100) {
        self.maximumConnections = maximumConnections
        self.maximumAnonymousConnections = maximumAnonymousConnections ?? max(1, maximumConnections / 10)
        self.maximumTokensPerUser = maximumTokensPerUser
    }
}

/// One notification for a push token: its APNs-shaped JSON and its place in the token's sequence of notifications (the
/// `id` of a stream event, which a reconnecting stream names in `Last-Event-ID`).
public struct PushNotification: Sendable, Hashable {
    public var id: Int64
    public var payload: [UInt8]
}

/// CloudKit's push delivery, served by Cumulus itself: push tokens (`tokens/create`, `tokens/register`) and the
/// connections (courier polls and streams) that carry notifications to a device.
///
/// Notifications are derived from the change feeds, not kept in memory: a token stores, for each of its user's
/// subscriptions and each zone, the feed position it was last notified at. A check compares them with the zones'
/// current positions; a subscription whose zone moved on fires (a query subscription only for a changed record that
/// matches it, ``SubscriptionMatcher``). So nothing is lost between polls, bursts coalesce into one notification per
/// subscription and zone, and any instance can answer any poll. Checks run when a commit to a watched database wakes the
/// connection (``ChangeSignal``), and every `recheckInterval` (when set) in case a wake-up was missed.
public struct PushService: Sendable {
    let store: any SubscriptionStore & ShareStore & RecordZoneStore & ContainerStore
    let clock: WallClock
    public let signal: ChangeSignal
    public let limits: PushLimits
    /// How often an open connection checks the feeds although nothing woke it; `nil` when every commit wakes the
    /// connections it concerns (one instance on its own store).
    public var recheckInterval: Duration?
    let connections: PushConnectionRegistry
    /// Registrations of ended connections, for their tokens' next ones on this instance.
    let parked: ParkedRegistrations
    /// The server's secret, which signs push tokens.
    let secrets: TokenSecrets

    public init(
        store: any SubscriptionStore & ShareStore & RecordZoneStore & ContainerStore, signal: ChangeSignal = ChangeSignal(),
        clock: WallClock = .system, limits: PushLimits = .init(),
        recheckInterval: Duration? = nil, secrets: TokenSecrets? = nil
    ) {
        self.store = store
        self.signal = signal
        self.clock = clock
        self.limits = limits
        self.recheckInterval = recheckInterval
        self.connections = PushConnectionRegistry(maximum: limits.maximumConnections, maximumAnonymous: limits.maximumAnonymousConnections)
        self.parked = ParkedRegistrations(signal: signal, maximum: limits.maximumConnections)
        self.secrets = secrets ?? TokenSecrets(store: store)
    }

    /// Reads the server's secret ahead of the first courier poll, so that no poll (a forged one included) waits on the
    /// store for it; a failure is left for the first poll to meet.
    public func prepare(logger: Logger) async {
        _ = try? await secrets.codec(logger: logger)
    }

    /// Whether a value has the shape of a token this service makes: 64 lowercase hexadecimal digits.
    public static func isWellFormed(_ token: String) -> Bool {
        token.utf8.count == 64 && token.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// `tokens/create`: a new token, bound to the caller's user when signed in, and notified of their changes from now
    /// on. A token made before signing in is stored only when `tokens/register` binds it, so anonymous callers cannot
    /// fill the store with tokens; it is signed (``SyncTokenCodec/newPushToken(container:environment:)``), so the
    /// courier knows it was issued here without storing it.
    public func createToken(caller: Caller, logger: Logger) async throws -> StoredPushToken {
        let codec = try await mapStoreErrors { try await secrets.codec(logger: logger) }
        let token = StoredPushToken(
            token: codec.newPushToken(container: caller.container, environment: caller.environment), container: caller.container,
            environment: caller.environment, userRecordName: nil, createdAt: clock.milliseconds())
        guard let user = caller.user else { return token }
        return try await bind(token, to: user.userRecordName, logger: logger)
    }

    /// `tokens/register`: binds a token to the signed-in caller; it is notified of their changes from now on.
    ///
    /// Only a token this server issued for the container environment, and bound to nobody or to the caller already, is
    /// registered. A token another user's device holds (its value is in that device's courier URL, which logs and
    /// proxies see) answers as one of another container does, and stays where it is.
    public func registerToken(_ value: String, caller: Caller, logger: Logger) async throws -> StoredPushToken {
        guard let user = caller.user else { throw CumulusError(.authenticationRequired, "registering a push token needs ckWebAuthToken") }
        let codec = try await mapStoreErrors { try await secrets.codec(logger: logger) }
        guard codec.isPushToken(value, container: caller.container, environment: caller.environment) else {
            throw CumulusError(.notFound, "apnsToken: no such token in this container")
        }
        let stored = try await mapStoreErrors { try await store.pushToken(value, logger: logger) }
        if let stored, stored.container != caller.container || stored.environment != caller.environment {
            throw CumulusError(.notFound, "apnsToken: no such token in this container")
        }
        if let owner = stored?.userRecordName, owner != user.userRecordName {
            throw CumulusError(.notFound, "apnsToken: no such token in this container")
        }
        if let stored, stored.userRecordName == user.userRecordName { return stored }
        let token = StoredPushToken(
            token: value, container: caller.container, environment: caller.environment, userRecordName: nil, createdAt: clock.milliseconds())
        return try await bind(token, to: user.userRecordName, logger: logger)
    }

    /// Stores a token bound to a user, starting from the feeds' current positions, and trims the user's oldest tokens.
    func bind(_ token: StoredPushToken, to user: String, logger: Logger) async throws -> StoredPushToken {
        var token = token
        token.userRecordName = user
        token.createdAt = clock.milliseconds()
        // Stored first, then read back with the feeds it watches (the read a check makes), then given their positions.
        try await mapStoreErrors { try await store.savePushToken(token, logger: logger) }
        if let feeds = try await mapStoreErrors({ try await store.pushTokenFeeds(token.token, logger: logger) }) {
            var state = DeliveryState()
            for (subscription, scope, zones) in Self.watched(feeds, user: user).subscriptions {
                for zone in zones { state.positions[Self.key(subscription, scope: scope, zone: zone.zoneID)] = zone.sequence }
            }
            token.positions = state.json
            try await mapStoreErrors { try await store.savePushToken(token, logger: logger) }
        }
        let trimmed = try await mapStoreErrors {
            try await store.trimPushTokens(
                of: user, container: token.container, environment: token.environment, keeping: limits.maximumTokensPerUser, logger: logger)
        }
        if trimmed > 0 { logger.debug("forgot a user's oldest push tokens", metadata: ["count": "\(trimmed)"]) }
        return token
    }

    /// Opens a connection for a token: a courier poll or a stream. A newer connection for the same token ends this
    /// instance's older one (``PushConnection/isSuperseded``), so a device that reconnects does not hold two.
    ///
    /// A token this server did not issue for the container environment is refused (`NOT_FOUND`) by its signature alone,
    /// before it holds anything. An issued token that is not stored (made before signing in and never registered)
    /// opens a connection that never carries a notification, as a poll on it would in CloudKit, in a pool of its own
    /// (``PushLimits/maximumAnonymousConnections``), so such tokens cannot take signed-in devices' places.
    ///
    /// When the token's previous connection on this instance ended with nothing left to tell (a long poll renewed after
    /// its answer), the new one takes over its registration and reads nothing: `onWake` is then called at its wake-ups
    /// (as ``PushConnection/register(logger:onWake:)`` would arrange), and a look is due only if a commit came between.
    public func connect(
        token: String, container: String, environment: ContainerEnvironment, onWake: (@Sendable () -> Void)? = nil, logger: Logger
    ) async throws -> PushConnection {
        let codec = try await mapStoreErrors { try await secrets.codec(logger: logger) }
        guard codec.isPushToken(token, container: container, environment: environment) else {
            throw CumulusError(.notFound, "token: no such push token")
        }
        if let parked = parked.take(token, container: container, environment: environment) { return try adopt(parked, onWake: onWake) }
        let stored = try await mapStoreErrors { try await store.pushToken(token, logger: logger) }
        let user = stored.flatMap { $0.container == container && $0.environment == environment ? $0.userRecordName : nil }
        let anonymous = stored?.userRecordName == nil
        guard let generation = connections.open(token, user: anonymous ? nil : stored?.userRecordName) else {
            let which = anonymous ? "push connections of tokens no user registered" : "push connections"
            throw CumulusError(.unavailable, "this server holds as many \(which) as it may; retry", retryAfter: 5)
        }
        wakeEnded(token, generation)
        if generation.givenUp != nil {
            // Seen by operators: the instance is full, and a crowd's connections are making room for newcomers.
            logger.notice("push: the instance is full; the biggest holder's newest connection ended to make room for a new user's")
        }
        return PushConnection(
            service: self, token: token, container: container, environment: environment, generation: generation.number, anonymous: anonymous,
            user: user)
    }

    /// The token's next connection on this instance, opened without waiting for anything, when its previous one
    /// parked its registration (a poll renewed after its answer): `nil` when there is none (or the token is not one
    /// this server issued, or the secret is not loaded yet), and the caller connects with
    /// ``connect(token:container:environment:onWake:logger:)``. Called on an event loop, it saves the renewed poll the
    /// hop to a task and back.
    public func reconnect(token: String, container: String, environment: ContainerEnvironment, onWake: (@Sendable () -> Void)?) throws
        -> PushConnection?
    {
        guard let codec = secrets.codecIfLoaded, codec.isPushToken(token, container: container, environment: environment),
            let parked = parked.take(token, container: container, environment: environment)
        else { return nil }
        return try adopt(parked, onWake: onWake)
    }

    private func adopt(_ parked: ParkedRegistrations.Parked, onWake: (@Sendable () -> Void)?) throws -> PushConnection {
        guard let generation = connections.open(parked.token, user: parked.user) else {
            signal.unregister(parked.registration)
            throw CumulusError(.unavailable, "this server holds as many push connections as it may; retry", retryAfter: 5)
        }
        wakeEnded(parked.token, generation)
        var connection = PushConnection(
            service: self, token: parked.token, container: parked.container, environment: parked.environment, generation: generation.number,
            anonymous: false, user: parked.user)
        connection.adopt(parked, onWake: onWake)
        return connection
    }

    /// Wakes the connections a new one ended, so they end now: the token's previous one, and the one given up to make
    /// room (``PushConnectionRegistry``).
    private func wakeEnded(_ token: String, _ generation: (number: UInt64, replaced: Bool, givenUp: String?)) {
        var keys: Set<String> = []
        if generation.replaced { keys.insert(ChangeSignal.key(token: token)) }
        if let givenUp = generation.givenUp { keys.insert(ChangeSignal.key(token: givenUp)) }
        if !keys.isEmpty { signal.wake(keys) }
    }

    /// The courier's long poll: the next notification for a token, waiting up to `timeout`; `nil` when none came.
    public func nextNotification(token: String, container: String, environment: ContainerEnvironment, timeout: Duration, logger: Logger)
        async throws -> PushNotification?
    {
        var connection = try await connect(token: token, container: container, environment: environment, logger: logger)
        defer { connection.close() }
        return try await connection.next(upTo: timeout, logger: logger)
    }

    // MARK: - Delivery state

    /// What a token has been told, as stored in its `positions`: the feed position each subscription and zone was last
    /// notified at, the id of the last notification, and a short log of the positions the last notifications moved,
    /// which lets a stream resume after the last notification a device received.
    struct DeliveryState: Equatable {
        struct Step: Equatable {
            var id: Int64
            var key: String
            var previous: Int64
        }

        /// How many notifications back a stream can resume.
        static let logLength = 64

        var positions: [String: Int64] = [:]
        var lastID: Int64 = 0
        var log: [Step] = []

        init() {}

        /// Reads the stored form with a pull reader: it is read at every look, and its log is most of it. A value of an
        /// unexpected kind is passed over, and a document that is not JSON reads as nothing told yet.
        init(json: [UInt8]) {
            func number(_ scanner: inout JSONScanner) throws -> Int64? {
                guard try scanner.peek() == .number else {
                    try scanner.skipValue()
                    return nil
                }
                return Int64(try scanner.readNumber())
            }
            var state = DeliveryState()
            do {
                try JSONScanner.scan(json) { scanner in
                    guard try scanner.peek() == .object else { return try scanner.skipValue() }
                    try scanner.beginObject()
                    while let member = try scanner.nextKey() {
                        switch (member, try scanner.peek()) {
                        case ("p", .object):
                            try scanner.beginObject()
                            while let key = try scanner.nextKey() {
                                if let value = try number(&scanner) { state.positions[key] = value }
                            }
                        case ("n", .number):
                            state.lastID = try number(&scanner) ?? 0
                        case ("log", .array):
                            try scanner.beginArray()
                            while try scanner.nextElement() {
                                guard try scanner.peek() == .array else {
                                    try scanner.skipValue()
                                    continue
                                }
                                try scanner.beginArray()
                                var parts: (id: Int64?, key: String?, previous: Int64?) = (nil, nil, nil)
                                var count = 0
                                while try scanner.nextElement() {
                                    switch count {
                                    case 0: parts.id = try number(&scanner)
                                    case 1:
                                        if try scanner.peek() == .string { parts.key = try scanner.readString() } else { try scanner.skipValue() }
                                    case 2: parts.previous = try number(&scanner)
                                    default: try scanner.skipValue()
                                    }
                                    count += 1
                                }
                                if count == 3, let id = parts.id, let key = parts.key, let previous = parts.previous {
                                    state.log.append(Step(id: id, key: key, previous: previous))
                                }
                            }
                        default:
                            try scanner.skipValue()
                        }
                    }
                }
            } catch {
                state = DeliveryState()
            }
            self = state
        }

        var json: [UInt8] {
            var writer = JSONWriter()
            writer.beginObject()
            writer.key("p")
            writer.beginObject()
            for (key, value) in positions.sorted(by: { $0.key < $1.key }) {
                writer.key(key)
                writer.int(value)
            }
            writer.endObject()
            writer.key("n")
            writer.int(lastID)
            writer.key("log")
            writer.beginArray()
            for step in log {
                writer.beginArray()
                writer.int(step.id)
                writer.string(step.key)
                writer.int(step.previous)
                writer.endArray()
            }
            writer.endArray()
            writer.endObject()
            return writer.bytes
        }

        /// Records a notification that moved `key` on from `previous`; returns its id.
        mutating func notified(_ key: String, previous: Int64) -> Int64 {
            lastID += 1
            log.append(Step(id: lastID, key: key, previous: previous))
            if log.count > Self.logLength { log.removeFirst(log.count - Self.logLength) }
            return lastID
        }

        /// Moves back to just after notification `id`, so the ones after it are told again. `false` when that is not
        /// possible (an id this token never gave, or older than the log reaches): the device must fetch everything.
        mutating func rewind(after id: Int64) -> Bool {
            if id == lastID { return true }
            guard id < lastID, id >= 0, let first = log.first, first.id <= id + 1 else { return false }
            while let step = log.last, step.id > id {
                positions[step.key] = step.previous
                log.removeLast()
            }
            lastID = id
            return true
        }
    }

    // MARK: - Checking the feeds

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

    /// The ``ChangeSignal`` keys of a user's own databases: the private one and the container's public one.
    static func ownKeys(user: String, container: String, environment: ContainerEnvironment) -> Set<String> {
        [
            ChangeSignal.key(DatabaseRef(container: container, environment: environment, scope: .private, ownerRecordName: user)),
            ChangeSignal.key(DatabaseRef.publicDatabase(container: container, environment: environment)),
        ]
    }

    /// The user's subscriptions with the zones each watches, and the ``ChangeSignal`` keys of the databases whose
    /// commits may concern them.
    static func watched(_ feeds: PushTokenFeeds, user: String) -> (subscriptions: [(Subscription, DatabaseScope, [WatchedZone])], keys: Set<String>) {
        let token = feeds.token
        let privateDatabase = DatabaseRef(container: token.container, environment: token.environment, scope: .private, ownerRecordName: user)
        let publicDatabase = DatabaseRef.publicDatabase(container: token.container, environment: token.environment)
        var keys = Self.ownKeys(user: user, container: token.container, environment: token.environment)
        var result: [(Subscription, DatabaseScope, [WatchedZone])] = []
        for scope in [DatabaseScope.private, .shared, .public] {
            let decoded = (feeds.subscriptions[scope] ?? []).compactMap(\.subscription)
            guard !decoded.isEmpty else { continue }
            var zones: [WatchedZone] = []
            switch scope {
            case .private, .public:
                let database = scope == .public ? publicDatabase : privateDatabase
                for zone in scope == .public ? feeds.publicZones : feeds.privateZones {
                    zones.append(
                        WatchedZone(database: database, scope: scope, zoneID: ZoneID(zoneName: zone.zoneID.zoneName), sequence: zone.changeSequence))
                }
            case .shared:
                for zone in feeds.sharedZones {
                    let database = DatabaseRef(
                        container: token.container, environment: token.environment, scope: .private,
                        ownerRecordName: zone.zoneID.ownerRecordName ?? "")
                    keys.insert(ChangeSignal.key(database))
                    zones.append(WatchedZone(database: database, scope: scope, zoneID: zone.zoneID, sequence: zone.changeSequence))
                }
            }
            for subscription in decoded {
                let covered = zones.filter { zone in
                    switch subscription.kind {
                    case .database: return true
                    case .zone: return subscription.zoneID.map { $0.isSameZone(as: zone.zoneID) } ?? false
                    case .query:
                        if subscription.zoneWide { return true }
                        return subscription.zoneID.map { $0.isSameZone(as: zone.zoneID) } ?? false
                    }
                }
                result.append((subscription, scope, covered))
            }
        }
        return (result, keys)
    }

    /// What a check of the feeds found: the first notification due, and the keys to wait on for the next one.
    struct Check {
        var notification: PushNotification?
        var keys: Set<String>
        /// Whether another notification may be due already (a subscription or zone past the one notified has moved on):
        /// the connection then looks again at once instead of waiting for a wake-up.
        var moreDue = false
    }

    /// Checks a token's feeds: the first notification due, advancing its positions past it.
    ///
    /// The look's rule is ``look(_:user:answers:)``, a pass over the feeds that asks for any other read it needs. After
    /// a wake-up (a commit to a watched database), when the positions will most likely move, a look that needs no other
    /// read runs inside the store's ``SubscriptionStore/advancePushToken(_:logger:_:)``, which on SQLite reads the feeds
    /// and stores the positions in one write transaction: a delivery costs the store one hop instead of a read and a
    /// write. Any other look (a connection's first, a re-check, one that needs reads: shared zones, query
    /// subscriptions; one whose watch is larger than ``largestWatchInAWrite``) reads the feeds on their own, passes
    /// over them again with each answer it asks for until nothing is missing, and saves the positions only if they
    /// moved; so a flood of looks that find nothing never queues on SQLite's writer.
    func check(_ value: String, container: String, environment: ContainerEnvironment, afterWakeUp: Bool, logger: Logger) async throws
        -> Check
    {
        if afterWakeUp {
            let first = try await mapStoreErrors {
                try await store.advancePushToken(value, logger: logger) { feeds -> (positions: [UInt8]?, result: FirstLook) in
                    guard let feeds else { return (nil, .noToken) }
                    guard feeds.token.container == container, feeds.token.environment == environment else { return (nil, .otherContainer) }
                    guard let user = feeds.token.userRecordName else { return (nil, .looked(nil, feeds.token)) }
                    // A pass's work and its positions grow with subscriptions times zones: a large watch is passed over
                    // off the writer, which every user's commits wait for.
                    let subscriptions = feeds.subscriptions.values.reduce(0) { $0 + $1.count }
                    guard subscriptions * (feeds.privateZones.count + feeds.publicZones.count + feeds.sharedZones.count) <= Self.largestWatchInAWrite
                    else { return (nil, .readSeparately) }
                    do {
                        let look = try Self.look(feeds, user: user, answers: [])
                        return (look.moved ? look.state.json : nil, .looked(look, feeds.token))
                    } catch is MissingRead {
                        return (nil, .readSeparately)
                    }
                }
            }
            switch first {
            case .noToken:
                return Check(notification: nil, keys: [])
            case .otherContainer:
                throw CumulusError(.notFound, "token: no such push token")
            case .looked(let look, let token):
                guard let look else { return Check(notification: nil, keys: []) }
                return try await finish(look, token: token, logger: logger)
            case .readSeparately:
                break
            }
        }
        guard let feeds = try await mapStoreErrors({ try await store.pushTokenFeeds(value, logger: logger) }) else {
            return Check(notification: nil, keys: [])
        }
        let token = feeds.token
        guard token.container == container, token.environment == environment else { throw CumulusError(.notFound, "token: no such push token") }
        guard let user = token.userRecordName else { return Check(notification: nil, keys: []) }
        var answers: [LookAnswer] = []
        while true {
            do {
                let look = try Self.look(feeds, user: user, answers: answers)
                if look.moved { try await save(look.state, of: token, logger: logger) }
                return try await finish(look, token: token, logger: logger)
            } catch let missing as MissingRead {
                answers.append(try await answer(missing.read, logger: logger))
            }
        }
    }

    /// What the first try at a look found in the store's transaction.
    enum FirstLook: Sendable {
        case noToken
        case otherContainer
        /// The look, or `nil` for a token bound to no user; its positions are stored.
        case looked(Look?, StoredPushToken)
        /// The look needs other reads, or its watch is too large to pass over in a write: nothing was stored.
        case readSeparately
    }

    /// The most subscriptions times zones a look passes over inside SQLite's write transaction (ten subscriptions over a
    /// hundred zones); a token that watches more is looked at off the writer.
    static let largestWatchInAWrite = 1_024

    /// A read a look needs beyond its token's feeds.
    enum LookRead: Sendable {
        /// The shares of a zone that list the user.
        case shares(user: String, zoneName: String, database: DatabaseRef)
        /// A page of a zone's changes.
        case changes(ZoneChangeRequest)
    }

    /// The answer to a ``LookRead``.
    enum LookAnswer: Sendable {
        case shares([ShareState])
        case changes(ZoneChangePage)
    }

    /// Thrown by a look that needs the answer to `read` to go on.
    struct MissingRead: Error {
        var read: LookRead
    }

    func answer(_ read: LookRead, logger: Logger) async throws -> LookAnswer {
        switch read {
        case .shares(let user, let zoneName, let database):
            .shares(try await mapStoreErrors { try await store.shares(listing: user, zoneName: zoneName, in: database, logger: logger) })
        case .changes(let request):
            .changes(try await mapStoreErrors { try await store.zoneChanges(request, logger: logger) })
        }
    }

    /// What a look found: the token's state moved past it, and the notification due, if any.
    struct Look: Sendable {
        struct Found: Sendable {
            var subscription: Subscription
            var scope: DatabaseScope
            var zone: ZoneID
            /// The change a query subscription fired for.
            var record: RecordChangeEvent?
            var id: Int64
        }

        var state: DeliveryState
        /// Whether the state moved: most looks after a wake-up do, and have it stored.
        var moved: Bool
        var found: Found?
        var keys: Set<String>
        var moreDue: Bool
    }

    /// The look's rule: which notification is due first, and where each subscription and zone then stands. It reads
    /// nothing itself: the `answers` are those to the reads it asked for so far, in the order it asked, and a read not
    /// answered yet is thrown as ``MissingRead`` (the same feeds and answers always ask the same reads in the same order).
    static func look(_ feeds: PushTokenFeeds, user: String, answers: [LookAnswer]) throws(MissingRead) -> Look {
        var asked = 0
        func read(_ read: LookRead) throws(MissingRead) -> LookAnswer {
            guard asked < answers.count else { throw MissingRead(read: read) }
            defer { asked += 1 }
            return answers[asked]
        }
        let token = feeds.token
        var state = DeliveryState(json: token.positions)
        let initial = state
        var found: Look.Found?
        var moreDue = false
        let (subscriptions, keys) = Self.watched(feeds, user: user)
        search: for (subscription, scope, zones) in subscriptions {
            for zone in zones {
                let key = Self.key(subscription, scope: scope, zone: zone.zoneID)
                // A subscription or zone seen for the first time starts from now.
                guard let seen = state.positions[key] else {
                    state.positions[key] = zone.sequence
                    continue
                }
                // A zone deleted and created again starts its sequence over.
                let from = zone.sequence < seen ? 0 : seen
                guard zone.sequence > from else { continue }
                // One notification a look: past it, only whether the next look has one to find (it reads what it needs).
                if found != nil {
                    moreDue = true
                    break search
                }
                // In the shared database a participant is told only of changes to records their shares cover.
                var access: ParticipantAccess?
                if scope == .shared {
                    guard case .shares(let shares) = try read(.shares(user: user, zoneName: zone.zoneID.zoneName, database: zone.database)),
                        let granted = AuthorizationPolicy().participantAccess(user: user, shares: shares)
                    else { continue }
                    access = granted
                }
                var record: RecordChangeEvent?
                switch subscription.kind {
                case .zone, .database:
                    state.positions[key] = zone.sequence
                    if let access {
                        let request = ZoneChangeRequest(
                            database: zone.database, zoneName: zone.zoneID.zoneName, incarnation: nil, after: from, limit: 1, access: access)
                        guard case .changes(let visible) = try read(.changes(request)), !visible.changes.isEmpty else { continue }
                    }
                case .query:
                    guard let query = subscription.query else { continue }
                    var after = from
                    var reached = zone.sequence
                    var fired = false
                    while !fired {
                        let request = ZoneChangeRequest(
                            database: zone.database, zoneName: zone.zoneID.zoneName, incarnation: nil, after: after, limit: 200,
                            recordTypes: [query.recordType], access: access)
                        guard case .changes(let page) = try read(.changes(request)) else { break }
                        for change in page.changes {
                            let event = Self.event(change, zone: zone.zoneID)
                            if SubscriptionMatcher.fires(subscription, for: event, in: zone.zoneID) {
                                record = event
                                fired = true
                                break
                            }
                        }
                        // One notification covers the page it was found in: the client fetches every change anyway.
                        reached = page.moreComing ? page.sequence : zone.sequence
                        after = reached
                        if !page.moreComing { break }
                    }
                    state.positions[key] = reached
                    if reached < zone.sequence { moreDue = true }
                    guard fired else { continue }
                }
                found = Look.Found(
                    subscription: subscription, scope: scope, zone: zone.zoneID, record: record, id: state.notified(key, previous: seen))
            }
        }
        return Look(state: state, moved: state != initial, found: found, keys: keys, moreDue: moreDue)
    }

    /// The notification a look found, made (and its subscription deleted when it fires once) after its positions are
    /// stored.
    func finish(_ look: Look, token: StoredPushToken, logger: Logger) async throws -> Check {
        guard let found = look.found, let user = token.userRecordName else { return Check(notification: nil, keys: look.keys, moreDue: look.moreDue) }
        let payload = Self.notification(found.subscription, scope: found.scope, zone: found.zone, user: user, token: token, record: found.record)
        if found.subscription.firesOnce {
            let owner = SubscriptionOwner(container: token.container, environment: token.environment, scope: found.scope, userRecordName: user)
            try await mapStoreErrors {
                try await store.modifySubscriptions(of: owner, saving: [], deleting: [found.subscription.subscriptionID], logger: logger)
            }
        }
        return Check(notification: PushNotification(id: found.id, payload: payload), keys: look.keys, moreDue: look.moreDue)
    }

    /// Moves a token's delivery back to just after notification `id` (a stream's `Last-Event-ID`).
    func rewind(_ value: String, after id: Int64, logger: Logger) async throws -> PushConnection.Resumption {
        guard let token = try await mapStoreErrors({ try await store.pushToken(value, logger: logger) }) else { return .reset(lastID: 0) }
        var state = DeliveryState(json: token.positions)
        let before = state
        guard state.rewind(after: id) else { return .reset(lastID: state.lastID) }
        if state != before { try await save(state, of: token, logger: logger) }
        return .resumed
    }

    /// Stores a token's delivery state. Callers store only a state that moved: most looks that find nothing new write
    /// nothing.
    func save(_ state: DeliveryState, of token: StoredPushToken, logger: Logger) async throws {
        var updated = token
        updated.positions = state.json
        try await mapStoreErrors { try await store.savePushToken(updated, logger: logger) }
    }

    /// Ends a connection from outside (the server is shutting down): its wait returns, and it carries nothing more.
    public func end(_ connection: PushConnection) {
        connections.end(connection.token, generation: connection.generation)
        signal.wake([ChangeSignal.key(token: connection.token)])
    }

    /// A feed change as the subscription matcher sees it.
    static func event(_ change: ZoneRecordChange, zone: ZoneID) -> RecordChangeEvent {
        switch change {
        case .changed(let record):
            let header = record.header
            let created = header.created.timestamp == header.modified.timestamp && header.created.deviceID == header.modified.deviceID
            return RecordChangeEvent(header: header, event: created ? .create : .update, fields: (try? record.fields()) ?? [:])
        case .deleted(let name, let type):
            let stamp = RecordStamp(timestamp: 0, userRecordName: "", deviceID: "")
            return RecordChangeEvent(
                header: RecordHeader(
                    recordName: name, recordType: type, recordChangeTag: "", created: stamp, modified: stamp, parent: nil, share: nil,
                    zoneID: zone, shortGUID: nil), event: .delete, fields: [:])
        }
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
        _ subscription: Subscription, scope: DatabaseScope, zone: ZoneID, user: String, token: StoredPushToken, record: RecordChangeEvent?
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
        writer.string(UUID.random().uuidString)
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
