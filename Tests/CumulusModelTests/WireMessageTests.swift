import CumulusModel
import Testing

/// Every wire message type, read and written by the same type: each sample survives a round trip, and a recorded
/// answer (as CloudKit and `docs/API.md` show it) is written back byte for byte.
@Suite("Wire messages", .timeLimit(.minutes(10)))
struct WireMessageTests {
    static let lists = ZoneID(zoneName: "Lists", ownerRecordName: "_4a1b")
    static let error = ItemError(code: .zoneNotFound, reason: "zone Gone does not exist", uuid: "0b6c5a3e-4b1d-4c8e-9a7f-2d1e0f3c4b5a")

    /// Samples of each message, covering every case of its results.
    static let zones = ZonesResponse(zones: [
        .zone(ZoneInfo(zoneID: ZoneID(), syncToken: "AAAA")),
        .zone(ZoneInfo(zoneID: lists)),
        .deleted(ZoneID(zoneName: "Old", ownerRecordName: "_4a1b")),
        .failed(ZoneID(zoneName: "Gone"), error),
    ])
    static let changes = DatabaseChangesResponse(
        zones: [.zone(ZoneInfo(zoneID: lists, syncToken: "BBBB")), .deleted(ZoneID(zoneName: "Old", ownerRecordName: "_4a1b"))],
        syncToken: "CCCC", moreComing: true)

    func roundTrip<Message: WireMessage & Equatable>(_ message: Message) throws {
        let read = try Message(wireBytes: message.wireBytes)
        #expect(read == message, "\(String(decoding: message.wireBytes, as: UTF8.self))")
    }

    @Test func everySampleSurvivesARoundTrip() throws {
        try roundTrip(Self.zones)
        try roundTrip(Self.changes)
        try roundTrip(ZonesModifyRequest(operations: [ZoneOperation(operationType: .create, zoneID: Self.lists)]))
        try roundTrip(ZonesLookupRequest(zones: [Self.lists, ZoneID()]))
        try roundTrip(DatabaseChangesRequest(syncToken: "CCCC", resultsLimit: 10))
        try roundTrip(DatabaseChangesRequest(syncToken: nil))
        let zone = Subscription(subscriptionID: "lists", kind: .zone, zoneID: Self.lists, firesOnce: true)
        let query = try Subscription(
            wire: WireObject(
                try JSONValue(
                    parsing:
                        #"{"subscriptionID":"drives","subscriptionType":"query","query":{"recordType":"Drive"},"firesOn":["create"],"notificationInfo":{"alertBody":"New drive"}}"#
                ), path: ""))
        try roundTrip(
            SubscriptionsResponse(subscriptions: [
                .subscription(zone), .subscription(query), .deleted(subscriptionID: "old"), .failed(subscriptionID: "gone", Self.error),
            ]))
        try roundTrip(
            SubscriptionsModifyRequest(operations: [
                .init(.create, zone), .init(.update, query), .init(.delete, Subscription(subscriptionID: "old", kind: .zone)),
            ]))
        try roundTrip(SubscriptionsLookupRequest(subscriptionIDs: ["lists", "drives"]))
        try roundTrip(
            PushTokenResponse(apnsEnvironment: "development", apnsToken: "t0k", webcourierURL: "https://example.com/courier/1/c/development/t0k"))
        try roundTrip(PushTokenRegisterRequest(apnsToken: "t0k", apnsEnvironment: "production"))
        try roundTrip(Self.modify)
        let uploaded = UploadedAsset(Asset(fileChecksum: "c", size: 3, referenceChecksum: "c", receipt: "rc"))
        try roundTrip(AssetUploadRequest(zoneID: Self.lists, tokens: [AssetUploadToken(recordName: nil, fieldName: "photo")]))
        try roundTrip(AssetUploadResponse(tokens: [.init(recordName: "r", fieldName: "photo", url: "https://example.com/assets/1/u")]))
        try roundTrip(AssetUploadedResponse(singleFile: uploaded))
        try roundTrip(AssetRereferenceRequest(zoneID: nil, assets: [.init(recordName: "r", fieldName: "photo")]))
        try roundTrip(
            DriveLinksRequest(drives: [
                SharedDrive(
                    startTime: 1_700_000_000_000, duration: 60, distance: 1000, averageSpeed: 16, maxSpeed: 20, points: [DrivePoint(lat: 1, lon: 2)],
                    customName: nil)
            ]))
        try roundTrip(RecordsLinkRequest(records: [RecordDraft(recordName: "a", recordType: "Item", fields: ["n": .string("x")], parent: .set("p"))]))
        try roundTrip(AssetRereferenceResponse(assets: [.init(recordName: "r", fieldName: "photo", value: uploaded)]))
        try roundTrip(RecordsLookupRequest(records: [.init(recordName: "a"), .init(recordName: "b", desiredKeys: ["name"])], zoneID: Self.lists))
        try roundTrip(Self.query)
        try roundTrip(
            ZoneChangesRequest(
                zones: [
                    ZoneChangesEntry(zoneID: Self.lists, syncToken: "T", resultsLimit: 50, desiredKeys: ["name"], desiredRecordTypes: ["Drive"]),
                    ZoneChangesEntry(zoneID: ZoneID()),
                ], numbersAsStrings: true))
    }

