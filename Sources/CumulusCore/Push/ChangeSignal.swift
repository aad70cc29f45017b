import CumulusModel
public import CumulusStore
import Dispatch
import Synchronization

/// Wakes the push connections a commit concerns. A commit names the databases it changed; a waiting connection names
/// the databases its user's subscriptions watch, and only those wake. Over a store several instances share, commits
/// are also announced to the other instances, whose listener calls ``wake(_:)`` (or ``wakeAll()`` when it may have
/// missed some). A wake-up is only a hint: a woken connection reads the change feeds, so a missed one delays a
/// notification and loses nothing.
public final class ChangeSignal: Sendable {
    /// A connection's standing interest in some keys. A wake-up under one of them is remembered until
    /// ``ChangeSignal/consume(_:)``, so one that comes while the connection is busy (checking the feeds, writing an event)
    /// is not lost: the next ``ChangeSignal/wait(_:until:)`` returns at once.
    public struct Registration: Sendable, Hashable {
        let id: UInt64
    }

    private struct Waiter {
        var keys: Set<String>
        var woken = false
        var cancelled = false
        /// Which wait the continuation belongs to, so that a late timer of an earlier wait leaves a later one be.
        var round: UInt64 = 0
        var continuation: CheckedContinuation<Void, Never>?
        /// Called on every wake-up, for connections that wait without a task (``register(_:onWake:)``).
        var onWake: (@Sendable () -> Void)?
    }

    /// What a wake-up must resume or call, gathered under the lock and run outside it.
    private struct Wakeups {
        var continuations: [CheckedContinuation<Void, Never>] = []
        var callbacks: [@Sendable () -> Void] = []

        func run() {
            for continuation in continuations { continuation.resume() }
            for callback in callbacks { callback() }
        }
    }

    private struct State {
        var next: UInt64 = 0
        var waiters: [UInt64: Waiter] = [:]
        var waitersByKey: [String: Set<UInt64>] = [:]

        mutating func index(_ id: UInt64, _ keys: Set<String>) {
            for key in keys { waitersByKey[key, default: []].insert(id) }
        }

        mutating func unindex(_ id: UInt64, _ keys: Set<String>) {
            for key in keys {
                waitersByKey[key]?.remove(id)
                if waitersByKey[key]?.isEmpty == true { waitersByKey[key] = nil }
            }
        }

        /// Marks a waiter woken, gathering its continuation if it is waiting and its callback if it has one.
        mutating func wake(_ id: UInt64, into wakeups: inout Wakeups) {
            guard let waiter = waiters[id] else { return }
            waiters[id]?.woken = true
            if let continuation = waiter.continuation {
                wakeups.continuations.append(continuation)
                waiters[id]?.continuation = nil
            }
            if let onWake = waiter.onWake { wakeups.callbacks.append(onWake) }
        }
    }

    private let state = Mutex(State())
    /// Tells other instances (a store shared by several), after waking this one's waiters.
    private let announce: (@Sendable (Set<String>) -> Void)?

    public init(announce: (@Sendable (Set<String>) -> Void)? = nil) {
        self.announce = announce
    }

    /// The key a database's changes are signalled under.
    public static func key(_ database: DatabaseRef) -> String { database.changeKey }

    /// The keys some connection of this instance waits under (for a store that watches databases for changes instead
    /// of hearing announcements; it keeps those that name a database, ``DatabaseRef/init(changeKey:)``).
    public var watchedKeys: Set<String> {
        state.withLock { Set($0.waitersByKey.keys) }
    }

    /// The key a push token's connection waits under, so that a newer connection for the token can end it.
    public static func key(token: String) -> String { "token|\(token)" }

    /// Something was committed here: this instance's waiters on those keys re-check, and other instances are told.
    public func changed(_ keys: Set<String>) {
        wake(keys)
        announce?(keys)
    }

    /// Something changed under these keys, here or on another instance: their waiters re-check.
    public func wake(_ keys: Set<String>) {
        let wakeups = state.withLock { state in
            var ids = Set<UInt64>()
            for key in keys { ids.formUnion(state.waitersByKey[key] ?? []) }
            var wakeups = Wakeups()
            for id in ids { state.wake(id, into: &wakeups) }
            return wakeups
        }
        wakeups.run()
    }

    /// Anything may have changed (a listener reconnected and may have missed announcements): every waiter re-checks.
    public func wakeAll() {
        let wakeups = state.withLock { state in
            var wakeups = Wakeups()
            for id in state.waiters.keys { state.wake(id, into: &wakeups) }
            return wakeups
        }
        wakeups.run()
    }

