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

        /// A participant as an answer shows it.
        init?(_ participant: ShareParticipant) {
            guard let identity = participant.userRecordName.map(Identity.userRecordName) ?? participant.emailAddress.map(Identity.emailAddress)
            else { return nil }
            self.init(identity: identity, permission: participant.permission, role: participant.type, acceptanceStatus: participant.acceptanceStatus)
            userRecordName = participant.userRecordName
            emailAddress = participant.emailAddress
        }

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

    /// A `cloudkit.share` record as every read path answers it.
    public init(_ record: ResponseRecord) {
        let fields = record.fieldValues
        recordID = RecordID(recordName: record.header.recordName, zoneID: record.header.zoneID)
        recordChangeTag = record.header.recordChangeTag.isEmpty ? nil : record.header.recordChangeTag
        if case .string(let text)? = fields["cloudkit.title"] { title = text }
        let members = record.share ?? ShareMembers(publicPermission: .none, participants: [])
        publicPermission = members.publicPermission
        participants = members.participants.compactMap(Participant.init)
        owner = members.owner.flatMap(Participant.init)
        currentUserParticipant = members.currentUserParticipant.flatMap(Participant.init)
        url = members.url.flatMap(URL.init(string:))
        shortGUID = record.header.shortGUID ?? members.shortGUID
    }

    /// The record dictionary a save sends: the title, the root, and the participants other than the owner.
    var draft: RecordDraft {
        var keys: [String: JSONValue] = ["publicPermission": .string(publicPermission.rawValue)]
        if let rootRecordName { keys["forRecord"] = ["recordName": .string(rootRecordName)] }
        keys["participants"] = .array(
            participants.filter { $0.role != .owner }.map { participant in
                let lookup: JSONValue =
                    switch participant.identity {
                    case .userRecordName(let name): ["userRecordName": .string(name)]
                    case .emailAddress(let email): ["emailAddress": .string(email)]
                    }
                return [
                    "permission": .string(participant.permission.rawValue), "type": .string(participant.role.rawValue),
                    "acceptanceStatus": .string(participant.acceptanceStatus.rawValue), "userIdentity": ["lookupInfo": lookup],
                ]
            })
        return RecordDraft(
            recordName: recordID.recordName, recordType: ShareRecord.recordType, recordChangeTag: recordChangeTag,
            fields: title.map { ["cloudkit.title": .some(.string($0))] } ?? [:], otherKeys: keys)
    }
}

extension CloudDatabase {
    /// Creates or updates a share (owner only). A stale change tag fails with `CONFLICT`.
    public func save(_ share: CloudShare) async throws(CloudError) -> CloudShare {
        let request = RecordsModifyRequest(
            operations: [RecordOperation(operationType: share.recordChangeTag == nil ? .create : .update, record: share.draft)],
            zoneID: share.recordID.zoneID)
        return try Self.share(from: try await send("records/modify", request, answer: RecordsResponse.self).records.first)
    }

    /// The share with this record ID, as the current user may see it.
    public func share(_ recordID: RecordID) async throws(CloudError) -> CloudShare? {
        let request = RecordsLookupRequest(records: [.init(recordName: recordID.recordName)], zoneID: recordID.zoneID)
        let item = try await send("records/lookup", request, answer: RecordsResponse.self).records.first
        if case .failed = item { return nil }
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

    private static func share(from item: RecordResult?) throws(CloudError) -> CloudShare {
        switch item {
        case .record(let record): return CloudShare(record)
        case .failed(_, let error, let serverRecord): throw CloudError(error, serverRecord: serverRecord)
        case .deleted, nil: throw CloudError(code: .invalidResponse, reason: "no share in the answer")
        }
    }
}