    /// A batch with every kind of operation and record dictionary: fields set and cleared, a parent set and cleared,
    /// a short GUID asked for, a share's own keys.
    static let modify = RecordsModifyRequest(
        operations: [
            RecordOperation(
                operationType: .create,
                record: RecordDraft(
                    recordName: "drive-1", recordType: "Drive", fields: ["distance": .double(12.5), "name": .string("Commute"), "note": nil],
                    parent: .set("car-1"), createShortGUID: true)),
            RecordOperation(
                operationType: .update, record: RecordDraft(recordName: "drive-2", recordType: "Drive", recordChangeTag: "2a", parent: .clear),
                desiredKeys: []),
            RecordOperation(operationType: .forceDelete, record: RecordDraft(recordName: "old")),
            RecordOperation(
                operationType: .create,
                record: RecordDraft(
                    recordName: "share-1", recordType: "cloudkit.share",
                    otherKeys: ["publicPermission": "READ_ONLY", "forRecord": ["recordName": "car-1"]])),
        ], zoneID: lists, atomic: true, desiredKeys: ["name"], numbersAsStrings: true)

    static let query = RecordsQueryRequest(
        recordType: "Drive",
        filters: [
            QueryFilter(comparator: .greaterThan, field: .field("distance"), value: .double(10)),
            QueryFilter(comparator: .equals, field: .system(.recordName), value: .string("drive-1")),
            QueryFilter(comparator: .near, field: .field("at"), value: .location(Location(latitude: 51.5, longitude: -0.1)), distance: 500),
        ],
        sorts: [
            QuerySort(field: .field("distance"), ascending: false),
            QuerySort(field: .field("at"), relativeLocation: Location(latitude: 51.5, longitude: -0.1)),
        ], zoneID: lists, zoneWide: true, resultsLimit: 20, continuationMarker: "M1", desiredKeys: ["name"], numbersAsStrings: true)

    /// Answers as the server writes them, member order included: what a recorded answer holds is written back exactly.
    @Test(arguments: [
        #"{"zones":[{"zoneID":{"zoneName":"_defaultZone","zoneType":"DEFAULT_ZONE"},"syncToken":"AAAA","atomic":false},{"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"atomic":true}]}"#,
        #"{"zones":[{"zoneID":{"zoneName":"Old","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"deleted":true}]}"#,
        #"{"zones":[{"zoneID":{"zoneName":"Gone","zoneType":"REGULAR_CUSTOM_ZONE"},"reason":"zone Gone does not exist","serverErrorCode":"ZONE_NOT_FOUND","uuid":"0b6c5a3e-4b1d-4c8e-9a7f-2d1e0f3c4b5a"}]}"#,
    ])
    func recordedZoneAnswersAreWrittenBackExactly(_ recorded: String) throws {
        let message = try ZonesResponse(wireBytes: Array(recorded.utf8))
        #expect(String(decoding: message.wireBytes, as: UTF8.self) == recorded)
    }

