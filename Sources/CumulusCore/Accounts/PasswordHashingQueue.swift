import Dispatch
import Foundation
import Synchronization

/// Runs password hashing (scrypt: tens of milliseconds of CPU and 32 MiB each) on threads of its own, a few at a time,
/// so that a flood of sign-ins cannot occupy the threads every other request runs on.
///
/// At most `maximumRunning` hashes run at once; up to `maximumWaiting` more wait their turn; beyond that a request is
/// refused at once with `THROTTLED` and `retryAfter`, costing the server nothing.
public final class PasswordHashingQueue: Sendable {
    private let queue = DispatchQueue(label: "cumulus.password-hashing", attributes: .concurrent)
    private let state = Mutex(State())
    /// Hashes that run at once.
    public let maximumRunning: Int
    /// Hashes that may wait for a turn.
    public let maximumWaiting: Int

    private struct State {
        var running = 0
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    /// Creates a queue; by default, half the processors (at least one) hash, and 64 hashes may wait.
    public init(maximumRunning: Int? = nil, maximumWaiting: Int = 64) {
        self.maximumRunning = max(1, maximumRunning ?? ProcessInfo.processInfo.activeProcessorCount / 2)
        self.maximumWaiting = max(0, maximumWaiting)
    }

    /// Hashes waiting for a turn now.
    public var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// Runs `work` on the hashing threads when a turn comes, or throws `THROTTLED` if too many wait already.
    public func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await admit()
        defer { release() }
        return try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try work() }) }
        }
    }

    private func admit() async throws {
        enum Admission { case now, wait, refuse }
        let admission = state.withLock { state -> Admission in
            if state.running < maximumRunning {
                state.running += 1
                return .now
            }
            return state.waiting.count < maximumWaiting ? .wait : .refuse
        }
        switch admission {
        case .now: return
        case .refuse: throw CumulusError(.throttled, "too many sign-ins at once; retry shortly", retryAfter: 1)
        case .wait:
            await withCheckedContinuation { continuation in
                let admitted = state.withLock { state -> Bool in
                    // A turn may have come free between the two looks at the state.
                    if state.running < maximumRunning {
                        state.running += 1
                        return true
                    }
                    state.waiting.append(continuation)
                    return false
                }
                if admitted { continuation.resume() }
            }
        }
    }

    /// Hands the turn to the first waiter, or frees it.
    private func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiting.isEmpty {
                state.running -= 1
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}
