import CumulusModel
public import Logging
import Synchronization

/// One open courier poll or stream for a push token, on this instance. Get one from ``PushService/connect(token:container:environment:)``
/// and ``close()`` it when the poll or stream ends.
public struct PushConnection: Sendable {
    let service: PushService
    /// The push token the connection serves.
    public let token: String
    let container: String
    let environment: ContainerEnvironment
    let generation: UInt64
    /// Whether its token was bound to no user when it opened: it holds one of the anonymous places.
    let anonymous: Bool
    /// The user its token was bound to when it opened, whose own databases it watches from the start.
    let user: String?
    /// The connection's standing interest in the databases its user's subscriptions watch (and in its token, so a newer
    /// connection can end it), kept for as long as the connection is open so that no wake-up falls between two waits.
    private var registration: ChangeSignal.Registration?
    private var keys: Set<String> = []
    /// When the feeds were last checked; `nil` when a check is due.
    private var checkedAt: ContinuousClock.Instant?

    init(
        service: PushService, token: String, container: String, environment: ContainerEnvironment, generation: UInt64, anonymous: Bool, user: String?
    ) {
        self.service = service
        self.token = token
        self.container = container
        self.environment = environment
        self.generation = generation
        self.anonymous = anonymous
        self.user = user
    }

    /// Whether a newer connection for the same token took over; this one then carries nothing more.
    public var isSuperseded: Bool { !service.connections.isCurrent(token, generation: generation) }

    /// Whether the connection watches its user's databases yet (``register(logger:onWake:)``).
    public var isRegistered: Bool { registration != nil }

    /// Starts watching the user's own databases, before the first look reads them, so that a commit during it is not
    /// missed. `onWake`, when given, is called at each wake-up (on the waking thread): a connection served without a
    /// task of its own (the server's courier channel handler) looks again from there.
    public mutating func register(logger: Logger, onWake: (@Sendable () -> Void)? = nil) async throws {
        guard registration == nil else { return }
        keys = user.map { PushService.ownKeys(user: $0, container: container, environment: environment) } ?? []
        registration = service.signal.register(keys.union([ChangeSignal.key(token: token)]), onWake: onWake)
    }

    /// Whether a look at the feeds is due: never looked, woken since the last look began, or the re-check interval
    /// (if any) passed.
    public func isDue(at now: ContinuousClock.Instant = .now) -> Bool {
        guard let checkedAt else { return true }
        if let registration, service.signal.isWoken(registration) { return true }
        return service.recheckInterval.map { now - checkedAt >= $0 } ?? false
    }

    /// When a look falls due although nothing wakes the connection (the re-check interval over a shared store); `nil`
    /// when only a wake-up makes one due.
    public var nextRecheck: ContinuousClock.Instant? {
        guard let checkedAt else { return .now }
        return service.recheckInterval.map { checkedAt + $0 }
    }

    /// Looks at the feeds once: the first notification due, advancing the token's positions past it, or `nil`. Call
    /// ``register(logger:onWake:)`` first; when more than one notification was due, another look is due at once.
    public mutating func look(logger: Logger) async throws -> PushNotification? {
        guard let registration else {
            try await register(logger: logger)
            return try await look(logger: logger)
        }
        let signal = service.signal
        let now = ContinuousClock.now
        // Wake-ups from here on concern changes this check may not see: they make the connection due again.
        let woken = signal.consume(registration)
        let check = try await service.check(token, container: container, environment: environment, afterWakeUp: woken, logger: logger)
        checkedAt = now
        if check.keys != keys {
            let added = !check.keys.isSubset(of: keys)
            keys = check.keys
            signal.update(registration, keys: keys.union([ChangeSignal.key(token: token)]))
            // A commit to a newly watched database between the check and the update woke nobody: look again.
            if added && check.notification == nil { checkedAt = nil }
        }
        if check.moreDue { checkedAt = nil }
        return check.notification
    }

