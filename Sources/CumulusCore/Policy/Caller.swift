public import CumulusModel
public import CumulusStore

/// Who is making a request, as authentication established it.
public struct Caller: Sendable {
    /// How the caller proved who they are.
    public enum Credential: Sendable, Hashable {
        /// A container API token (`ckAPIToken`), with or without a user's web auth token.
        case apiToken
        /// A signed server-to-server request.
        case serverKey(keyID: String)
    }

    public var container: String
    public var environment: ContainerEnvironment
    /// The signed-in user, if a web auth token identified one.
    public var user: UserAccount?
    public var credential: Credential
    /// The device the client says it is (`X-Cumulus-Device`), recorded in `created.deviceID` and `modified.deviceID`.
    public var deviceID: String
    /// The name the device gives itself (`X-Cumulus-Device-Name`), shown in the console.
    public var deviceName: String?

    public init(
        container: String, environment: ContainerEnvironment, user: UserAccount?, credential: Credential, deviceID: String, deviceName: String? = nil
    ) {
        self.container = container
        self.environment = environment
        self.user = user
        self.credential = credential
        self.deviceID = deviceID
        self.deviceName = deviceName
    }

    /// The device, when the client named one (`web` is what the server records for a client that did not).
    var identifiedDevice: String? { deviceID == "web" || deviceID.isEmpty ? nil : deviceID }

    /// The name recorded as the author of writes: the user, or the server-to-server key acting as the developer.
    public var authorName: String? {
        if let user { return user.userRecordName }
        if case .serverKey(let keyID) = credential { return "_serverKey." + keyID }
        return nil
    }
}
