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
    }

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

    @Test func aRecordedErrorEnvelopeIsWrittenBackExactly() throws {
        let recorded =
            #"{"uuid":"0b6c5a3e-4b1d-4c8e-9a7f-2d1e0f3c4b5a","serverErrorCode":"THROTTLED","reason":"too many requests","retryAfter":3}"#
        let envelope = try ErrorResponse(wireBytes: Array(recorded.utf8))
        #expect(envelope.serverErrorCode == .throttled && envelope.retryAfter == 3)
        #expect(String(decoding: envelope.wireBytes, as: UTF8.self) == recorded)
        try roundTrip(
            ErrorResponse(uuid: "u", serverErrorCode: .authenticationRequired, reason: "sign in", redirectURL: "https://example.com/signin"))
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

    @Test func aMissingMemberIsNamed() {
        #expect(throws: WireFormatError.self) { try DatabaseChangesResponse(wireBytes: Array(#"{"zones":[],"moreComing":false}"#.utf8)) }
        do {
            _ = try DatabaseChangesResponse(wireBytes: Array(#"{"zones":[],"moreComing":false}"#.utf8))
        } catch {
            #expect(error.path == "syncToken")
        }
    }
}