    /// The next notification, waiting up to `timeout` for one; `nil` when none came, or when the connection was
    /// superseded or the task cancelled.
    ///
    /// The feeds are checked at the start, when a commit to a watched database wakes the connection, and every
    /// ``PushService/recheckInterval`` if set; a connection whose wait only timed out does not read the store.
    public mutating func next(upTo timeout: Duration, logger: Logger) async throws -> PushNotification? {
        try await register(logger: logger)
        let deadline = ContinuousClock.now + timeout
        while !isSuperseded, !Task.isCancelled {
            if isDue() {
                if let notification = try await look(logger: logger) { return notification }
                continue
            }
            let wakeAt = min(deadline, nextRecheck ?? deadline)
            if wakeAt <= ContinuousClock.now {
                if deadline <= ContinuousClock.now { return nil }
                continue
            }
            if let registration { await service.signal.wait(registration, until: wakeAt) }
        }
        return nil
    }

    /// Where a resumed stream starts.
    public enum Resumption: Sendable, Hashable {
        /// The notifications after the one named are sent again.
        case resumed
        /// The ones missed are no longer known: the device should fetch all changes. Delivery goes on after `lastID`.
        case reset(lastID: Int64)
    }

    /// Moves delivery back to just after notification `id` (a stream's `Last-Event-ID`), so the notifications after it
    /// are sent again.
    public func resume(after id: Int64, logger: Logger) async throws -> Resumption {
        try await service.rewind(token, after: id, logger: logger)
    }

    /// Ends the connection, freeing its place. A connection that has looked at everything that changed hands its
    /// registration to the token's next connection on this instance (``ParkedRegistrations``), which then starts
    /// without a look unless a commit came in between.
    public func close() {
        if let registration {
            if let user, let checkedAt, !isSuperseded, !isDue() {
                service.parked.park(
                    ParkedRegistrations.Parked(
                        token: token, container: container, environment: environment, user: user, registration: registration, keys: keys,
                        checkedAt: checkedAt))
            } else {
                service.signal.unregister(registration)
            }
        }
        service.connections.close(token, generation: generation, anonymous: anonymous)
    }

    /// Takes over a registration a previous connection of the token parked.
    mutating func adopt(_ parked: ParkedRegistrations.Parked, onWake: (@Sendable () -> Void)?) {
        registration = parked.registration
        keys = parked.keys
        checkedAt = parked.checkedAt
        service.signal.setWaker(parked.registration, onWake)
    }
}

/// Registrations of push connections that ended with nothing left to tell, kept a short while for their token's next
/// connection on this instance: a long poll renewed at once after its answer, a stream that reconnects. The next
/// connection takes the registration over, with the wake-ups it remembered, and so needs no look at the feeds unless a
/// commit came in between; a delivered notification then costs one look instead of two. Entries older than
/// ``lifetime`` are dropped, and at most ``maximum`` are kept (the oldest go first).
final class ParkedRegistrations: Sendable {
    struct Parked: Sendable {
        var token: String
        var container: String
        var environment: ContainerEnvironment
        var user: String
        var registration: ChangeSignal.Registration
        var keys: Set<String>
        var checkedAt: ContinuousClock.Instant
        var parkedAt = ContinuousClock.now
    }

    private struct State {
        var byToken: [String: Parked] = [:]
        /// Tokens in the order they were parked, with the registration parked then (a token parked again leaves its
        /// older entry here, skipped when its turn comes).
        var order: [(token: String, registration: ChangeSignal.Registration)] = []
        var head = 0

