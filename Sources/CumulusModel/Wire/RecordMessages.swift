/// A participant of a share as a response shows it.
public struct ShareParticipant: Sendable, Hashable {
    /// The participant's user; `nil` for one invited by email who has not accepted (a reader may meet one).
    public var userRecordName: String?
    /// Shown to the share's owner and to the participant themselves.
    public var emailAddress: String?
    public var permission: SharePermission
    public var type: ParticipantType
    public var acceptanceStatus: ParticipantStatus

    public init(
        userRecordName: String?, emailAddress: String? = nil, permission: SharePermission, type: ParticipantType,
        acceptanceStatus: ParticipantStatus
    ) {
        self.userRecordName = userRecordName
        self.emailAddress = emailAddress
        self.permission = permission
        self.type = type
        self.acceptanceStatus = acceptanceStatus
    }

    /// Reads a participant leniently: the user from `userIdentity` or its `lookupInfo`, CloudKit's defaults for the rest.
    public init?(wire value: JSONValue) {
        let identity = value["userIdentity"]
        userRecordName = identity?["userRecordName"]?.stringValue ?? identity?["lookupInfo"]?["userRecordName"]?.stringValue
        emailAddress = identity?["lookupInfo"]?["emailAddress"]?.stringValue
        guard userRecordName != nil || emailAddress != nil else { return nil }
        permission = value["permission"]?.stringValue.flatMap(SharePermission.init(rawValue:)) ?? .readOnly
        type = value["type"]?.stringValue.flatMap(ParticipantType.init(rawValue:)) ?? .user
        acceptanceStatus = value["acceptanceStatus"]?.stringValue.flatMap(ParticipantStatus.init(wire:)) ?? .invited
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("participantId", userRecordName)
        writer.key("userIdentity")
        writer.beginObject()
        writer.member("userRecordName", userRecordName)
        writer.key("lookupInfo")
        writer.beginObject()
        writer.member("userRecordName", userRecordName)
        writer.member("emailAddress", emailAddress)
        writer.endObject()
        writer.endObject()
        writer.key("permission")
        writer.string(permission.rawValue)
        writer.key("type")
        writer.string(type.rawValue)
        writer.key("acceptanceStatus")
        writer.string(acceptanceStatus.rawValue)
        writer.endObject()
    }
}

/// What a share record carries besides its fields, as a response shows it to its caller: who takes part, what anyone
/// with the link may do, and the link.
public struct ShareMembers: Sendable, Hashable {
    /// The share's short GUID, when the record's own header does not carry it.
    public var shortGUID: String?
    public var publicPermission: SharePermission
    /// The participants the caller may see.
    public var participants: [ShareParticipant]
    public var owner: ShareParticipant?
    /// The caller's own participation, if any.
    public var currentUserParticipant: ShareParticipant?
    /// The share's stable link (`CKShare.url`), written as `url` and as CKTool's `stableUrl`.
    public var url: String?

    public init(
        shortGUID: String? = nil, publicPermission: SharePermission, participants: [ShareParticipant], owner: ShareParticipant? = nil,
        currentUserParticipant: ShareParticipant? = nil, url: String? = nil
    ) {
        self.shortGUID = shortGUID
        self.publicPermission = publicPermission
        self.participants = participants
        self.owner = owner
        self.currentUserParticipant = currentUserParticipant
        self.url = url
    }

    /// The members' keys, written inside the record's dictionary after its system fields.
    public func write(to writer: inout JSONWriter) {
        writer.member("shortGUID", shortGUID)
        writer.key("publicPermission")
        writer.string(publicPermission.rawValue)
        writer.array("participants", participants) { writer, participant in participant.write(to: &writer) }
        if let owner {
            writer.key("owner")
            owner.write(to: &writer)
        }
        if let currentUserParticipant {
            writer.key("currentUserParticipant")
            currentUserParticipant.write(to: &writer)
        }
        // Not in the 2016 documents: the share's stable link (CKShare.url; CKTool's stableUrl).
        if let url {
            writer.key("url")
            writer.string(url)
            writer.key("stableUrl")
            writer.string(url)
        }
    }
}

