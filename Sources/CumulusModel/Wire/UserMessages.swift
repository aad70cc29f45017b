/// A user identity as `users/caller` and `users/discover` answer it: `userRecordName`, `lookupInfo`, the name as
/// `nameComponents.givenName` and `firstName` (the two spellings clients read), and, for a discovered user looked up
/// by email, the email at the top level too.
public struct UserIdentity: Sendable, Hashable {
    public var userRecordName: String
    public var emailAddress: String?
    public var name: String?
    /// A discovered identity carries `emailAddress` at the top level as well as in `lookupInfo`.
    public var emailAtTopLevel: Bool

    public init(userRecordName: String, emailAddress: String? = nil, name: String? = nil, emailAtTopLevel: Bool = false) {
        self.userRecordName = userRecordName
        self.emailAddress = emailAddress
        self.name = name
        self.emailAtTopLevel = emailAtTopLevel
    }

    init(wire object: WireObject) throws(WireFormatError) {
        let lookupInfo = try object.object("lookupInfo")
        let lookupName = try lookupInfo.map { info throws(WireFormatError) in try info.string("userRecordName") } ?? nil
        userRecordName = try object.string("userRecordName") ?? lookupName ?? ""
        let topLevelEmail = try object.string("emailAddress")
        let lookupEmail = try lookupInfo.map { info throws(WireFormatError) in try info.string("emailAddress") } ?? nil
        emailAddress = lookupEmail ?? topLevelEmail
        emailAtTopLevel = topLevelEmail != nil
        let components = try object.object("nameComponents")
        let givenName = try components.map { components throws(WireFormatError) in try components.string("givenName") } ?? nil
        let firstName = try object.string("firstName")
        name = givenName ?? firstName
    }

    /// Writes the identity's members into the object being written.
    func writeMembers(to writer: inout JSONWriter) {
        writer.key("userRecordName")
        writer.string(userRecordName)
        writer.key("lookupInfo")
        writer.beginObject()
        writer.key("userRecordName")
        writer.string(userRecordName)
        if let emailAddress {
            writer.key("emailAddress")
            writer.string(emailAddress)
        }
        writer.endObject()
        if let name {
            writer.key("nameComponents")
            writer.beginObject()
            writer.key("givenName")
            writer.string(name)
            writer.endObject()
            writer.key("firstName")
            writer.string(name)
        }
        if emailAtTopLevel, let emailAddress {
            writer.key("emailAddress")
            writer.string(emailAddress)
        }
    }

    func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writeMembers(to: &writer)
        writer.endObject()
    }
}

/// The answer of `users/caller` (and `users/current`): the caller's identity, flat, and again as `users: [identity]`
/// for clients built from Apple's page.
public struct CallerResponse: WireMessage, Hashable {
    public var identity: UserIdentity

    public init(identity: UserIdentity) {
        self.identity = identity
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        identity = try UserIdentity(wire: object)
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        identity.writeMembers(to: &writer)
        writer.array("users", [identity]) { writer, identity in identity.write(to: &writer) }
        writer.endObject()
    }
}

/// The answer of `users/discover`, `users/lookup/email`, `users/lookup/id` and `users/lookup/contacts`.
public struct UsersResponse: WireMessage, Hashable {
    public var users: [UserIdentity]

    public init(users: [UserIdentity]) {
        self.users = users
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        users = try object.objects("users") { object throws(WireFormatError) in try UserIdentity(wire: object) }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("users", users) { writer, user in user.write(to: &writer) }
        writer.endObject()
    }
}

extension UserLookupRequest: WireMessage {
    public init(keys: [Key]) {
        self.keys = keys
    }

    /// Writes `{users: […]}`, the form Apple's page documents (`lookupInfos` is read too).
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("users", keys) { writer, key in
            writer.beginObject()
            switch key {
            case .emailAddress(let email):
                writer.key("emailAddress")
                writer.string(email)
            case .userRecordName(let name):
                writer.key("userRecordName")
                writer.string(name)
            case .phoneNumber(let phone):
                writer.key("phoneNumber")
                writer.string(phone)
            }
            writer.endObject()
        }
        writer.endObject()
    }
}