    /// Registered waiters (for tests and benchmarks).
    public var waiting: Int { state.withLock { $0.waiters.count } }

    /// Registered waiters with nothing to do until a wake-up: waiting in ``wait(_:until:)``, or (waiting without a task)
    /// not woken since they last looked. A connection counted here has looked at what changed, so a commit from now on
    /// reaches it only through a wake-up.
    public var idle: Int {
        state.withLock { state in
            state.waiters.values.count { $0.continuation != nil || ($0.onWake != nil && !$0.woken) }
        }
    }

    /// Starts remembering wake-ups under `keys`; `onWake`, when given, is called (on the waking thread) at each one, for
    /// a connection that waits without a task of its own.
    public func register(_ keys: Set<String>, onWake: (@Sendable () -> Void)? = nil) -> Registration {
        state.withLock { state in
            state.next += 1
            state.waiters[state.next] = Waiter(keys: keys, onWake: onWake)
            state.index(state.next, keys)
            return Registration(id: state.next)
        }
    }

    /// Changes the keys a registration watches.
    public func update(_ registration: Registration, keys: Set<String>) {
        state.withLock { state in
            guard let old = state.waiters[registration.id]?.keys else { return }
            state.unindex(registration.id, old.subtracting(keys))
            state.index(registration.id, keys.subtracting(old))
            state.waiters[registration.id]?.keys = keys
        }
    }

    /// Sets what a registration's wake-ups call (`nil`: nothing), as when it passes from one connection to the next.
    public func setWaker(_ registration: Registration, _ onWake: (@Sendable () -> Void)?) {
        state.withLock { $0.waiters[registration.id]?.onWake = onWake }
    }

    /// Whether a wake-up came since the last ``consume(_:)``.
    public func isWoken(_ registration: Registration) -> Bool {
        state.withLock { $0.waiters[registration.id]?.woken ?? false }
    }

    /// Forgets the wake-ups remembered so far: call it just before looking at what changed. Returns whether there was
    /// one.
    @discardableResult
    public func consume(_ registration: Registration) -> Bool {
        state.withLock { state in
            defer { state.waiters[registration.id]?.woken = false }
            return state.waiters[registration.id]?.woken ?? false
        }
    }

    /// Stops watching.
    public func unregister(_ registration: Registration) {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiters.removeValue(forKey: registration.id) else { return nil }
            state.unindex(registration.id, waiter.keys)
            return waiter.continuation
        }
        continuation?.resume()
    }

    /// Returns `true` as soon as a wake-up under the registration's keys is remembered (at once if one already is),
    /// `false` when `deadline` comes first.
    ///
    /// The deadline is a Dispatch timer, not a sleeping child task: thousands of idle streams each wait here, and a
    /// timer costs far less memory than a task group of two tasks.
    @discardableResult
    public func wait(_ registration: Registration, until deadline: ContinuousClock.Instant) async -> Bool {
        let id = registration.id
        let round = state.withLock { state -> UInt64 in
            state.waiters[id]?.cancelled = false
            state.waiters[id]?.round += 1
            return state.waiters[id]?.round ?? 0
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    guard let waiter = state.waiters[id], !waiter.woken, !waiter.cancelled else { return true }
                    state.waiters[id]?.continuation = continuation
                    return false
                }
                if now {
                    continuation.resume()
                    return
                }
                let delay = ContinuousClock.now.duration(to: deadline)
                let nanoseconds = max(0, delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000)
                DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(min(nanoseconds, Int64(Int.max))))) { [self] in
                    self.resume(id, round: round)
                }
            }
        } onCancel: {
            state.withLock { $0.waiters[id]?.cancelled = true }
            resume(id, round: round)
        }
        return state.withLock { $0.waiters[id]?.woken ?? false }
    }

    /// Resumes a waiter if it is waiting (its deadline came, or its task was cancelled).
    private func resume(_ id: UInt64, round: UInt64) {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.waiters[id]?.round == round else { return nil }
            defer { state.waiters[id]?.continuation = nil }
            return state.waiters[id]?.continuation
        }
        continuation?.resume()
    }

    /// Waits once, outside any registration: returns `true` when something changes under `keys` before `deadline`.
    @discardableResult
    public func wait(for keys: Set<String>, until deadline: ContinuousClock.Instant) async -> Bool {
        let registration = register(keys)
        defer { unregister(registration) }
        return await wait(registration, until: deadline)
    }
}
