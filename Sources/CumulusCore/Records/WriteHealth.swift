import CumulusStore
import Synchronization

/// Whether this instance's writes commit, as its requests and probes find: `/health` answers 503 while they fail, so a
/// load balancer stops sending writes to an instance whose store cannot write (a read-only file, a full disk) and a
/// monitor sees it.
///
/// A write that fails because the store cannot write marks it; the next write that commits, a request's or a
/// probe's, clears it.
public final class WriteHealth: Sendable {
    /// Since when (milliseconds since 1970) writes fail, and the last reason.
    public struct Failure: Sendable, Hashable {
        public var since: Int64
        public var reason: String
    }

    private let state = Mutex<Failure?>(nil)

    public init() {}

    /// The current failure; `nil` while writes commit.
    public var failure: Failure? { state.withLock { $0 } }

    /// A write failed because the store could not write.
    public func failed(_ reason: String, at time: Int64) {
        state.withLock { state in state = Failure(since: state?.since ?? time, reason: reason) }
    }

    /// A write committed.
    public func committed() {
        state.withLock { state in if state != nil { state = nil } }
    }
}

/// A service whose store calls tell ``WriteHealth`` whether the store writes.
protocol WriteHealthReporting {
    var writeHealth: WriteHealth { get }
    var clock: WallClock { get }
}

extension WriteHealthReporting {
    /// ``CumulusCore/mapStoreErrors(writing:_:)``, and what the call met tells ``writeHealth`` whether the store writes:
    /// a write that commits clears it, and any call that finds the store unable to write marks it.
    func mapStoreErrors<T>(writing: Bool = false, _ body: () async throws -> T) async throws -> T {
        do {
            let value = try await CumulusCore.mapStoreErrors(writing: writing, body)
            if writing { writeHealth.committed() }
            return value
        } catch let error as CumulusError {
            if let cause = error.underlying as? StoreError, cause.code == .storageFull || cause.code == .cannotWrite {
                writeHealth.failed(cause.message, at: clock.milliseconds())
            }
            throw error
        }
    }
}