/// A record as a response carries it: its system fields, its fields (as stored, spliced in unchanged, or as values),
/// the fields the client asked for, and for a share record, its members.
public struct ResponseRecord: Sendable {
    public var header: RecordHeader
    public var fields: RecordFieldsSource
    /// When set, only these fields are written; `[]` writes none.
    public var desiredKeys: Set<String>?
    public var share: ShareMembers?

    public init(header: RecordHeader, fields: RecordFieldsSource, desiredKeys: Set<String>? = nil, share: ShareMembers? = nil) {
        self.header = header
        self.fields = fields
        self.desiredKeys = desiredKeys
        self.share = share
    }

    /// The record's fields as values (read from a response, or parsed from stored bytes).
    public var fieldValues: [String: FieldValue] {
        switch fields {
        case .values(let values): values
        case .canonical(let json): (try? RecordFieldsCoding.parseCanonical(json)) ?? [:]
        }
    }

    public func write(to writer: inout JSONWriter, options: FieldWriteOptions) {
        writer.record(header: header, fields: fields, desiredKeys: desiredKeys, options: options) { writer in
            share?.write(to: &writer)
        }
    }
}

/// One element of a response's `records`: a record, a deleted record's tombstone, or the error of one operation.
///
/// Indirect: an answer holds hundreds of them, and a record's header is a dozen strings; boxed, an element is copied
/// by one reference count instead of a dozen.
public indirect enum RecordResult: Sendable {
    case record(ResponseRecord)
    /// `recordType` is written where the answer knows it (a feed's tombstones).
    case deleted(recordName: String, recordType: String?)
    /// The record's error; on `CONFLICT` and `EXISTS`, the server's record, for the client to merge.
    case failed(recordName: String, ItemError, serverRecord: ResponseRecord?)

    public var recordName: String {
        switch self {
        case .record(let record): record.header.recordName
        case .deleted(let recordName, _), .failed(let recordName, _, _): recordName
        }
    }

    public func write(to writer: inout JSONWriter, options: FieldWriteOptions) {
        switch self {
        case .record(let record):
            record.write(to: &writer, options: options)
        case .deleted(let recordName, let recordType):
            writer.beginObject()
            writer.key("recordName")
            writer.string(recordName)
            writer.member("recordType", recordType)
            writer.key("deleted")
            writer.bool(true)
            writer.endObject()
        case .failed(let recordName, let error, let serverRecord):
            writer.beginObject()
            writer.key("recordName")
            writer.string(recordName)
            error.write(to: &writer)
            if let serverRecord {
                // Not in Apple's documentation: the server's record on CONFLICT and EXISTS, so the client can merge
                // without a second round trip (CKError.serverRecordChanged carries it natively).
                writer.key("serverRecord")
                serverRecord.write(to: &writer, options: options)
            }
            writer.endObject()
        }
    }

    /// Reads an element of a `records` array straight from the response's bytes: the change feed's hot path.
    public static func read(scanning scanner: inout JSONScanner) throws -> RecordResult {
        var recordName: String?
        var recordType: String?
        var recordChangeTag: String?
        var deleted = false
        var zoneID: ZoneID?
        var fields: [String: FieldValue] = [:]
        var parent: String?
        var share: Reference?
        var created: RecordStamp?
        var modified: RecordStamp?
        var shortGUID: String?
        var errorMembers: [String: JSONValue] = [:]
        var serverRecord: ResponseRecord?
        var shareMembers: [String: JSONValue] = [:]
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            switch key {
            case "recordName": recordName = try scanner.readString()
            case "recordType": recordType = try scanner.readNull() ? nil : try scanner.readString()
            case "recordChangeTag": recordChangeTag = try scanner.readNull() ? nil : try scanner.readString()
            case "deleted": deleted = try scanner.readValue() == .bool(true)
            case "zoneID": zoneID = try ZoneID.read(scanning: &scanner, path: "record.zoneID")
            case "fields": try readFields(scanning: &scanner, into: &fields)
            case "parent": parent = try readRecordName(scanning: &scanner)
            case "share":
                let value = try scanner.readValue()
                share = value.isNull ? nil : try Reference(wire: value, path: "record.share")
            case "created": created = try readStamp(scanning: &scanner)
            case "modified": modified = try readStamp(scanning: &scanner)
            case "shortGUID": shortGUID = try scanner.readNull() ? nil : try scanner.readString()
            case "serverErrorCode", "reason", "uuid", "ckErrorCode": errorMembers[key] = try scanner.readValue()
            case "serverRecord":
                if try !scanner.readNull(), case .record(let record) = try read(scanning: &scanner) { serverRecord = record }
            case "publicPermission", "participants", "owner", "currentUserParticipant", "url", "stableUrl":
                shareMembers[key] = try scanner.readValue()
            default: try scanner.skipValue()
            }
        }
        guard let recordName else { throw WireFormatError(path: "record.recordName", message: "is required") }
        if !errorMembers.isEmpty, let error = try ItemError(wire: WireObject(.object(errorMembers), path: "record")) {
            return .failed(recordName: recordName, error, serverRecord: serverRecord)
        }
        if deleted { return .deleted(recordName: recordName, recordType: recordType) }
        guard let recordType else { throw WireFormatError(path: "record.recordType", message: "is required") }
        // A record read without stamps (not one this server writes) gets empty ones.
        let none = RecordStamp(timestamp: 0, userRecordName: "", deviceID: "")
        let header = RecordHeader(
            recordName: recordName, recordType: recordType, recordChangeTag: recordChangeTag ?? "", created: created ?? none,
            modified: modified ?? none, parent: parent, share: share, zoneID: zoneID ?? ZoneID(), shortGUID: shortGUID)
        return .record(ResponseRecord(header: header, fields: .values(fields), share: shareMembers.isEmpty ? nil : Self.shareMembers(shareMembers)))
    }

    private static func shareMembers(_ members: [String: JSONValue]) -> ShareMembers {
        ShareMembers(
            publicPermission: members["publicPermission"]?.stringValue.flatMap(SharePermission.init(rawValue:)) ?? .none,
            participants: (members["participants"]?.arrayValue ?? []).compactMap(ShareParticipant.init(wire:)),
            owner: members["owner"].flatMap(ShareParticipant.init(wire:)),
            currentUserParticipant: members["currentUserParticipant"].flatMap(ShareParticipant.init(wire:)),
            url: members["url"]?.stringValue ?? members["stableUrl"]?.stringValue)
    }

    private static func readFields(scanning scanner: inout JSONScanner, into fields: inout [String: FieldValue]) throws {
        guard try !scanner.readNull() else { return }
        // Most records have a handful of fields: room for them at once, not grown by doubling.
        fields.reserveCapacity(8)
        try scanner.beginObject()
        while let name = try scanner.nextKey() {
            if let value = try FieldValue.read(scanning: &scanner, path: "record.fields.\(name)") { fields[name] = value }
        }
    }

    /// The `recordName` of a `parent` or `share` dictionary.
    private static func readRecordName(scanning scanner: inout JSONScanner) throws -> String? {
        guard try !scanner.readNull() else { return nil }
        var recordName: String?
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            if key == "recordName", try !scanner.readNull() { recordName = try scanner.readString() } else { try scanner.skipValue() }
        }
        return recordName
    }

    private static func readStamp(scanning scanner: inout JSONScanner) throws -> RecordStamp? {
        guard try !scanner.readNull() else { return nil }
        var timestamp: Int64?
        var userRecordName = ""
        var deviceID = ""
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            switch (key, try scanner.peek()) {
            case ("timestamp", .number): timestamp = Int64(try scanner.readNumber())
            case ("userRecordName", .string): userRecordName = try scanner.readString()
            case ("deviceID", .string): deviceID = try scanner.readString()
            default: try scanner.skipValue()
            }
        }
        return timestamp.map { RecordStamp(timestamp: $0, userRecordName: userRecordName, deviceID: deviceID) }
    }

    /// Reads a `records` array member's elements.
    static func readArray(scanning scanner: inout JSONScanner) throws -> [RecordResult] {
        guard try !scanner.readNull() else { return [] }
        var results: [RecordResult] = []
        try scanner.beginArray()
        while try scanner.nextElement() { results.append(try read(scanning: &scanner)) }
        return results
    }
}