    /// Record answers as the server writes them, every kind of element: a record with fields and a parent, a share
    /// record with its members, a shared root, a conflict with the server's record, a record not found, a tombstone;
    /// a feed page with a zone's error; the older feed. Each is read and written back byte for byte.
    @Test func recordedRecordAnswersAreWrittenBackExactly() throws {
        let records =
            #"{"records":[{"recordName":"drive-1","recordType":"Drive","recordChangeTag":"2a","fields":{"distance":{"value":12.5,"type":"DOUBLE"},"name":{"value":"Commute","type":"STRING"}},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"parent":{"recordName":"car-1"}},{"recordName":"share-1","recordType":"cloudkit.share","recordChangeTag":"3b","fields":{"cloudkit.title":{"value":"Trips","type":"STRING"}},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"shortGUID":"0Abc","publicPermission":"NONE","participants":[{"participantId":"_4a1b","userIdentity":{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b","emailAddress":"alice@example.com"}},"permission":"READ_WRITE","type":"OWNER","acceptanceStatus":"ACCEPTED"},{"participantId":"_9c2d","userIdentity":{"userRecordName":"_9c2d","lookupInfo":{"userRecordName":"_9c2d"}},"permission":"READ_ONLY","type":"USER","acceptanceStatus":"INVITED"}],"owner":{"participantId":"_4a1b","userIdentity":{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b","emailAddress":"alice@example.com"}},"permission":"READ_WRITE","type":"OWNER","acceptanceStatus":"ACCEPTED"},"currentUserParticipant":{"participantId":"_4a1b","userIdentity":{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b","emailAddress":"alice@example.com"}},"permission":"READ_WRITE","type":"OWNER","acceptanceStatus":"ACCEPTED"},"url":"https://example.com/share/0Abc","stableUrl":"https://example.com/share/0Abc"},{"recordName":"car-1","recordType":"Car","recordChangeTag":"4c","fields":{},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"share":{"recordName":"share-1","action":"NONE"}},{"recordName":"drive-2","reason":"record drive-2 changed since tag 1a","serverErrorCode":"CONFLICT","uuid":"u-1","serverRecord":{"recordName":"drive-2","recordType":"Drive","recordChangeTag":"2a","fields":{"distance":{"value":12.5,"type":"DOUBLE"},"name":{"value":"Commute","type":"STRING"}},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"parent":{"recordName":"car-1"}}},{"recordName":"gone","reason":"record gone does not exist","serverErrorCode":"NOT_FOUND","uuid":"u-2"},{"recordName":"old","deleted":true}],"continuationMarker":"M1"}"#
        #expect(String(decoding: try RecordsResponse(wireBytes: Array(records.utf8)).wireBytes, as: UTF8.self) == records)
        let zoneChanges =
            #"{"zones":[{"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"syncToken":"T9","moreComing":true,"records":[{"recordName":"drive-1","recordType":"Drive","recordChangeTag":"2a","fields":{"distance":{"value":12.5,"type":"DOUBLE"},"name":{"value":"Commute","type":"STRING"}},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"parent":{"recordName":"car-1"}},{"recordName":"old","recordType":"Drive","deleted":true}]},{"zoneID":{"zoneName":"Gone","zoneType":"REGULAR_CUSTOM_ZONE"},"reason":"zone Gone does not exist","serverErrorCode":"ZONE_NOT_FOUND","uuid":"u-3"}]}"#
        #expect(String(decoding: try ZoneChangesResponse(wireBytes: Array(zoneChanges.utf8)).wireBytes, as: UTF8.self) == zoneChanges)
        let legacy =
            #"{"records":[{"recordName":"drive-1","recordType":"Drive","recordChangeTag":"2a","fields":{"distance":{"value":12.5,"type":"DOUBLE"},"name":{"value":"Commute","type":"STRING"}},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"parent":{"recordName":"car-1"}},{"recordName":"old","recordType":"Drive","deleted":true}],"syncToken":"T9","moreComing":false,"reverse":false}"#
        #expect(String(decoding: try RecordChangesResponse(wireBytes: Array(legacy.utf8)).wireBytes, as: UTF8.self) == legacy)
    }

