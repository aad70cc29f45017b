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

/// A window the upload quota counts in: uploads from one device, or from one address, over a length of time.
public struct LinkQuotaWindow: Sendable, Hashable {
    public enum Scope: Sendable, Hashable {
        case device
        case address
    }

    public var scope: Scope
    /// Milliseconds.
    public var length: Int64
    public var limit: Int
    /// Why an upload is refused when the window is full.
    public var reason: String
}

/// How full a window is: the uploads it holds, and when the oldest of them was made.
public struct LinkQuotaUsage: Sendable, Hashable {
    public var count: Int
    /// Milliseconds since the epoch; `nil` when the window is empty.
    public var oldest: Int64?

    public init(count: Int, oldest: Int64?) {
        self.count = count
        self.oldest = oldest
    }
}

extension LinkQuota {
    static let hour: Int64 = 3_600_000

    /// The windows every store counts, in the order they are checked.
    public var windows: [LinkQuotaWindow] {
        [
            LinkQuotaWindow(scope: .device, length: Self.hour, limit: perDevicePerHour, reason: "\(perDevicePerHour) links an hour from this device"),
            LinkQuotaWindow(
                scope: .device, length: 24 * Self.hour, limit: perDevicePerDay, reason: "\(perDevicePerDay) links a day from this device"),
            LinkQuotaWindow(
                scope: .address, length: Self.hour, limit: perAddressPerHour, reason: "\(perAddressPerHour) links an hour from this address"),
        ]
    }

    /// How long upload counts are kept: the longest window.
    public static let retention: Int64 = 24 * hour

    /// Whether one more upload fits, given each window's usage (in ``windows`` order) counted over `now - length`; a
    /// refusal says when the oldest upload of the full window leaves it.
    public func decide(usage: [LinkQuotaUsage], now: Int64) -> LinkQuotaDecision {
        for (window, used) in zip(windows, usage) where used.count >= window.limit {
            let retryAfter = max(1, Int(((used.oldest ?? now) + window.length - now + 999) / 1000))
            return .rejected(retryAfter: retryAfter, reason: window.reason)
        }
        return .accepted
    }
}

/// Whether an upload fits the quota.
public enum LinkQuotaDecision: Sendable, Hashable {
    case accepted
    /// Over a limit; a retry may succeed after this many seconds.
    case rejected(retryAfter: Int, reason: String)
}
