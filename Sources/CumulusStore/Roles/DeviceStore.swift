public import CumulusModel
public import Logging

/// The devices users sync from: when each was last seen and how far behind its private database it is.
public protocol DeviceStore: Sendable {
    /// Records a device's request: it is created or its last sighting updated (a position only moves forward).
    func recordDevice(_ sighting: DeviceSighting, logger: Logger) async throws

    /// A user's devices in a container, the most recently seen first, with how many changes of their private database
    /// each has not fetched yet.
    func devices(container: String, userRecordName: String, logger: Logger) async throws -> [DeviceState]

    /// Keeps what a device reported of its verification, in place of its last report; the device is created if the
    /// server had not seen it (a user that no longer exists records nothing).
    func recordVerification(
        _ verification: DeviceVerification, container: String, environment: ContainerEnvironment, userRecordName: String, deviceID: String,
        logger: Logger) async throws

    /// The devices of a container's users whose last report was out of sync, the most recently verified first, at most
    /// `limit`.
    func devicesOutOfSync(container: String, environment: ContainerEnvironment, limit: Int, logger: Logger) async throws -> [DeviceOutOfSync]
}