extension WireMessage {
    /// Reads a message scanned from its bytes by `read`, as ``init(wire:)``: any error the scan meets is a
    /// ``WireFormatError``.
    static func scanned(_ bytes: some Collection<UInt8>, _ read: (inout JSONScanner) throws -> Self) throws(WireFormatError) -> Self {
        do {
            return try JSONScanner.scan(bytes, read)
        } catch let error as WireFormatError {
            throw error
        } catch {
            throw WireFormatError(path: "", message: "\(error)")
        }
    }
}

/// A message read by scanning its bytes, no JSON tree: records' answers, which can be long. Read from an object, the
/// object is written out and scanned, so there is one reader.
public protocol ScannedWireMessage: WireMessage {}

extension ScannedWireMessage {
    public init(wire object: WireObject) throws(WireFormatError) {
        try self.init(wireBytes: JSONValue.object(object.members).jsonBytes)
    }
}

/// The answer of `records/lookup`, `records/modify` and `records/query`: one result per record, in the request's order
/// (a query's in its sort order, with a marker when more match).
public struct RecordsResponse: ScannedWireMessage {
    public var records: [RecordResult]
    /// Where the next page of a query starts.
    public var continuationMarker: String?
    /// How the records' fields are written (numbers as strings, assets' download URLs); not read.
    public var options: FieldWriteOptions

