public import CumulusModel

/// A snapshot behind a share-a-copy link: an independent JSON copy that expires.
public struct LinkSnapshot: Sendable, Hashable {
    /// The link's identifier, as in `/s/{id}`.
    public var id: String
    public var container: String
    public var environment: ContainerEnvironment
    /// `drive` or `records`.
    public var kind: String
    /// The cleaned payload, JSON.
    public var payload: [UInt8]
    /// Milliseconds since the epoch.
    public var createdAt: Int64
    public var expiresAt: Int64

    public init(id: String, container: String, environment: ContainerEnvironment, kind: String, payload: [UInt8], createdAt: Int64, expiresAt: Int64)
    {
        self.id = id
        self.container = container
        self.environment = environment
        self.kind = kind
        self.payload = payload
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// Who uploads, for the abuse ceiling.
public struct LinkUploader: Sendable, Hashable {
    public var container: String
    public var deviceID: String
    public var ipAddress: String

    public init(container: String, deviceID: String, ipAddress: String) {
        self.container = container
        self.deviceID = deviceID
        self.ipAddress = ipAddress
    }
}

/// Upload limits, counted in the store so they hold across restarts and across servers sharing it.
public struct LinkQuota: Sendable, Hashable {
    public var perDevicePerHour: Int
    public var perDevicePerDay: Int
    public var perAddressPerHour: Int

    public init(perDevicePerHour: Int = 5, perDevicePerDay: Int = 20, perAddressPerHour: Int = 60) {
        self.perDevicePerHour = perDevicePerHour
        self.perDevicePerDay = perDevicePerDay
        self.perAddressPerHour = perAddressPerHour
    }
}

/// Whether an upload fits the quota.
public enum LinkQuotaDecision: Sendable, Hashable {
    case accepted
    /// Over a limit; a retry may succeed after this many seconds.
    case rejected(retryAfter: Int, reason: String)
}
