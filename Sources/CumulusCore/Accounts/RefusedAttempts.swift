import Synchronization

/// Sign-in and sign-up limits this instance has seen exceeded, until their windows end: a refused attempt is answered
/// from here, with no store write. Without it every refusal counted one more attempt in the store, so a flood of
/// refused sign-ins from one address (2,700 to 4,400 a second) grew SQLite's log by 43 to 64 MB in 10 s.
///
/// Each instance learns a limit is exceeded from its own count in the store, which every instance shares, so the limits
/// hold across instances as before; this only spares the writes after that. At most ``capacity`` keys are kept; when
/// full, the ended windows are dropped (at most once a second, so a full memory costs no sweep per request), and if none
/// has ended a new refusal is not kept (it costs its write as before).
final class RefusedAttempts: Sendable {
    private struct State {
        var refusedUntil: [String: Int64] = [:]
        var sweptAt: Int64 = .min
    }
    private let state = Mutex(State())
    let capacity: Int

    init(capacity: Int = 100_000) {
        self.capacity = capacity
    }

    /// When the window that refuses `key` ends, in milliseconds, if it has not ended by `now`.
    func refused(_ key: String, now: Int64) -> Int64? {
        state.withLock { state in
            guard let end = state.refusedUntil[key] else { return nil }
            if end <= now {
                state.refusedUntil[key] = nil
                return nil
            }
            return end
        }
    }

    /// Remembers that `key` is over its limit until `end`.
    func refuse(_ key: String, until end: Int64, now: Int64) {
        state.withLock { state in
            if state.refusedUntil.count >= capacity, state.refusedUntil[key] == nil {
                guard now - state.sweptAt >= 1_000 else { return }
                state.sweptAt = now
                state.refusedUntil = state.refusedUntil.filter { $0.value > now }
                guard state.refusedUntil.count < capacity else { return }
            }
            state.refusedUntil[key] = end
        }
    }
}