    /// A `records/resolve` answer as the server writes it, a resolved link with its root and share records and a link
    /// that leads nowhere, read and written back byte for byte.
    @Test func aRecordedShareLinkAnswerIsWrittenBackExactly() throws {
        let recorded =
            #"{"results":[{"containerIdentifier":"iCloud.com.example","environment":"development","databaseScope":"SHARED","zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"shortGUID":"0Abc","rootRecordName":"car-1","rootRecord":{"recordName":"car-1","recordType":"Car","recordChangeTag":"4c","fields":{"name":{"value":"Polo","type":"STRING"}},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"share":{"recordName":"share-1","action":"NONE"}},"share":{"recordName":"share-1","recordType":"cloudkit.share","recordChangeTag":"3b","fields":{},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"shortGUID":"0Abc","publicPermission":"READ_ONLY","participants":[{"participantId":"_4a1b","userIdentity":{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b"}},"permission":"READ_WRITE","type":"OWNER","acceptanceStatus":"ACCEPTED"}],"owner":{"participantId":"_4a1b","userIdentity":{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b"}},"permission":"READ_WRITE","type":"OWNER","acceptanceStatus":"ACCEPTED"},"url":"https://example.com/share/0Abc","stableUrl":"https://example.com/share/0Abc"},"ownerIdentity":{"userRecordName":"_4a1b","nameComponents":{"givenName":"alice"}},"participantPermission":"READ_ONLY","participantStatus":"INVITED","participantType":"PUBLIC_USER","webpageURL":"https://example.com/share/0Abc"},{"shortGUID":"nope","reason":"no share has this link","serverErrorCode":"NOT_FOUND","uuid":"u-4"}]}"#
        let answer = try ShareLinksResponse(wireBytes: Array(recorded.utf8))
        #expect(String(decoding: answer.wireBytes, as: UTF8.self) == recorded)
        guard case .resolved(let link) = answer.results.first, case .failed("nope", let error) = answer.results.last else {
            Issue.record("unexpected results: \(answer.results)")
            return
        }
        #expect(link.rootRecord?.fieldValues == ["name": .string("Polo")] && link.share?.share?.publicPermission == .readOnly)
        #expect(link.owner == OwnerIdentity(userRecordName: "_4a1b", name: "alice") && link.participantType == .publicUser)
        #expect(error.code == .notFound)
        try roundTrip(ShortGUIDRequest(entries: [.init(value: "0Abc", shouldFetchRootRecord: true, rootRecordDesiredKeys: ["name"])]))
    }

