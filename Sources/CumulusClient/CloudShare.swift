public import CumulusModel
public import Foundation

/// A live share, shaped like CKShare: of a root record and everything under it, or of a whole zone.
///
/// ```swift
/// var share = CloudShare(rootRecord: group.recordID, title: "Weekend trip")
/// share.addParticipant(.emailAddress("bob@example.com"), permission: .readWrite)
/// share = try await database.save(share)
/// print(share.url)   // send this link; Bob accepts it with `acceptShare(_:)`
/// ```
public struct CloudShare: Sendable, Hashable {
    /// Someone on a share.
    public struct Participant: Sendable, Hashable {
        /// How a participant is named: a user record name, or the email an owner invites them by.
        public enum Identity: Sendable, Hashable {
            case userRecordName(String)
            case emailAddress(String)
        }

        public var identity: Identity
        /// The participant's user record name, once known.
        public var userRecordName: String?
        public var emailAddress: String?
        public var permission: SharePermission
        public var role: ParticipantType
        public var acceptanceStatus: ParticipantStatus

        public init(identity: Identity, permission: SharePermission, role: ParticipantType = .user, acceptanceStatus: ParticipantStatus = .invited) {
            self.identity = identity
            self.permission = permission
            self.role = role
            self.acceptanceStatus = acceptanceStatus
            switch identity {
            case .userRecordName(let name): userRecordName = name
            case .emailAddress(let email): emailAddress = email
            }
        }

        func matches(_ identity: Identity) -> Bool {
            switch identity {
            case .userRecordName(let name): userRecordName == name
            case .emailAddress(let email): emailAddress?.lowercased() == email.lowercased()
            }
        }
    }

    /// The share record's ID: its zone is the shared zone.
    public var recordID: RecordID
    /// The server's change tag; `nil` for a share never saved.
    public var recordChangeTag: String?
    /// The root of a new hierarchy share. Share records read back do not name their root (the root names its share,
    /// as in CloudKit), so this is `nil` for a share read from the server: saving it leaves the root as it is.
    public var rootRecordName: String?
    /// `cloudkit.title`, shown on the share page and to invitees.
    public var title: String?
    /// What anyone with the link may do; `.none` for a share with invited participants only.
    public var publicPermission: SharePermission
    /// Everyone the current user may see on the share, the owner included.
    public var participants: [Participant]
    public var owner: Participant?
    public var currentUserParticipant: Participant?
    /// The share's link, once saved.
    public var url: URL?
    public var shortGUID: String?

    /// A new share of a root record and everything under it.
    public init(rootRecord: RecordID, title: String? = nil, publicPermission: SharePermission = .none) {
        self.recordID = RecordID(recordName: UUID().uuidString, zoneID: rootRecord.zoneID)
        self.rootRecordName = rootRecord.recordName
        self.title = title
        self.publicPermission = publicPermission
        self.participants = []
    }

    /// A new share of a whole zone (its record is `cloudkit.zoneshare`).
    public init(zoneID: ZoneID, title: String? = nil, publicPermission: SharePermission = .none) {
        self.recordID = RecordID(recordName: ShareRecord.zoneWideRecordName, zoneID: zoneID)
        self.title = title
        self.publicPermission = publicPermission
        self.participants = []
    }

    /// Adds a participant, or changes the permission of one already there (as CKShare does).
    public mutating func addParticipant(_ identity: Participant.Identity, permission: SharePermission) {
        if let index = participants.firstIndex(where: { $0.matches(identity) }) {
            participants[index].permission = permission
        } else {
            participants.append(Participant(identity: identity, permission: permission))
        }
    }

    /// Removes a participant; saving the share ends their access.
    public mutating func removeParticipant(_ identity: Participant.Identity) {
        participants.removeAll { $0.role != .owner && $0.matches(identity) }
    }

    /// Reads a `cloudkit.share` record as every read path answers it.
    public init(wire json: JSONValue) throws {
        let record = try CloudRecord(wire: json)
        recordID = record.recordID
        recordChangeTag = record.recordChangeTag
        if case .string(let text)? = record.fields["cloudkit.title"] { title = text }
        rootRecordName = json["forRecord"]?["recordName"]?.stringValue ?? json["rootRecordName"]?.stringValue
        publicPermission = json["publicPermission"]?.stringValue.flatMap(SharePermission.init(rawValue:)) ?? .none
        participants = (json["participants"]?.arrayValue ?? []).compactMap(Self.participant)
        owner = json["owner"].flatMap(Self.participant)
        currentUserParticipant = json["currentUserParticipant"].flatMap(Self.participant)
        url = json["url"]?.stringValue.flatMap(URL.init(string:))
        shortGUID = json["shortGUID"]?.stringValue
    }

