import CumulusModel
public import Logging

/// The devices users sync from: when each was last seen and how far behind its private database it is.
public protocol DeviceStore: Sendable {
    /// Records a device's request: it is created or its last sighting updated (a position only moves forward).
    func recordDevice(_ sighting: DeviceSighting, logger: Logger) async throws

    /// A user's devices in a container, the most recently seen first, with how many changes of their private database
    /// each has not fetched yet.
    func devices(container: String, userRecordName: String, logger: Logger) async throws -> [DeviceState]
}