    /// What a record answer says is read as what it means: each element's kind, a share's members, the server's
    /// record of a conflict.
    @Test func aRecordAnswerIsReadAsWhatItSays() throws {
        let answer = try RecordsResponse(
            wireBytes: Array(
                #"{"records":[{"recordName":"drive-1","recordType":"Drive","recordChangeTag":"2a","fields":{"distance":{"value":12.5,"type":"DOUBLE"},"name":{"value":"Commute","type":"STRING"}},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"parent":{"recordName":"car-1"}},{"recordName":"share-1","recordType":"cloudkit.share","recordChangeTag":"3b","fields":{"cloudkit.title":{"value":"Trips","type":"STRING"}},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"shortGUID":"0Abc","publicPermission":"NONE","participants":[{"participantId":"_4a1b","userIdentity":{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b","emailAddress":"alice@example.com"}},"permission":"READ_WRITE","type":"OWNER","acceptanceStatus":"ACCEPTED"},{"participantId":"_9c2d","userIdentity":{"userRecordName":"_9c2d","lookupInfo":{"userRecordName":"_9c2d"}},"permission":"READ_ONLY","type":"USER","acceptanceStatus":"INVITED"}],"owner":{"participantId":"_4a1b","userIdentity":{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b","emailAddress":"alice@example.com"}},"permission":"READ_WRITE","type":"OWNER","acceptanceStatus":"ACCEPTED"},"currentUserParticipant":{"participantId":"_4a1b","userIdentity":{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b","emailAddress":"alice@example.com"}},"permission":"READ_WRITE","type":"OWNER","acceptanceStatus":"ACCEPTED"},"url":"https://example.com/share/0Abc","stableUrl":"https://example.com/share/0Abc"},{"recordName":"car-1","recordType":"Car","recordChangeTag":"4c","fields":{},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"share":{"recordName":"share-1","action":"NONE"}},{"recordName":"drive-2","reason":"record drive-2 changed since tag 1a","serverErrorCode":"CONFLICT","uuid":"u-1","serverRecord":{"recordName":"drive-2","recordType":"Drive","recordChangeTag":"2a","fields":{"distance":{"value":12.5,"type":"DOUBLE"},"name":{"value":"Commute","type":"STRING"}},"created":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"modified":{"timestamp":1700000000000,"userRecordName":"_4a1b","deviceID":"phone"},"deleted":false,"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"parent":{"recordName":"car-1"}}},{"recordName":"gone","reason":"record gone does not exist","serverErrorCode":"NOT_FOUND","uuid":"u-2"},{"recordName":"old","deleted":true}],"continuationMarker":"M1"}"#
                    .utf8))
        #expect(answer.continuationMarker == "M1")
        guard case .record(let drive) = answer.records[0], case .record(let share) = answer.records[1],
            case .record(let root) = answer.records[2], case .failed(let name, let error, let server?) = answer.records[3],
            case .failed(_, let missing, nil) = answer.records[4], case .deleted("old", nil) = answer.records[5]
        else {
            Issue.record("unexpected elements: \(answer.records)")
            return
        }
        #expect(drive.fieldValues == ["distance": .double(12.5), "name": .string("Commute")])
        #expect(drive.header.parent == "car-1" && drive.header.zoneID == ZoneID(zoneName: "Lists", ownerRecordName: "_4a1b"))
        #expect(drive.header.modified == RecordStamp(timestamp: 1_700_000_000_000, userRecordName: "_4a1b", deviceID: "phone"))
        #expect(share.share?.participants.map(\.userRecordName) == ["_4a1b", "_9c2d"])
        #expect(share.share?.owner?.emailAddress == "alice@example.com" && share.share?.url == "https://example.com/share/0Abc")
        #expect(root.header.share?.recordName == "share-1" && root.share == nil)
        #expect(name == "drive-2" && error.code == .conflict && server.header.recordName == "drive-2")
        #expect(missing.code == .notFound)
    }

