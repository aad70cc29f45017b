import CumulusCore
import CumulusModel
import Testing

/// Which subscriptions a record change fires, decided without a store.
@Suite("Subscription matcher", .timeLimit(.minutes(10)))
struct SubscriptionMatcherTests {
    static let drives = ZoneID(zoneName: "Drives", ownerRecordName: "_alice")

    static func change(
        _ event: Subscription.Event, type: String = "Drive", name: String = "d1", zone: ZoneID = drives, _ fields: [String: FieldValue]
    ) -> RecordChangeEvent {
        let stamp = RecordStamp(timestamp: 1_700_000_000_000, userRecordName: "_alice", deviceID: "d")
        return RecordChangeEvent(
            header: RecordHeader(
                recordName: name, recordType: type, recordChangeTag: "1", created: stamp, modified: stamp, parent: nil, share: nil, zoneID: zone,
                shortGUID: nil),
            event: event, fields: fields)
    }

    static func subscription(_ json: String) throws -> Subscription {
        try Subscription(wire: WireObject(JSONValue(parsing: Array(json.utf8)), path: ""))
    }

    @Test func databaseAndZoneSubscriptionsFireForTheirScope() throws {
        let database = try Self.subscription(#"{"subscriptionID":"a","subscriptionType":"database"}"#)
        let zone = try Self.subscription(#"{"subscriptionID":"z","subscriptionType":"zone","zoneID":{"zoneName":"Drives"}}"#)
        let bobsZone = try Self.subscription(
            #"{"subscriptionID":"b","subscriptionType":"zone","zoneID":{"zoneName":"Drives","ownerRecordName":"_bob"}}"#)
        let event = Self.change(.create, [:])
        #expect(SubscriptionMatcher.fires(database, for: event, in: Self.drives))
        #expect(SubscriptionMatcher.fires(zone, for: event, in: Self.drives))
        #expect(!SubscriptionMatcher.fires(zone, for: event, in: ZoneID(zoneName: "Other", ownerRecordName: "_alice")))
        #expect(!SubscriptionMatcher.fires(bobsZone, for: event, in: Self.drives), "same name, another owner")
    }

    @Test func querySubscriptionsFireOnlyForMatchingRecordsAndTheirEvents() throws {
        let long = try Self.subscription(
            #"{"subscriptionID":"q","query":{"recordType":"Drive","filterBy":[{"comparator":"GREATER_THAN","fieldName":"distance","fieldValue":{"value":10000}},{"comparator":"BEGINS_WITH","fieldName":"name","fieldValue":{"value":"Morn"}}]},"firesOn":["create","delete"]}"#
        )
        let matching: [String: FieldValue] = ["distance": .double(12_400.5), "name": .string("Morning commute")]
        #expect(SubscriptionMatcher.fires(long, for: Self.change(.create, matching), in: Self.drives))
        #expect(SubscriptionMatcher.fires(long, for: Self.change(.delete, matching), in: Self.drives))
        #expect(!SubscriptionMatcher.fires(long, for: Self.change(.update, matching), in: Self.drives), "update is not in firesOn")
        #expect(!SubscriptionMatcher.fires(long, for: Self.change(.create, type: "Car", matching), in: Self.drives))
        #expect(!SubscriptionMatcher.fires(long, for: Self.change(.create, ["distance": .int64(500), "name": .string("Morning")]), in: Self.drives))
        #expect(!SubscriptionMatcher.fires(long, for: Self.change(.create, ["distance": .int64(20_000)]), in: Self.drives), "a missing field")

        let inZone = try Self.subscription(
            #"{"subscriptionID":"q","query":{"recordType":"Drive"},"zoneID":{"zoneName":"Drives"},"zoneWide":false}"#)
        #expect(SubscriptionMatcher.fires(inZone, for: Self.change(.update, [:]), in: Self.drives))
        #expect(!SubscriptionMatcher.fires(inZone, for: Self.change(.update, [:]), in: ZoneID(zoneName: "Other")))
    }

    @Test(arguments: [
        (#"{"comparator":"EQUALS","fieldName":"laps","fieldValue":{"value":2}}"#, true),
        (#"{"comparator":"NOT_EQUALS","fieldName":"laps","fieldValue":{"value":2}}"#, false),
        (#"{"comparator":"LESS_THAN_OR_EQUALS","fieldName":"laps","fieldValue":{"value":2.0}}"#, true),
        (#"{"comparator":"IN","fieldName":"laps","fieldValue":{"value":[1,2,3]}}"#, true),
        (#"{"comparator":"NOT_IN","fieldName":"laps","fieldValue":{"value":[1,3]}}"#, true),
        (#"{"comparator":"LIST_CONTAINS","fieldName":"tags","fieldValue":{"value":"odd"}}"#, true),
        (#"{"comparator":"LIST_CONTAINS_ALL","fieldName":"tags","fieldValue":{"value":["odd","drive"]}}"#, true),
        (#"{"comparator":"NOT_LIST_CONTAINS_ANY","fieldName":"tags","fieldValue":{"value":["even"]}}"#, true),
        (#"{"comparator":"LIST_MEMBER_BEGINS_WITH","fieldName":"tags","fieldValue":{"value":"dr"}}"#, true),
        (#"{"comparator":"EQUALS","fieldName":"route","fieldValue":{"value":{"recordName":"route-1"},"type":"REFERENCE"}}"#, true),
        (#"{"comparator":"EQUALS","systemFieldName":"recordName","fieldValue":{"value":"d1"}}"#, true),
        (
            #"{"comparator":"NEAR","fieldName":"where","fieldValue":{"value":{"latitude":51.5,"longitude":-0.12},"type":"LOCATION"},"distance":2000}"#,
            true
        ),
        (
            #"{"comparator":"NEAR","fieldName":"where","fieldValue":{"value":{"latitude":48.85,"longitude":2.29},"type":"LOCATION"},"distance":2000}"#,
            false
        ),
    ])
    func comparatorsAgreeWithQueries(_ filter: String, _ expected: Bool) throws {
        let subscription = try Self.subscription(#"{"subscriptionID":"q","query":{"recordType":"Drive","filterBy":[\#(filter)]}}"#)
        let fields: [String: FieldValue] = [
            "laps": .int64(2), "tags": .list(.string, [.string("odd"), .string("drive")]),
            "route": .reference(Reference(recordName: "route-1")), "where": .location(Location(latitude: 51.5007, longitude: -0.1246)),
        ]
        #expect(SubscriptionMatcher.fires(subscription, for: Self.change(.create, fields), in: Self.drives) == expected)
    }
}
