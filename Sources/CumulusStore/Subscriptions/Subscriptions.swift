public import CumulusModel
public import Logging

/// Whose subscriptions: a user's, in one database of a container environment (`public`, `private` or `shared`).
public struct SubscriptionOwner: Sendable, Hashable {
    public var container: String
    public var environment: ContainerEnvironment
    public var scope: DatabaseScope
    public var userRecordName: String

    public init(container: String, environment: ContainerEnvironment, scope: DatabaseScope, userRecordName: String) {
        self.container = container
        self.environment = environment
        self.scope = scope
        self.userRecordName = userRecordName
    }
}

/// A subscription as stored: its ID and its Subscription dictionary as canonical JSON. The domain reads and checks the
/// dictionary; a store only keeps it.
public struct StoredSubscription: Sendable, Hashable {
    public var subscriptionID: String
    public var json: [UInt8]
    public var createdAt: Int64

    public init(subscriptionID: String, json: [UInt8], createdAt: Int64) {
        self.subscriptionID = subscriptionID
        self.json = json
        self.createdAt = createdAt
    }
}

/// A push token (`tokens/create`): a device's courier address, bound to the user it notifies, with how far its
/// notifications have been delivered (the positions each subscription was last notified at, as JSON the push service
/// owns).
public struct StoredPushToken: Sendable, Hashable {
    public var token: String
    public var container: String
    public var environment: ContainerEnvironment
    public var userRecordName: String?
    public var positions: [UInt8]
    /// When the token was bound to its user (or made, if never bound), in milliseconds.
    public var createdAt: Int64

    public init(
        token: String, container: String, environment: ContainerEnvironment, userRecordName: String?, positions: [UInt8] = Array("{}".utf8),
        createdAt: Int64
    ) {
        self.token = token
        self.container = container
        self.environment = environment
        self.userRecordName = userRecordName
        self.positions = positions
        self.createdAt = createdAt
    }
}

/// What a push token's look at the feeds needs, read at once (``SubscriptionStore/pushTokenFeeds(_:logger:)``): the
/// token, its user's subscriptions, and the positions of the zones they may watch.
public struct PushTokenFeeds: Sendable, Hashable {
    public var token: StoredPushToken
    /// The user's subscriptions in each database, oldest first; a database with none is absent (and so is every one
    /// when the token is bound to no user).
    public var subscriptions: [DatabaseScope: [StoredSubscription]]
    /// The zones of the user's private database, when it has subscriptions (a database never written has its default
    /// zone, at position 0, as ``RecordZoneStore/zones(in:logger:)`` answers).
    public var privateZones: [ZoneState]
    /// The zones of the container's public database, when the user has subscriptions there.
    public var publicZones: [ZoneState]
    /// The zones shared with the user, when they have subscriptions in their shared database.
    public var sharedZones: [SharedZone]

    public init(
        token: StoredPushToken, subscriptions: [DatabaseScope: [StoredSubscription]], privateZones: [ZoneState] = [],
        publicZones: [ZoneState] = [], sharedZones: [SharedZone] = []
    ) {
        self.token = token
        self.subscriptions = subscriptions
        self.privateZones = privateZones
        self.publicZones = publicZones
        self.sharedZones = sharedZones
    }
}

/// A store that several instances share tells them of each other's commits, so a push poll waiting on one instance
/// wakes when another commits. The SQLite store, with one instance, does not need it.
/// A store whose running servers a command in another process can wake: a restore or an undelete from the command line
/// tells them, so devices waiting on push look at once, as after the console's.
public protocol CommandAnnouncing: Sendable {
    /// Tells every running server that something was committed under these keys, and returns once it is told (the
    /// command exits next).
    func announceFromCommand(_ keys: Set<String>, logger: Logger) async

    /// Calls `changed` with the keys commands announce, until the task is cancelled (a server's own service).
    func listenForCommands(_ changed: @escaping @Sendable (Set<String>) -> Void) async
}

public protocol ChangeBroadcasting: Sendable {
    /// Tells the other instances that something was committed under these keys (the databases it changed); this one
    /// wakes its own connections itself (``ChangeSignal``). Cheap and batched: call after each write, outside its
    /// transaction.
    func announceChange(_ keys: Set<String>)
    /// Calls `changed` with the keys any instance announced, until the task is cancelled; reconnects by itself. `nil`
    /// means anything may have changed: announcements may have been missed (while connecting), or were too many to name.
    /// A store that watches the databases instead of hearing announcements asks `watching` which keys to watch.
    func listenForChanges(watching: @escaping @Sendable () -> Set<String>, _ changed: @escaping @Sendable (Set<String>?) -> Void) async
}