    /// A feed page whose element has no `recordName` names what is missing instead of dropping the element.
    @Test func aRecordWithoutItsNameIsRefusedByName() {
        #expect(throws: WireFormatError(path: "record.recordName", message: "is required")) {
            try ZoneChangesResponse(
                wireBytes: Array(#"{"zones":[{"zoneID":{"zoneName":"Lists"},"syncToken":"T","records":[{"recordType":"Drive"}]}]}"#.utf8))
        }
    }

    /// A record's `zoneID`, scanned without a tree, reads as ``ZoneID/init(wire:)`` reads it: `ownerName` for
    /// `ownerRecordName`, unknown keys skipped, the default zone when the name is missing, and a value of the wrong kind
    /// refused by its path.
    @Test func aRecordsZoneIDIsReadAsAZoneIDDictionaryIs() throws {
        func zone(_ json: String) throws -> ZoneID? {
            let page = try RecordsResponse(wireBytes: Array(#"{"records":[{"recordName":"r","recordType":"T","zoneID":\#(json)}]}"#.utf8))
            guard case .record(let record) = page.records.first else { return nil }
            return record.header.zoneID
        }
        #expect(try zone(#"{"zoneName":"Lists","ownerName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE","x":[1,{}]}"#) == Self.lists)
        #expect(try zone(#"{"ownerRecordName":"_4a1b","ownerName":"_other"}"#) == ZoneID(ownerRecordName: "_4a1b"))
        #expect(try zone(#"{"zoneName":"Lists","ownerRecordName":null,"ownerName":"_4a1b"}"#) == Self.lists, "null is absent")
        for (json, path) in [
            (#"{"zoneName":7}"#, "record.zoneID.zoneName"), (#"{"zoneName":"L","ownerRecordName":[]}"#, "record.zoneID.ownerRecordName"),
            (#""Lists""#, "record.zoneID"), ("null", "record.zoneID"),
        ] {
            #expect(throws: WireFormatError.self) { try zone(json) }
            do {
                _ = try zone(json)
            } catch let error as WireFormatError {
                #expect(error.path == path, "\(json): \(error)")
            }
        }
    }

    @Test func aRecordedUploadAnswerIsWrittenBackExactly() throws {
        let recorded = #"{"singleFile":{"fileChecksum":"9f86d0","receipt":"r-1","referenceChecksum":"9f86d0","size":4}}"#
        #expect(String(decoding: try AssetUploadedResponse(wireBytes: Array(recorded.utf8)).wireBytes, as: UTF8.self) == recorded)
    }

    @Test func recordedLinkAnswersAreWrittenBackExactly() throws {
        let created = #"{"links":[{"id":"abc","url":"https://example.com/s/abc","expiresAt":"2027-01-15T08:00:00.000Z"}]}"#
        #expect(String(decoding: try CreatedLinksResponse(wireBytes: Array(created.utf8)).wireBytes, as: UTF8.self) == created)
        let snapshot =
            #"{"id":"abc","kind":"records","expiresAt":"2027-01-15T08:00:00.000Z","records":[{"recordName":"a","recordType":"Item","fields":{"n":{"value":"x","type":"STRING"}},"parent":{"recordName":"p"}}]}"#
        let read = try LinkSnapshotResponse(wireBytes: Array(snapshot.utf8))
        guard case .records(let records) = read.content else {
            Issue.record("not read as records: \(read.content)")
            return
        }
        #expect(records.first?.parent == .set("p") && read.expiresAt == 1_800_000_000_000)
        #expect(String(decoding: read.wireBytes, as: UTF8.self) == snapshot)
    }

    @Test func aRecordedErrorEnvelopeIsWrittenBackExactly() throws {
        let recorded =
            #"{"uuid":"0b6c5a3e-4b1d-4c8e-9a7f-2d1e0f3c4b5a","serverErrorCode":"THROTTLED","reason":"too many requests","retryAfter":3}"#
        let envelope = try ErrorResponse(wireBytes: Array(recorded.utf8))
        #expect(envelope.serverErrorCode == .throttled && envelope.retryAfter == 3)
        #expect(String(decoding: envelope.wireBytes, as: UTF8.self) == recorded)
        try roundTrip(
            ErrorResponse(uuid: "u", serverErrorCode: .authenticationRequired, reason: "sign in", redirectURL: "https://example.com/signin"))
    }

    /// The extension `ckErrorCode` rides beside a documented code; a value this version does not know is dropped, and the
    /// documented code is what a reader goes by.
    @Test func theFinerCodeIsReadWhenKnownAndIgnoredWhenNot() throws {
        let expired = #"{"uuid":"u","serverErrorCode":"BAD_REQUEST","reason":"syncToken: has expired","ckErrorCode":"CHANGE_TOKEN_EXPIRED"}"#
        let envelope = try ErrorResponse(wireBytes: Array(expired.utf8))
        #expect(envelope.serverErrorCode == .badRequest && envelope.ckErrorCode == .changeTokenExpired)
        #expect(String(decoding: envelope.wireBytes, as: UTF8.self) == expired)
        let unknown = try ErrorResponse(wireBytes: Array(#"{"uuid":"u","serverErrorCode":"BAD_REQUEST","reason":"r","ckErrorCode":"NEW"}"#.utf8))
        #expect(unknown.serverErrorCode == .badRequest && unknown.ckErrorCode == nil)
        let zones = try ZoneChangesResponse(
            wireBytes: Array(
                #"{"zones":[{"zoneID":{"zoneName":"Z"},"reason":"syncToken: has expired","serverErrorCode":"BAD_REQUEST","uuid":"u","ckErrorCode":"CHANGE_TOKEN_EXPIRED"}]}"#
                    .utf8))
        guard case .failed(_, let error)? = zones.zones.first else {
            Issue.record("expected a failed zone")
            return
        }
        #expect(error.code == .badRequest && error.ckErrorCode == .changeTokenExpired)
        try roundTrip(ErrorResponse(uuid: "u", serverErrorCode: .badRequest, reason: "r", ckErrorCode: .changeTokenExpired))
    }

    @Test func recordedUserIdentitiesAreWrittenBackExactly() throws {
        let caller =
            #"{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b","emailAddress":"alice@example.com"},"nameComponents":{"givenName":"alice"},"firstName":"alice","users":[{"userRecordName":"_4a1b","lookupInfo":{"userRecordName":"_4a1b","emailAddress":"alice@example.com"},"nameComponents":{"givenName":"alice"},"firstName":"alice"}]}"#
        #expect(String(decoding: try CallerResponse(wireBytes: Array(caller.utf8)).wireBytes, as: UTF8.self) == caller)
        let discovered =
            #"{"users":[{"userRecordName":"_5c2d","lookupInfo":{"userRecordName":"_5c2d","emailAddress":"bob@example.com"},"nameComponents":{"givenName":"bob"},"firstName":"bob","emailAddress":"bob@example.com"}]}"#
        #expect(String(decoding: try UsersResponse(wireBytes: Array(discovered.utf8)).wireBytes, as: UTF8.self) == discovered)
        try roundTrip(UserLookupRequest(keys: [.emailAddress("bob@example.com"), .userRecordName("_5c2d"), .phoneNumber("+44 20 7946 0000")]))
        try roundTrip(CallerResponse(identity: UserIdentity(userRecordName: "_anonymous")))
    }

    @Test func aRecordedDatabaseFeedPageIsWrittenBackExactly() throws {
        let recorded =
            #"{"zones":[{"zoneID":{"zoneName":"Lists","ownerRecordName":"_4a1b","zoneType":"REGULAR_CUSTOM_ZONE"},"syncToken":"BBBB","atomic":true}],"syncToken":"CCCC","moreComing":false}"#
        let message = try DatabaseChangesResponse(wireBytes: Array(recorded.utf8))
        #expect(String(decoding: message.wireBytes, as: UTF8.self) == recorded)
    }

    /// Requests as real clients write them read the same: a bare zone ID in `zones/modify`, `ownerName` for the owner.
    @Test func lenientRequestsReadAsTheStrictOnes() throws {
        let bare = try ZonesModifyRequest(
            wireBytes: Array(#"{"operations":[{"operationType":"CREATE","zoneID":{"zoneName":"Lists","ownerName":"_4a1b"}}]}"#.utf8))
        #expect(bare == ZonesModifyRequest(operations: [ZoneOperation(operationType: .create, zoneID: Self.lists)]))
    }

    @Test func aCodeThisVersionDoesNotKnowIsNotReadAsAnother() {
        // A client would retry an INTERNAL_ERROR; an unknown code is reported as it is instead.
        #expect(throws: WireFormatError.self) {
            try ErrorResponse(wireBytes: Array(#"{"uuid":"u","serverErrorCode":"SOMETHING_NEW","reason":"r"}"#.utf8))
        }
        #expect(throws: WireFormatError.self) {
            try ZonesResponse(wireBytes: Array(#"{"zones":[{"zoneID":{"zoneName":"Z"},"serverErrorCode":"SOMETHING_NEW"}]}"#.utf8))
        }
    }

    @Test func aMissingMemberIsNamed() throws {
        #expect(throws: WireFormatError.self) { try DatabaseChangesResponse(wireBytes: Array(#"{"zones":[],"moreComing":false}"#.utf8)) }
        do {
            _ = try DatabaseChangesResponse(wireBytes: Array(#"{"zones":[],"moreComing":false}"#.utf8))
        } catch {
            #expect(error.path == "syncToken")
        }
        // A list a message needs is named when it is missing, and may be empty.
        #expect(throws: WireFormatError(path: "tokens", message: "is required")) { try AssetUploadRequest(wireBytes: Array("{}".utf8)) }
        #expect(throws: WireFormatError(path: "links", message: "is required")) { try CreatedLinksResponse(wireBytes: Array("{}".utf8)) }
        #expect(try AssetRereferenceRequest(wireBytes: Array(#"{"assets":[]}"#.utf8)).assets.isEmpty)
    }
}