    public init(records: [RecordResult], continuationMarker: String? = nil, options: FieldWriteOptions = .init()) {
        self.records = records
        self.continuationMarker = continuationMarker
        self.options = options
    }

    /// Reads the answer straight from its bytes, without a JSON tree.
    public init(wireBytes bytes: some Collection<UInt8>) throws(WireFormatError) {
        self = try Self.scanned(bytes) { scanner in
            var response = RecordsResponse(records: [])
            try scanner.beginObject()
            while let key = try scanner.nextKey() {
                switch key {
                case "records": response.records = try RecordResult.readArray(scanning: &scanner)
                case "continuationMarker": response.continuationMarker = try scanner.readNull() ? nil : try scanner.readString()
                default: try scanner.skipValue()
                }
            }
            return response
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("records", records) { writer, record in record.write(to: &writer, options: options) }
        writer.member("continuationMarker", continuationMarker)
        writer.endObject()
    }
}

/// The answer of `changes/zone`: for each zone asked for, a page of its changes since the token, or its error.
public struct ZoneChangesResponse: ScannedWireMessage {
    /// One zone's answer.
    public enum Zone: Sendable {
        /// Changed records and tombstones in commit order, the token after them, and whether more follow; on the page
        /// that ends the feed, Cumulus adds the digest of the zone as the caller sees it at the token (`zoneDigest`, a
        /// key Apple's clients ignore).
        case page(zoneID: ZoneID, syncToken: String, moreComing: Bool, records: [RecordResult], zoneDigest: ZoneDigest? = nil)
        case failed(ZoneID, ItemError)
    }

    public var zones: [Zone]
    /// How the records' fields are written; not read.
    public var options: FieldWriteOptions

    public init(zones: [Zone], options: FieldWriteOptions = .init()) {
        self.zones = zones
        self.options = options
    }

    /// Reads the answer straight from its bytes: an initial sync reads hundreds of pages of hundreds of records.
    public init(wireBytes bytes: some Collection<UInt8>) throws(WireFormatError) {
        self = try Self.scanned(bytes) { scanner in
            var zones: [Zone] = []
            try scanner.beginObject()
            while let key = try scanner.nextKey() {
                guard key == "zones", try !scanner.readNull() else {
                    try scanner.skipValue()
                    continue
                }
                try scanner.beginArray()
                while try scanner.nextElement() { zones.append(try Self.readZone(scanning: &scanner)) }
            }
            return ZoneChangesResponse(zones: zones)
        }
    }

