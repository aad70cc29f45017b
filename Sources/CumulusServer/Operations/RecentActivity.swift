public import CumulusCore
import Synchronization

/// What this instance did in each minute of the last hour, for the console's charts: requests, records written, push
/// connections open, notifications delivered, the fetches that reached the end of a device's feed, behind or in step,
/// and the verifications devices reported, in sync or not.
///
/// Sixty slots in a ring, each stamped with its minute, so a minute in which nothing happened reads as zero without a
/// timer clearing it; a gauge (push connections) keeps the highest value of each minute and carries its last value
/// through quiet minutes. Counts are this instance's, across its containers: `/metrics` carries the same, for
/// Prometheus to sum over instances.
public final class RecentActivity: Sendable {
    /// What is counted.
    public enum Series: Int, CaseIterable, Sendable {
        case requests, recordsWritten, pushConnections, pushDeliveries, fetchesBehind, fetchesInStep, verificationsInSync, verificationsOutOfSync
    }

    /// The minutes a chart shows.
    public static let minutes = 60

    private struct Slot {
        var minute: Int64 = -1
        var values = [Int](repeating: 0, count: Series.allCases.count)
        /// Push connections open when the minute's first event came, and after its last.
        var opening = 0
        var closing = 0
    }

    private struct State {
        var slots = [Slot](repeating: Slot(), count: RecentActivity.minutes)
        /// The push connections open now, carried into minutes in which none opened or closed.
        var pushConnections = 0
    }

    private let state = Mutex(State())
    private let clock: WallClock

    /// - Parameter clock: The clock minutes are read from; the system's by default.
    public init(clock: WallClock = .system) {
        self.clock = clock
    }

    private func now() -> Int64 { clock.milliseconds() }

    /// Adds `count` to this minute's `series`.
    func add(_ series: Series, _ count: Int = 1) {
        let minute = now() / 60_000
        state.withLock { state in
            let index = Self.slot(for: minute, in: &state)
            state.slots[index].values[series.rawValue] += count
        }
    }

    /// A push connection opened (`+1`) or closed (`-1`).
    func pushConnections(_ change: Int) {
        let minute = now() / 60_000
        state.withLock { state in
            // The minute's slot first, so a new one opens with what was open before this change.
            let index = Self.slot(for: minute, in: &state)
            state.pushConnections = max(0, state.pushConnections + change)
            let series = Series.pushConnections.rawValue
            state.slots[index].values[series] = max(state.slots[index].values[series], state.pushConnections)
            state.slots[index].closing = state.pushConnections
        }
    }

    /// The last hour of `series`, oldest minute first, this minute last.
    public func lastHour(_ series: Series) -> [Int] {
        let minute = now() / 60_000
        return state.withLock { state in
            let slots = (0..<Self.minutes).map { age -> Slot? in
                let wanted = minute - Int64(Self.minutes - 1 - age)
                let slot = state.slots[Int(wanted % Int64(Self.minutes))]
                return slot.minute == wanted ? slot : nil
            }
            guard series == .pushConnections else { return slots.map { $0?.values[series.rawValue] ?? 0 } }
            // A quiet minute holds what the minute before it ended with; before the first event of the hour, what
            // that event found (or, in a quiet hour, what is open now).
            var carried = slots.lazy.compactMap { $0?.opening }.first ?? state.pushConnections
            return slots.map { slot in
                guard let slot else { return carried }
                carried = slot.closing
                return slot.values[series.rawValue]
            }
        }
    }

    /// The slot of `minute`, emptied if it last held an older one.
    private static func slot(for minute: Int64, in state: inout State) -> Int {
        let index = Int(minute % Int64(minutes))
        if state.slots[index].minute != minute {
            state.slots[index] = Slot(minute: minute, opening: state.pushConnections, closing: state.pushConnections)
            state.slots[index].values[Series.pushConnections.rawValue] = state.pushConnections
        }
        return index
    }
}