        /// Removes the oldest entries while there are more than `maximum` or they were parked before `cutoff`; returns
        /// the registrations to drop.
        mutating func dropOldest(parkedBefore cutoff: ContinuousClock.Instant, beyond maximum: Int = .max) -> [ChangeSignal.Registration] {
            var dropped: [ChangeSignal.Registration] = []
            while head < order.count {
                let (token, registration) = order[head]
                if let parked = byToken[token], parked.registration == registration {
                    guard byToken.count > maximum || parked.parkedAt < cutoff else { break }
                    byToken[token] = nil
                    dropped.append(registration)
                }
                head += 1
            }
            if head > 1_024, head * 2 > order.count {
                order.removeFirst(head)
                head = 0
            }
            return dropped
        }
    }

    private let state = Mutex(State())
    private let signal: ChangeSignal
    let lifetime: Duration
    let maximum: Int

    init(signal: ChangeSignal, lifetime: Duration = .seconds(30), maximum: Int) {
        self.signal = signal
        self.lifetime = lifetime
        self.maximum = max(1, maximum)
    }

    func park(_ parked: Parked) {
        signal.setWaker(parked.registration, nil)
        let (lifetime, maximum) = (lifetime, maximum)
        let dropped = state.withLock { state -> [ChangeSignal.Registration] in
            var dropped: [ChangeSignal.Registration] = []
            if let older = state.byToken.updateValue(parked, forKey: parked.token) { dropped.append(older.registration) }
            state.order.append((parked.token, parked.registration))
            dropped += state.dropOldest(parkedBefore: ContinuousClock.now - lifetime, beyond: maximum)
            return dropped
        }
        for registration in dropped { signal.unregister(registration) }
    }

    /// The registration parked for `token` by a connection of the same container environment, taken out; `nil` when
    /// there is none (or it is too old).
    func take(_ token: String, container: String, environment: ContainerEnvironment) -> Parked? {
        let lifetime = lifetime
        let (found, dropped) = state.withLock { state -> (Parked?, [ChangeSignal.Registration]) in
            var dropped = state.dropOldest(parkedBefore: ContinuousClock.now - lifetime)
            guard let parked = state.byToken.removeValue(forKey: token) else { return (nil, dropped) }
            guard parked.container == container, parked.environment == environment else {
                dropped.append(parked.registration)
                return (nil, dropped)
            }
            return (parked, dropped)
        }
        for registration in dropped { signal.unregister(registration) }
        return found
    }
}

/// The connections open on this instance: how many, how many of them of anonymous tokens, which is the current one of
/// each token, and how many each user holds.
///
/// Places are shared fairly. While places are free, any connection gets one (an anonymous token's within the anonymous
/// pool). When none is, a signed-in user's new connection takes the place of the newest connection of the biggest holder,
/// provided that holder holds at least two more than the newcomer: the connections of tokens no user registered count
/// as one holder, so they go first. No crowd of accounts can then keep a user who holds none out, unless every holder
/// holds just one (as many users as places), and two near-equal holders never take turns ending each other's.
final class PushConnectionRegistry: Sendable {
    /// One connection counted against its holder: a user, or `nil` for the tokens no user registered.
    private struct Holding {
        var token: String
        var holder: String?
    }

    private struct State {
        var next: UInt64 = 0
        /// Places taken, by connections still open, whether current or ending.
        var open = 0
        var anonymous = 0
        var current: [String: UInt64] = [:]
        /// The connections counted against their holders, by generation: open and neither superseded nor given up.
        var held: [UInt64: Holding] = [:]
        /// Each holder's counted connections, oldest first.
        var byHolder: [String?: [UInt64]] = [:]
        /// Holders by how many they hold, and the largest such count: the biggest holder is found without a scan.
        var holdersByCount: [Int: Set<String?>] = [:]
        var largest = 0
        /// Connections given up to a newcomer that have not closed yet: their places are already the newcomer's.
        var givenUp: Set<UInt64> = []

