/// Record types and names CloudKit reserves for shares.
public enum ShareRecord {
    /// The record type of shares. `cloudKit.share` is accepted on input too.
    public static let recordType = "cloudkit.share"
    /// The fixed record name of a zone-wide share.
    public static let zoneWideRecordName = "cloudkit.zoneshare"

    /// Whether a record type names a share, in either spelling.
    public static func isShareType(_ type: String?) -> Bool {
        guard let type else { return false }
        return type.lowercased() == recordType
    }
}

/// What a participant may do with shared records.
public enum SharePermission: String, Sendable, Hashable, CaseIterable {
    case none = "NONE"
    case readOnly = "READ_ONLY"
    case readWrite = "READ_WRITE"
}

/// A participant's role.
public enum ParticipantType: String, Sendable, Hashable, CaseIterable {
    case owner = "OWNER"
    /// Invited by the owner (CKShare's private user).
    case user = "USER"
    /// Joined through a public share's link.
    case publicUser = "PUBLIC_USER"
}

/// A participant's acceptance status. `INVITED` is the Web Services name of CKShare's "pending".
public enum ParticipantStatus: String, Sendable, Hashable, CaseIterable {
    case invited = "INVITED"
    case accepted = "ACCEPTED"
    case removed = "REMOVED"

    /// Reads a status, accepting `PENDING` for `INVITED`.
    public init?(wire: String) {
        let upper = wire.uppercased()
        if upper == "PENDING" {
            self = .invited
        } else {
            self.init(rawValue: upper)
        }
    }
}

/// How a request names a participant: a user record name or an email (a lookup key).
public enum ParticipantLookup: Sendable, Hashable {
    case userRecordName(String)
    case emailAddress(String)
}

/// A participant as a share request describes it.
public struct ParticipantDraft: Sendable, Hashable {
    public var lookup: ParticipantLookup
    public var permission: SharePermission
    /// `REMOVED` removes the participant.
    public var status: ParticipantStatus?

    public init(lookup: ParticipantLookup, permission: SharePermission, status: ParticipantStatus? = nil) {
        self.lookup = lookup
        self.permission = permission
        self.status = status
    }
}

/// The sharing keys of a `cloudkit.share` record in `records/modify`.
public struct ShareDraft: Sendable, Hashable {
    /// The root record of a hierarchy share; `nil` for a zone-wide share.
    public var rootRecordName: String?
    public var publicPermission: SharePermission?
    /// The participants; `nil` leaves them unchanged.
    public var participants: [ParticipantDraft]?

    public init(rootRecordName: String? = nil, publicPermission: SharePermission? = nil, participants: [ParticipantDraft]? = nil) {
        self.rootRecordName = rootRecordName
        self.publicPermission = publicPermission
        self.participants = participants
    }

    /// Reads the sharing keys a record dictionary carried (`forRecord`, `publicPermission`, `participants`).
    public init(otherKeys: [String: JSONValue], path: String) throws(WireFormatError) {
        let object = try WireObject(.object(otherKeys), path: path)
        if let forRecord = try object.object("forRecord") {
            rootRecordName = try forRecord.requiredString("recordName")
        }
        if let permission = try object.string("publicPermission") {
            guard let parsed = SharePermission(rawValue: permission.uppercased()) else {
                throw WireFormatError(path: object.path("publicPermission"), message: "expected NONE, READ_ONLY or READ_WRITE, found \(permission)")
            }
            publicPermission = parsed
        }
        if let values = try object.array("participants") {
            var drafts: [ParticipantDraft] = []
            for (index, value) in values.enumerated() {
                let participant = try WireObject(value, path: "\(object.path("participants"))[\(index)]")
                let type = try participant.string("type").map { $0.uppercased() }
                if type == ParticipantType.owner.rawValue { continue }  // the owner is implied
                var lookup: ParticipantLookup?
                if let identity = try participant.object("userIdentity") {
                    if let name = try identity.string("userRecordName") {
                        lookup = .userRecordName(name)
                    } else if let info = try identity.object("lookupInfo") {
                        if let name = try info.string("userRecordName") {
                            lookup = .userRecordName(name)
                        } else if let email = try info.string("emailAddress") {
                            lookup = .emailAddress(email)
                        }
                    }
                }
                if lookup == nil, let name = try participant.string("userRecordName") { lookup = .userRecordName(name) }
                if lookup == nil, let email = try participant.string("emailAddress") { lookup = .emailAddress(email) }
                guard let lookup else {
                    throw WireFormatError(path: participant.path("userIdentity"), message: "needs lookupInfo.emailAddress or userRecordName")
                }
                var permission = SharePermission.readOnly
                if let name = try participant.string("permission") {
                    guard let parsed = SharePermission(rawValue: name.uppercased()), parsed != .none else {
                        throw WireFormatError(path: participant.path("permission"), message: "expected READ_ONLY or READ_WRITE, found \(name)")
                    }
                    permission = parsed
                }
                var status: ParticipantStatus?
                if let name = try participant.string("acceptanceStatus") {
                    guard let parsed = ParticipantStatus(wire: name) else {
                        throw WireFormatError(
                            path: participant.path("acceptanceStatus"), message: "expected INVITED, ACCEPTED or REMOVED, found \(name)")
                    }
                    status = parsed
                }
                drafts.append(ParticipantDraft(lookup: lookup, permission: permission, status: status))
            }
            participants = drafts
        }
    }
}

/// The body of `records/resolve` and `records/accept`.
public struct ShortGUIDRequest: Sendable, Hashable {
    public struct Entry: Sendable, Hashable {
        public var value: String
        public var shouldFetchRootRecord: Bool
        public var rootRecordDesiredKeys: [String]?

        public init(value: String, shouldFetchRootRecord: Bool = false, rootRecordDesiredKeys: [String]? = nil) {
            self.value = value
            self.shouldFetchRootRecord = shouldFetchRootRecord
            self.rootRecordDesiredKeys = rootRecordDesiredKeys
        }
    }

    public var entries: [Entry]

    public init(entries: [Entry]) {
        self.entries = entries
    }

    /// Reads `{shortGUIDs: [{value, shouldFetchRootRecord, rootRecordDesiredKeys}]}`; bare strings are accepted too.
    public init(wire object: WireObject) throws(WireFormatError) {
        guard let values = try object.array("shortGUIDs") else {
            throw WireFormatError(path: object.path("shortGUIDs"), message: "is required")
        }
        entries = []
        for (index, value) in values.enumerated() {
            if case .string(let guid) = value {
                entries.append(Entry(value: guid, shouldFetchRootRecord: false, rootRecordDesiredKeys: nil))
                continue
            }
            let entry = try WireObject(value, path: "\(object.path("shortGUIDs"))[\(index)]")
            entries.append(
                Entry(
                    value: try entry.requiredString("value"), shouldFetchRootRecord: try entry.bool("shouldFetchRootRecord") ?? false,
                    rootRecordDesiredKeys: try entry.stringArray("rootRecordDesiredKeys")
                )
            )
        }
    }
}
