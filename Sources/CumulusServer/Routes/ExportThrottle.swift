import CumulusCore
import Synchronization

/// At most one export per user per interval on an instance: an export reads everything the user has, so one holder of
/// a user's token asking in a loop would read their whole data again and again.
final class ExportThrottle: Sendable {
    let interval: Int64
    private let last = Mutex<[String: Int64]>([:])

    init(interval: Int64 = 600_000) {
        self.interval = interval
    }

    /// Admits an export of `user` at `now` (milliseconds), or throws `THROTTLED` with the seconds to wait.
    func admit(_ user: String, now: Int64) throws(CumulusError) {
        let wait: Int64? = last.withLock { last in
            if let previous = last[user], now - previous < interval { return interval - (now - previous) }
            if last.count > 100_000 { last = last.filter { now - $0.value < interval } }
            last[user] = now
            return nil
        }
        if let wait {
            throw CumulusError(.throttled, "users/export: one export every \(interval / 60_000) minutes", retryAfter: Int((wait + 999) / 1000))
        }
    }
}
