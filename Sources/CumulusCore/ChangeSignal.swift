import CumulusModel
public import CumulusStore
import Synchronization

/// Wakes the push connections a commit concerns. A commit names the databases it changed; a waiting connection names
/// the databases its user's subscriptions watch, and only those wake. Over a store several instances share, commits
/// are also announced to the other instances, whose listener calls ``wake(_:)`` (or ``wakeAll()`` when it may have
/// missed some). A wake-up is only a hint: a woken connection reads the change feeds, so a missed one delays a
/// notification and loses nothing.
public final class ChangeSignal: Sendable {
    private struct State {
        var next: UInt64 = 0
        var continuations: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var keysByWaiter: [UInt64: Set<String>] = [:]
        var waitersByKey: [String: Set<UInt64>] = [:]
        /// Waiters cancelled before they registered.
        var cancelled: Set<UInt64> = []

        mutating func remove(_ id: UInt64) -> CheckedContinuation<Void, Never>? {
            for key in keysByWaiter.removeValue(forKey: id) ?? [] {
                waitersByKey[key]?.remove(id)
                if waitersByKey[key]?.isEmpty == true { waitersByKey[key] = nil }
            }
            return continuations.removeValue(forKey: id)
        }
    }

    private let state = Mutex(State())
    /// Tells other instances (a store shared by several), after waking this one's waiters.
    private let announce: (@Sendable (Set<String>) -> Void)?

    public init(announce: (@Sendable (Set<String>) -> Void)? = nil) {
        self.announce = announce
    }

    /// The key a database's changes are signalled under.
    public static func key(_ database: DatabaseRef) -> String {
        "db|\(database.container)|\(database.environment.rawValue)|\(database.scope.rawValue)|\(database.ownerRecordName)"
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
        let woken = state.withLock { state in
            var ids = Set<UInt64>()
            for key in keys { ids.formUnion(state.waitersByKey[key] ?? []) }
            return ids.compactMap { state.remove($0) }
        }
        for continuation in woken { continuation.resume() }
    }

    /// Anything may have changed (a listener reconnected and may have missed announcements): every waiter re-checks.
    public func wakeAll() {
        let woken = state.withLock { state in
            defer {
                state.continuations = [:]
                state.keysByWaiter = [:]
                state.waitersByKey = [:]
            }
            return Array(state.continuations.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// How many connections are waiting (for tests and benchmarks).
    public var waiting: Int { state.withLock { $0.continuations.count } }

    /// Returns `true` when something changes under one of `keys`, `false` when `deadline` comes first.
    @discardableResult
    public func wait(for keys: Set<String>, until deadline: ContinuousClock.Instant) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                try? await Task.sleep(until: deadline, clock: .continuous)
                return false
            }
            group.addTask {
                await self.waitForChange(keys)
                return !Task.isCancelled
            }
            let woken = await group.next() ?? false
            group.cancelAll()
            return woken
        }
    }

    private func waitForChange(_ keys: Set<String>) async {
        let id = state.withLock { state in
            state.next += 1
            return state.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let cancelled = state.withLock { state in
                    if state.cancelled.remove(id) != nil { return true }
                    state.continuations[id] = continuation
                    state.keysByWaiter[id] = keys
                    for key in keys { state.waitersByKey[key, default: []].insert(id) }
                    return false
                }
                if cancelled { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if let waiter = state.remove(id) { return waiter }
                state.cancelled.insert(id)
                return nil
            }
            waiter?.resume()
        }
        // A cancellation that raced the wake-up left a marker no registration will take.
        _ = state.withLock { $0.cancelled.remove(id) }
    }
}