    private static func readZone(scanning scanner: inout JSONScanner) throws -> Zone {
        var zoneID: ZoneID?
        var syncToken: String?
        var moreComing = false
        var records: [RecordResult] = []
        var digest: ZoneDigest?
        var errorMembers: [String: JSONValue] = [:]
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            switch key {
            case "zoneID": zoneID = try ZoneID(wire: WireObject(try scanner.readValue(), path: "zones.zoneID"))
            case "records": records = try RecordResult.readArray(scanning: &scanner)
            case "syncToken": syncToken = try scanner.readNull() ? nil : try scanner.readString()
            case "moreComing": moreComing = try scanner.readValue() == .bool(true)
            case "zoneDigest":
                digest = try scanner.readNull() ? nil : try ZoneDigest(wire: WireObject(try scanner.readValue(), path: "zones.zoneDigest"))
            case "serverErrorCode", "reason", "uuid", "ckErrorCode": errorMembers[key] = try scanner.readValue()
            default: try scanner.skipValue()
            }
        }
        let zone = zoneID ?? ZoneID()
        if !errorMembers.isEmpty, let error = try ItemError(wire: WireObject(.object(errorMembers), path: "zones")) {
            return .failed(zone, error)
        }
        guard let syncToken else { throw WireFormatError(path: "zones.syncToken", message: "is required") }
        return .page(zoneID: zone, syncToken: syncToken, moreComing: moreComing, records: records, zoneDigest: digest)
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("zones", zones) { writer, zone in
            writer.beginObject()
            switch zone {
            case .page(let zoneID, let syncToken, let moreComing, let records, let digest):
                writer.key("zoneID")
                writer.zoneID(zoneID)
                writer.key("syncToken")
                writer.string(syncToken)
                writer.key("moreComing")
                writer.bool(moreComing)
                writer.array("records", records) { writer, record in record.write(to: &writer, options: options) }
                if let digest {
                    writer.key("zoneDigest")
                    writer.zoneDigest(digest)
                }
            case .failed(let zoneID, let error):
                writer.key("zoneID")
                writer.zoneID(zoneID)
                error.write(to: &writer)
            }
            writer.endObject()
        }
        writer.endObject()
    }
}

/// The answer of `records/changes`, the older single-zone feed: one page at the top level.
public struct RecordChangesResponse: ScannedWireMessage {
    public var records: [RecordResult]
    public var syncToken: String
    public var moreComing: Bool
    /// On the page that ends the feed, the zone's digest as the caller sees it (`zoneDigest`, a Cumulus key).
    public var zoneDigest: ZoneDigest?
    /// How the records' fields are written; not read.
    public var options: FieldWriteOptions

    public init(
        records: [RecordResult], syncToken: String, moreComing: Bool, zoneDigest: ZoneDigest? = nil, options: FieldWriteOptions = .init()
    ) {
        self.records = records
        self.syncToken = syncToken
        self.moreComing = moreComing
        self.zoneDigest = zoneDigest
        self.options = options
    }

    public init(wireBytes bytes: some Collection<UInt8>) throws(WireFormatError) {
        self = try Self.scanned(bytes) { scanner in
            var records: [RecordResult] = []
            var syncToken: String?
            var moreComing = false
            var digest: ZoneDigest?
            try scanner.beginObject()
            while let key = try scanner.nextKey() {
                switch key {
                case "records": records = try RecordResult.readArray(scanning: &scanner)
                case "syncToken": syncToken = try scanner.readNull() ? nil : try scanner.readString()
                case "moreComing": moreComing = try scanner.readValue() == .bool(true)
                case "zoneDigest":
                    digest = try scanner.readNull() ? nil : try ZoneDigest(wire: WireObject(try scanner.readValue(), path: "zoneDigest"))
                default: try scanner.skipValue()
                }
            }
            guard let syncToken else { throw WireFormatError(path: "syncToken", message: "is required") }
            return RecordChangesResponse(records: records, syncToken: syncToken, moreComing: moreComing, zoneDigest: digest)
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("records", records) { writer, record in record.write(to: &writer, options: options) }
        writer.key("syncToken")
        writer.string(syncToken)
        writer.key("moreComing")
        writer.bool(moreComing)
        writer.key("reverse")
        writer.bool(false)
        if let zoneDigest {
            writer.key("zoneDigest")
            writer.zoneDigest(zoneDigest)
        }
        writer.endObject()
    }
}
