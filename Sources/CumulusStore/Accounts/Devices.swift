public import CumulusModel

/// A device seen in a request: who, which installation (`X-Cumulus-Device`), and, when it read its private database's
/// change feed to the end, the position it reached.
public struct DeviceSighting: Sendable, Hashable {
    public var container: String
    public var environment: ContainerEnvironment
    public var userRecordName: String
    public var deviceID: String
    /// The name it gave (`X-Cumulus-Device-Name`); `nil` keeps the one stored.
    public var name: String?
    public var seenAt: Int64
    /// The position of the user's private database feed the device has fetched up to, if this request told it.
    public var position: Int64?

    public init(
        container: String, environment: ContainerEnvironment, userRecordName: String, deviceID: String, name: String?, seenAt: Int64,
        position: Int64?
    ) {
        self.container = container
        self.environment = environment
        self.userRecordName = userRecordName
        self.deviceID = deviceID
        self.name = name
        self.seenAt = seenAt
        self.position = position
    }
}

/// A user's device as the server knows it.
public struct DeviceState: Sendable, Hashable {
    public var deviceID: String
    public var name: String?
    public var environment: ContainerEnvironment
    public var lastSeenAt: Int64
    /// When it last fetched its private database's feed to the end, and the position it reached.
    public var lastFetchedAt: Int64?
    public var position: Int64?
    /// Changes to the user's private database (zone writes) since the position it reached; `nil` before its first fetch.
    public var changesBehind: Int64?

    public init(
        deviceID: String, name: String?, environment: ContainerEnvironment, lastSeenAt: Int64, lastFetchedAt: Int64?, position: Int64?,
        changesBehind: Int64?
    ) {
        self.deviceID = deviceID
        self.name = name
        self.environment = environment
        self.lastSeenAt = lastSeenAt
        self.lastFetchedAt = lastFetchedAt
        self.position = position
        self.changesBehind = changesBehind
    }
}
