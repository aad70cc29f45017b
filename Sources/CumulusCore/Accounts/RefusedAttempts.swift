import Synchronization

/// Sign-in and sign-up limits this instance has seen exceeded, until their windows end: a refused attempt is answered
/// from here, with no store write. Without it every refusal counted one more attempt in the store, so a flood of
/// refused sign-ins from one address (2,700 to 4,400 a second) grew SQLite's log by 43 to 64 MB in 10 s.
///
/// Each instance learns a limit is exceeded from its own count in the store, which every instance shares, so the limits
/// hold across instances as before; this only spares the writes after that. At most ``capacity`` keys are kept; when
/// full, the ended windows are dropped, and if none has ended a new refusal is not kept (it costs its write as before).
final class RefusedAttempts: Sendable {
    private let refusedUntil = Mutex([String: Int64]())
    let capacity: Int

    init(capacity: Int = 100_000) {
        self.capacity = capacity
    }

    /// When the window that refuses `key` ends, in milliseconds, if it has not ended by `now`.
    func refused(_ key: String, now: Int64) -> Int64? {
        refusedUntil.withLock { refusedUntil in
            guard let end = refusedUntil[key] else { return nil }
            if end <= now {
                refusedUntil[key] = nil
                return nil
            }
            return end
        }
    }

    /// Remembers that `key` is over its limit until `end`.
    func refuse(_ key: String, until end: Int64, now: Int64) {
        refusedUntil.withLock { refusedUntil in
            if refusedUntil.count >= capacity, refusedUntil[key] == nil {
                refusedUntil = refusedUntil.filter { $0.value > now }
                guard refusedUntil.count < capacity else { return }
            }
            refusedUntil[key] = end
        }
    }
}
