/// Who owns a share, as its link shows them: `{userRecordName?, nameComponents: {givenName}?}`.
public struct OwnerIdentity: Sendable, Hashable {
    /// `nil` where the answer does not name the owner's user (the share page's preview).
    public var userRecordName: String?
    public var name: String?

    public init(userRecordName: String?, name: String?) {
        self.userRecordName = userRecordName
        self.name = name
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        userRecordName = try object.string("userRecordName")
        name = try object.object("nameComponents")?.string("givenName")
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("userRecordName", userRecordName)
        if let name {
            writer.key("nameComponents")
            writer.beginObject()
            writer.member("givenName", name)
            writer.endObject()
        }
        writer.endObject()
    }
}

/// What a share's link leads to, as `records/resolve` and `records/accept` answer it: where the share lives, its root,
/// its share record as the caller may see it, its owner, and the caller's participation.
public struct ShareLinkMetadata: Sendable {
    public var containerIdentifier: String
    public var environment: String
    /// `PRIVATE` for the share's owner, `SHARED` for anyone else.
    public var databaseScope: String
    public var zoneID: ZoneID
    public var shortGUID: String
    public var rootRecordName: String?
    /// The root record, when the request asked for it (`shouldFetchRootRecord`).
    public var rootRecord: ResponseRecord?
    public var share: ResponseRecord?
    public var owner: OwnerIdentity
    public var participantPermission: SharePermission
    public var participantStatus: ParticipantStatus
    public var participantType: ParticipantType
    /// The share's page, for people without the app.
    public var webpageURL: String

    public init(
        containerIdentifier: String, environment: String, databaseScope: String, zoneID: ZoneID, shortGUID: String, rootRecordName: String?,
        rootRecord: ResponseRecord?, share: ResponseRecord?, owner: OwnerIdentity, participantPermission: SharePermission,
        participantStatus: ParticipantStatus, participantType: ParticipantType, webpageURL: String
    ) {
        self.containerIdentifier = containerIdentifier
        self.environment = environment
        self.databaseScope = databaseScope
        self.zoneID = zoneID
        self.shortGUID = shortGUID
        self.rootRecordName = rootRecordName
        self.rootRecord = rootRecord
        self.share = share
        self.owner = owner
        self.participantPermission = participantPermission
        self.participantStatus = participantStatus
        self.participantType = participantType
        self.webpageURL = webpageURL
    }
}

/// The answer of `records/resolve` and `records/accept`: `{"results": [...]}`.
public struct ShareLinksResponse: WireMessage {
    /// One result, in the request's order.
    public enum Result: Sendable {
        case resolved(ShareLinkMetadata)
        case failed(shortGUID: String, ItemError)
    }

    public var results: [Result]
    /// How the root records' fields are written (their assets' download URLs); not read.
    public var options: FieldWriteOptions

    public init(results: [Result], options: FieldWriteOptions = .init()) {
        self.results = results
        self.options = options
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        results = try object.objects("results") { object throws(WireFormatError) in try Self.result(object) }
        options = .init()
    }

    private static func result(_ object: WireObject) throws(WireFormatError) -> Result {
        let shortGUID = try object.requiredString("shortGUID")
        if let error = try ItemError(wire: object) { return .failed(shortGUID: shortGUID, error) }
        guard let zoneID = try object.object("zoneID") else { throw WireFormatError(path: object.path("zoneID"), message: "is required") }
        func record(_ key: String) throws(WireFormatError) -> ResponseRecord? {
            guard let value = object[key] else { return nil }
            let read: RecordResult
            do {
                read = try JSONScanner.scan(value.jsonBytes) { try RecordResult.read(scanning: &$0) }
            } catch {
                throw WireFormatError(path: object.path(key), message: "\(error)")
            }
            guard case .record(let record) = read else { throw WireFormatError(path: object.path(key), message: "is not a record") }
            return record
        }
        func value<Value>(_ key: String, _ make: (String) -> Value?) throws(WireFormatError) -> Value {
            let text = try object.requiredString(key)
            guard let value = make(text) else { throw WireFormatError(path: object.path(key), message: "unknown value \(text)") }
            return value
        }
        return .resolved(
            ShareLinkMetadata(
                containerIdentifier: try object.requiredString("containerIdentifier"), environment: try object.requiredString("environment"),
                databaseScope: try object.requiredString("databaseScope"), zoneID: try ZoneID(wire: zoneID), shortGUID: shortGUID,
                rootRecordName: try object.string("rootRecordName"), rootRecord: try record("rootRecord"), share: try record("share"),
                owner: try object.object("ownerIdentity").map { object throws(WireFormatError) in try OwnerIdentity(wire: object) }
                    ?? OwnerIdentity(userRecordName: nil, name: nil),
                participantPermission: try value("participantPermission", SharePermission.init(rawValue:)),
                participantStatus: try value("participantStatus", ParticipantStatus.init(wire:)),
                participantType: try value("participantType", ParticipantType.init(rawValue:)),
                webpageURL: try object.requiredString("webpageURL")))
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("results", results) { writer, result in
            writer.beginObject()
            switch result {
            case .failed(let shortGUID, let error):
                writer.member("shortGUID", shortGUID)
                error.write(to: &writer)
            case .resolved(let link):
                writer.member("containerIdentifier", link.containerIdentifier)
                writer.member("environment", link.environment)
                writer.member("databaseScope", link.databaseScope)
                writer.member("zoneID", link.zoneID)
                writer.member("shortGUID", link.shortGUID)
                writer.member("rootRecordName", link.rootRecordName)
                if let root = link.rootRecord {
                    writer.key("rootRecord")
                    root.write(to: &writer, options: options)
                }
                if let share = link.share {
                    writer.key("share")
                    share.write(to: &writer, options: .init())
                }
                writer.key("ownerIdentity")
                link.owner.write(to: &writer)
                writer.member("participantPermission", link.participantPermission.rawValue)
                writer.member("participantStatus", link.participantStatus.rawValue)
                writer.member("participantType", link.participantType.rawValue)
                writer.member("webpageURL", link.webpageURL)
            }
            writer.endObject()
        }
        writer.endObject()
    }
}

extension ShortGUIDRequest: WireMessage {
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("shortGUIDs", entries) { writer, entry in
            writer.beginObject()
            writer.member("value", entry.value)
            if entry.shouldFetchRootRecord { writer.member("shouldFetchRootRecord", true) }
            writer.member("rootRecordDesiredKeys", strings: entry.rootRecordDesiredKeys)
            writer.endObject()
        }
        writer.endObject()
    }
}
