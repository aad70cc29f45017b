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

/// How many devices the server keeps of one user.
public enum DeviceLimits {
    /// The most devices kept per user (both environments together): a user naming a new device on every request
    /// cannot grow the table without end. Past it, new devices are not recorded (their requests are served as usual);
    /// known ones go on being seen and reporting.
    public static let maximumPerUser = 100
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
    /// What it reported of its last verification; `nil` before its first.
    public var verification: DeviceVerification?

    public init(
        deviceID: String, name: String?, environment: ContainerEnvironment, lastSeenAt: Int64, lastFetchedAt: Int64?, position: Int64?,
        changesBehind: Int64?, verification: DeviceVerification? = nil
    ) {
        self.deviceID = deviceID
        self.name = name
        self.environment = environment
        self.lastSeenAt = lastSeenAt
        self.lastFetchedAt = lastFetchedAt
        self.position = position
        self.changesBehind = changesBehind
        self.verification = verification
    }
}

/// What a device reported of its last verification (`SyncEngine.verify()`): how many zones it compared, and how many
/// records differed in all of them.
public struct DeviceVerification: Sendable, Hashable {
    /// When the server received the report (milliseconds since 1970).
    public var verifiedAt: Int64
    public var zones: Int
    public var missing: Int
    public var extra: Int
    public var stale: Int
    /// The zones that differed, by name, at most ``maximumZoneNames`` of them.
    public var zonesOutOfSync: [String]

    /// The most zone names a verification keeps.
    public static let maximumZoneNames = 10

    public init(verifiedAt: Int64, zones: Int, missing: Int, extra: Int, stale: Int, zonesOutOfSync: [String]) {
        self.verifiedAt = verifiedAt
        self.zones = zones
        self.missing = missing
        self.extra = extra
        self.stale = stale
        self.zonesOutOfSync = Array(zonesOutOfSync.prefix(Self.maximumZoneNames))
    }

    public var isInSync: Bool { missing == 0 && extra == 0 && stale == 0 }

    /// The zone names as a column holds them: one per line (a zone name holds no line break).
    public var zoneNamesText: String { zonesOutOfSync.joined(separator: "\n") }

    public static func zoneNames(_ text: String?) -> [String] {
        (text ?? "").split(separator: "\n").map(String.init)
    }
}

/// A device that reported its last verification out of sync, with its user: what the console's overview lists.
public struct DeviceOutOfSync: Sendable, Hashable {
    public var userRecordName: String
    public var userName: String
    public var device: DeviceState

    public init(userRecordName: String, userName: String, device: DeviceState) {
        self.userRecordName = userRecordName
        self.userName = userName
        self.device = device
    }
}
