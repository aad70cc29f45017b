import CumulusCore
import Synchronization

/// Bounds `users/export`: at most one export per user per interval on an instance (an export reads everything the user
/// has, so one holder of a user's token asking in a loop would read their whole data again and again), and at most
/// ``maximumRunning`` running at once on the instance, whoever asks (each holds a page of records and a piece of the
/// document while its reader reads, so many large accounts exporting together would otherwise have no bound).
final class ExportThrottle: Sendable {
    let interval: Int64
    let maximumRunning: Int
    private struct State {
        var last: [String: Int64] = [:]
        var running = 0
    }
    private let state = Mutex(State())

    init(interval: Int64 = 600_000, maximumRunning: Int = 2) {
        self.interval = interval
        self.maximumRunning = maximumRunning
    }

    /// One running export's place, given back when the export ends: when its response body has been written, or
    /// dropped unwritten (the client left first).
    final class Place: Sendable {
        private let throttle: ExportThrottle

        fileprivate init(_ throttle: ExportThrottle) {
            self.throttle = throttle
        }

        deinit {
            throttle.state.withLock { $0.running -= 1 }
        }
    }

    /// Admits an export of `user` at `now` (milliseconds): a place, or `TRY_AGAIN_LATER` when the instance runs as many
    /// as it may (the user's interval is then not spent), or `THROTTLED` with the seconds to wait.
    func admit(_ user: String, now: Int64) throws(CumulusError) -> Place {
        enum Refusal {
            case busy
            case wait(Int64)
        }
        let (interval, maximumRunning) = (interval, maximumRunning)
        let refusal: Refusal? = state.withLock { state in
            guard state.running < maximumRunning else { return .busy }
            if let previous = state.last[user], now - previous < interval { return .wait(interval - (now - previous)) }
            if state.last.count > 100_000 { state.last = state.last.filter { now - $0.value < interval } }
            state.last[user] = now
            state.running += 1
            return nil
        }
        switch refusal {
        case nil:
            return Place(self)
        case .busy:
            throw CumulusError(.unavailable, "users/export: this server runs as many exports as it may at once; retry", retryAfter: 30)
        case .wait(let wait):
            throw CumulusError(.throttled, "users/export: one export every \(interval / 60_000) minutes", retryAfter: Int((wait + 999) / 1000))
        }
    }
}
