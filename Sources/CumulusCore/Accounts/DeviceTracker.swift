import CumulusModel
public import CumulusStore
import Logging
import Synchronization

/// Keeps the last sighting of each device (`X-Cumulus-Device`) of a signed-in user, for the console's devices page:
/// when it was last seen and the position of its private database feed it has fetched to.
///
/// A device polls; writing on each request would turn reads into writes. A device's row is written when its position
/// moves, and otherwise at most once a minute per device on this instance. A failure to write is logged and never fails
/// the request it came with.
public final class DeviceTracker: Sendable {
    struct Key: Hashable {
        var userRecordName: String
        var environment: String
        var deviceID: String
    }

    /// The least time between two writes of a device whose position did not move.
    static let quietInterval: Int64 = 60_000
    /// The most devices remembered; past it the memory starts over (the next sighting of each is written once).
    static let rememberedDevices = 100_000

    private let store: any DeviceStore
    private let written = Mutex<[Key: (position: Int64?, at: Int64)]>([:])
    /// Told how many changes a device had to catch up when it fetched its private database's feed (for `/metrics`).
    private let observeBehind: @Sendable (Int64) -> Void
    /// Told whether each verification a device reported was in sync (for `/metrics` and the console's charts).
    private let observeVerification: @Sendable (Bool) -> Void

    public init(
        store: any DeviceStore, observeBehind: @escaping @Sendable (Int64) -> Void = { _ in },
        observeVerification: @escaping @Sendable (Bool) -> Void = { _ in }
    ) {
        self.store = store
        self.observeBehind = observeBehind
        self.observeVerification = observeVerification
    }

    /// A device reported a verification.
    func verified(inSync: Bool) { observeVerification(inSync) }

    /// How many devices this instance saw since `time` (milliseconds), of those it remembers.
    public func devicesSeen(since time: Int64) -> Int {
        written.withLock { written in written.values.count { $0.at >= time } }
    }

    /// Notes a request of `caller` at `now`; with `position`, the private database feed position it fetched to, having
    /// started `behind` changes back.
    func note(_ caller: Caller, now: Int64, position: Int64? = nil, behind: Int64? = nil, logger: Logger) async {
        guard let user = caller.user, let deviceID = caller.identifiedDevice else { return }
        if let behind { observeBehind(behind) }
        let key = Key(userRecordName: user.userRecordName, environment: caller.environment.rawValue, deviceID: deviceID)
        let due = written.withLock { written -> Bool in
            if let last = written[key], now - last.at < Self.quietInterval, position == nil || position == last.position { return false }
            if written.count >= Self.rememberedDevices { written.removeAll(keepingCapacity: true) }
            written[key] = (position ?? written[key]?.position, now)
            return true
        }
        guard due else { return }
        do {
            try await store.recordDevice(
                DeviceSighting(
                    container: caller.container, environment: caller.environment, userRecordName: user.userRecordName, deviceID: deviceID,
                    name: caller.deviceName, seenAt: now, position: position), logger: logger)
        } catch {
            written.withLock { _ = $0.removeValue(forKey: key) }
            logger.debug("could not record a device", metadata: ["cumulus.device": "\(deviceID)", "error": "\(error)"])
        }
    }
}