        mutating func count(_ holder: String?, by change: Int) {
            let before = byHolder[holder]?.count ?? 0
            let after = before + change
            if before > 0 {
                holdersByCount[before]?.remove(holder)
                if holdersByCount[before]?.isEmpty == true { holdersByCount[before] = nil }
            }
            if after > 0 { holdersByCount[after, default: []].insert(holder) }
            if after > largest { largest = after }
            while largest > 0, holdersByCount[largest] == nil { largest -= 1 }
        }

        mutating func hold(_ generation: UInt64, _ holding: Holding) {
            count(holding.holder, by: 1)
            held[generation] = holding
            byHolder[holding.holder, default: []].append(generation)
        }

        /// Stops counting a connection against its holder (it closed, was superseded, or was given up).
        mutating func release(_ generation: UInt64) {
            guard let holding = held.removeValue(forKey: generation) else { return }
            count(holding.holder, by: -1)
            byHolder[holding.holder]?.removeAll { $0 == generation }
            if byHolder[holding.holder]?.isEmpty == true { byHolder[holding.holder] = nil }
        }

        /// The newest connection of the biggest holder, when it holds at least two more than `holder`; released and
        /// no longer current.
        mutating func giveUpForNewcomer(_ holder: String) -> String? {
            let holds = byHolder[holder]?.count ?? 0
            guard largest >= holds + 2 else { return nil }
            // Of the biggest holders, the anonymous tokens first, then any.
            let biggest = holdersByCount[largest] ?? []
            let victim: String?
            if biggest.contains(nil) {
                victim = nil
            } else if let first = biggest.first {
                victim = first
            } else {
                return nil
            }
            guard let generation = byHolder[victim]?.last, let token = held[generation]?.token else { return nil }
            release(generation)
            givenUp.insert(generation)
            if current[token] == generation { current[token] = nil }
            return token
        }
    }

    private let state = Mutex(State())
    let maximum: Int
    let maximumAnonymous: Int

    init(maximum: Int, maximumAnonymous: Int) {
        self.maximum = maximum
        self.maximumAnonymous = maximumAnonymous
    }

    /// A place for a new connection of `token`, held by `user` (`nil` for a token no user registered), which becomes
    /// the token's current one; `nil` when the instance is full and no holder holds enough to give one up, or the
    /// places for anonymous tokens are full, for one. `givenUp` names the token whose connection ended to make room:
    /// wake it, so it ends now.
    func open(_ token: String, user: String?) -> (number: UInt64, replaced: Bool, givenUp: String?)? {
        state.withLock { state in
            let anonymous = user == nil
            if anonymous, state.anonymous >= maximumAnonymous { return nil }
            var givenUp: String?
            if state.open - state.givenUp.count >= maximum {
                guard let user, let token = state.giveUpForNewcomer(user) else { return nil }
                givenUp = token
            }
            state.open += 1
            if anonymous { state.anonymous += 1 }
            state.next += 1
            let previous = state.current.updateValue(state.next, forKey: token)
            // The token's older connection ends (superseded): it no longer counts against its holder.
            if let previous { state.release(previous) }
            state.hold(state.next, Holding(token: token, holder: user))
            return (state.next, previous != nil, givenUp)
        }
    }

    func isCurrent(_ token: String, generation: UInt64) -> Bool {
        state.withLock { $0.current[token] == generation }
    }

    /// Makes a connection no longer current, leaving its place taken until it closes.
    func end(_ token: String, generation: UInt64) {
        state.withLock { state in
            if state.current[token] == generation {
                state.current[token] = nil
                state.release(generation)
            }
        }
    }

    func close(_ token: String, generation: UInt64, anonymous: Bool) {
        state.withLock { state in
            state.open -= 1
            if anonymous { state.anonymous -= 1 }
            state.givenUp.remove(generation)
            state.release(generation)
            if state.current[token] == generation { state.current[token] = nil }
        }
    }

    /// How many connections each holder has counted against it (`nil`: the anonymous tokens'), for tests.
    var holdings: [String?: Int] {
        state.withLock { $0.byHolder.mapValues(\.count) }
    }
}