    private static func participant(_ json: JSONValue) -> Participant? {
        let identity = json["userIdentity"]
        let name = identity?["userRecordName"]?.stringValue ?? identity?["lookupInfo"]?["userRecordName"]?.stringValue
        let email = identity?["lookupInfo"]?["emailAddress"]?.stringValue
        guard let lookup = name.map(Participant.Identity.userRecordName) ?? email.map(Participant.Identity.emailAddress) else { return nil }
        var participant = Participant(
            identity: lookup, permission: json["permission"]?.stringValue.flatMap(SharePermission.init(rawValue:)) ?? .readOnly,
            role: json["type"]?.stringValue.flatMap(ParticipantType.init(rawValue:)) ?? .user,
            acceptanceStatus: json["acceptanceStatus"]?.stringValue.flatMap(ParticipantStatus.init(wire:)) ?? .invited)
        participant.userRecordName = name
        participant.emailAddress = email
        return participant
    }

    /// The record dictionary of a `records/modify` operation.
    func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("recordName")
        writer.string(recordID.recordName)
        writer.key("recordType")
        writer.string(ShareRecord.recordType)
        if let recordChangeTag {
            writer.key("recordChangeTag")
            writer.string(recordChangeTag)
        }
        writer.key("fields")
        writer.fields(title.map { ["cloudkit.title": .string($0)] } ?? [:])
        if let rootRecordName {
            writer.key("forRecord")
            writer.recordNameObject(rootRecordName)
        }
        writer.key("publicPermission")
        writer.string(publicPermission.rawValue)
        writer.key("participants")
        writer.beginArray()
        for participant in participants where participant.role != .owner {
            writer.beginObject()
            writer.key("permission")
            writer.string(participant.permission.rawValue)
            writer.key("type")
            writer.string(participant.role.rawValue)
            writer.key("acceptanceStatus")
            writer.string(participant.acceptanceStatus.rawValue)
            writer.key("userIdentity")
            writer.beginObject()
            writer.key("lookupInfo")
            writer.beginObject()
            switch participant.identity {
            case .userRecordName(let name):
                writer.key("userRecordName")
                writer.string(name)
            case .emailAddress(let email):
                writer.key("emailAddress")
                writer.string(email)
            }
            writer.endObject()
            writer.endObject()
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
    }
}

extension CloudDatabase {
    /// Creates or updates a share (owner only). A stale change tag fails with `CONFLICT`.
    public func save(_ share: CloudShare) async throws(CloudError) -> CloudShare {
        let json = try await post("records/modify") { writer in
            writer.key("zoneID")
            writer.zoneID(share.recordID.zoneID)
            writer.key("operations")
            writer.beginArray()
            writer.beginObject()
            writer.key("operationType")
            writer.string(share.recordChangeTag == nil ? "create" : "update")
            writer.key("record")
            share.write(to: &writer)
            writer.endObject()
            writer.endArray()
        }
        return try Self.share(from: json["records"]?[0])
    }

    /// The share with this record ID, as the current user may see it.
    public func share(_ recordID: RecordID) async throws(CloudError) -> CloudShare? {
        let json = try await post("records/lookup") { writer in
            writer.key("zoneID")
            writer.zoneID(recordID.zoneID)
            writer.key("records")
            writer.beginArray()
            writer.beginObject()
            writer.key("recordName")
            writer.string(recordID.recordName)
            writer.endObject()
            writer.endArray()
        }
        guard let item = json["records"]?[0], item["serverErrorCode"] == nil else { return nil }
        return try Self.share(from: item)
    }

    /// The share a root record heads, if it is shared: the root names its share, as in CloudKit.
    public func share(ofRoot recordID: RecordID) async throws(CloudError) -> CloudShare? {
        guard let root = try await records(named: [recordID.recordName], in: recordID.zoneID)[recordID.recordName], let name = root.share else {
            return nil
        }
        return try await share(RecordID(recordName: name, zoneID: recordID.zoneID))
    }

    /// Stops sharing (the owner, in the private database) or leaves the share (a participant, in the shared database):
    /// either way the share record is deleted from this database's point of view.
    public func delete(_ share: CloudShare) async throws(CloudError) {
        let result = try await modifyRecords(saving: [], deleting: [share.recordID], zoneID: share.recordID.zoneID)
        if let error = result.failedDeletes.values.first { throw error }
    }

    /// Accepts a share by its URL or short GUID: it appears in the user's shared database.
    @discardableResult
    public func acceptShare(_ urlOrShortGUID: String) async throws(CloudError) -> ShareMetadata {
        try await shareMetadata(Self.shortGUID(urlOrShortGUID), accept: true)
    }

    /// What a share link leads to, by its URL or short GUID, without accepting it.
    public func shareMetadata(for urlOrShortGUID: String) async throws(CloudError) -> ShareMetadata {
        try await shareMetadata(Self.shortGUID(urlOrShortGUID))
    }

    static func shortGUID(_ urlOrShortGUID: String) -> String {
        guard let url = URL(string: urlOrShortGUID), url.scheme != nil else { return urlOrShortGUID }
        return url.lastPathComponent
    }

    private static func share(from item: JSONValue?) throws(CloudError) -> CloudShare {
        guard let item else { throw CloudError(code: .invalidResponse, reason: "no share in the answer") }
        if item["serverErrorCode"] != nil { throw CloudError.read(item, status: 200) }
        do {
            return try CloudShare(wire: item)
        } catch {
            throw CloudError(code: .invalidResponse, reason: "\(error)")
        }
    }
}
