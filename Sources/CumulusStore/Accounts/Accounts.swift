public import CumulusModel

/// A container, as the command line lists it.
public struct StoredContainer: Sendable, Hashable {
    public var id: String
    /// Milliseconds since the epoch.
    public var createdAt: Int64

    public init(id: String, createdAt: Int64) {
        self.id = id
        self.createdAt = createdAt
    }
}

/// An API token: identifies a container and environment (`ckAPIToken`). Only its hash is stored.
public struct StoredAPIToken: Sendable, Hashable {
    public var tokenHash: [UInt8]
    public var container: String
    public var environment: ContainerEnvironment
    public var createdAt: Int64
    public var revoked: Bool

    public init(tokenHash: [UInt8], container: String, environment: ContainerEnvironment, createdAt: Int64, revoked: Bool = false) {
        self.tokenHash = tokenHash
        self.container = container
        self.environment = environment
        self.createdAt = createdAt
        self.revoked = revoked
    }
}

/// A user of a container.
public struct UserAccount: Sendable, Hashable {
    /// CloudKit's user record name, `_` followed by 32 hex digits.
    public var userRecordName: String
    public var container: String
    /// The sign-in name, unique per container ignoring case.
    public var name: String
    public var email: String?
    /// A self-describing password hash (`scrypt$…`), or `nil` for users who cannot sign in with a password.
    public var passwordHash: String?
    /// Whether `users/discover` and `users/lookup/email` may find this user.
    public var discoverable: Bool
    public var createdAt: Int64

    public init(
        userRecordName: String, container: String, name: String, email: String? = nil, passwordHash: String? = nil,
        discoverable: Bool = false, createdAt: Int64
    ) {
        self.userRecordName = userRecordName
        self.container = container
        self.name = name
        self.email = email
        self.passwordHash = passwordHash
        self.discoverable = discoverable
        self.createdAt = createdAt
    }
}

/// A web auth token: identifies a user (`ckWebAuthToken`). Only its hash is stored.
public struct StoredWebAuthToken: Sendable, Hashable {
    public var tokenHash: [UInt8]
    public var userRecordName: String
    public var createdAt: Int64
    /// Milliseconds since the epoch.
    public var expiresAt: Int64

    public init(tokenHash: [UInt8], userRecordName: String, createdAt: Int64, expiresAt: Int64) {
        self.tokenHash = tokenHash
        self.userRecordName = userRecordName
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// A server-to-server key: an ECDSA P-256 public key registered for a container and environment.
public struct StoredServerKey: Sendable, Hashable {
    public var keyID: String
    public var container: String
    public var environment: ContainerEnvironment
    public var publicKeyPEM: String
    public var createdAt: Int64
    public var revoked: Bool

    public init(keyID: String, container: String, environment: ContainerEnvironment, publicKeyPEM: String, createdAt: Int64, revoked: Bool = false) {
        self.keyID = keyID
        self.container = container
        self.environment = environment
        self.publicKeyPEM = publicKeyPEM
        self.createdAt = createdAt
        self.revoked = revoked
    }
}

/// The secret that signs change tokens and continuation markers (see ``RecordStore/serverSecret(logger:)``).
public enum ServerSecret {
    /// 32 random bytes: what a store offers when it has no secret yet.
    public static func makeCandidate() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }
}

/// A credential of the web console (`/console`): a sign-in token the command line prints, used once, or the session a
/// sign-in starts. Only its hash is stored.
public struct ConsoleCredential: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        case signIn = "sign-in"
        case session
    }

    public var tokenHash: [UInt8]
    public var container: String
    public var kind: Kind
    /// Milliseconds since the epoch.
    public var expiresAt: Int64

    public init(tokenHash: [UInt8], container: String, kind: Kind, expiresAt: Int64) {
        self.tokenHash = tokenHash
        self.container = container
        self.kind = kind
        self.expiresAt = expiresAt
    }
}

/// What erasing a user removed (GDPR article 17): the receipt `cumulus users erase` prints.
public struct UserErasure: Sendable, Hashable {
    /// The author other users' records name where the erased user created or last changed them.
    public static let erasedUserRecordName = "_erased"
    /// The device a store's erasure deletes the user's public records from.
    public static let erasureDeviceID = "cumulus-erase"

    /// Their private zones, deleted as a zone deletion goes (participants' devices drop them through their feeds).
    public var zones = 0
    /// The live records those zones held.
    public var records = 0
    /// Records they created in the public database, deleted.
    public var publicRecords = 0
    /// Shares they owned, stopped with their zones.
    public var sharesStopped = 0
    /// Shares of other users they were a participant of, left.
    public var participations = 0
    /// Records of other users' zones they created or last changed, now by ``erasedUserRecordName``.
    public var recordsAnonymized = 0
    public var subscriptions = 0
    public var pushTokens = 0
    public var devices = 0
    public var webAuthTokens = 0
    /// Versions in the history of their zones and of their public records.
    public var historyVersions = 0
    /// Asset receipts of their zones and public records.
    public var assetReceipts = 0
    /// Asset files no receipt names any more: the service deletes them from the asset storage after the transaction.
    public var assetFiles: [String] = []
    /// Whether the store rewrote its files so that the deleted bytes are gone from them (SQLite: `VACUUM`, then the
    /// write-ahead log truncated); `false` where the store cannot (PostgreSQL: `docs/OPERATIONS.md`, "Erase a user").
    public var filesScrubbed = false

    public init() {}
}
