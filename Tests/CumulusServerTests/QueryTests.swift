import CumulusModel
import Testing

@Suite("records/query", .timeLimit(.minutes(10)))
struct QueryTests {
    /// Twelve drives with varied fields; drive-11 has no fields at all.
    static func seed(_ client: CloudKitTestClient, as user: TestUser) async throws {
        try await client.createZone("Drives", as: user)
        let places = [(51.5007, -0.1246), (51.5014, -0.1419), (48.8584, 2.2945), (40.6892, -74.0445)]
        var operations: [String] = []
        for index in 0..<11 {
            let (lat, lon) = places[index % places.count]
            let tags = index % 2 == 0 ? #"["even","drive"]"# : #"["odd","drive"]"#
            operations.append(
                operation(
                    "create", "drive-\(index)", type: "Drive",
                    fields: #"""
                        {"name":{"value":"\#(index < 5 ? "Morning" : "Evening") \#(index)"},"distance":{"value":\#(Double(index) * 1000.5)},
                         "laps":{"value":\#(index % 4)},"start":{"value":\#(1_700_000_000_000 + Int64(index) * 60_000),"type":"TIMESTAMP"},
                         "tags":{"value":\#(tags),"type":"STRING_LIST"},"scores":{"value":[\#(index),\#(index * 10)],"type":"INT64_LIST"},
                         "route":{"value":{"recordName":"route-\#(index % 3)","action":"NONE"},"type":"REFERENCE"},
                         "where":{"value":{"latitude":\#(lat),"longitude":\#(lon)},"type":"LOCATION"}}
                        """#
                )
            )
        }
        operations.append(operation("create", "drive-11", type: "Drive"))
        operations.append(operation("create", "note-1", type: "Note", fields: #"{"name":{"value":"Morning 1"}}"#))
        let response = try await client.modify(operations, zone: "Drives", as: .user(user))
        #expect(response.records.allSatisfy { $0["serverErrorCode"] == nil })
    }

    static func query(
        _ client: CloudKitTestClient, as user: TestUser, filters: [String] = [], sorts: [String] = [], extra: String = "",
        zone: String = #""zoneID":{"zoneName":"Drives"},"#
    ) async throws -> CloudKitResponse {
        let body =
            #"{\#(zone)\#(extra)"query":{"recordType":"Drive","filterBy":[\#(filters.joined(separator: ","))],"sortBy":[\#(sorts.joined(separator: ","))]}}"#
        return try await client.send("records/query", as: .user(user), body: body)
    }

    static func names(_ response: CloudKitResponse) -> [String] {
        response.records.compactMap { $0["recordName"]?.stringValue }
    }

    static func filter(_ comparator: String, _ field: String, _ value: String, type: String? = nil, system: Bool = false, extra: String = "")
        -> String
    {
        let typePart = type.map { #","type":"\#($0)""# } ?? ""
        return
            #"{"comparator":"\#(comparator)","\#(system ? "systemFieldName" : "fieldName")":"\#(field)","fieldValue":{"value":\#(value)\#(typePart)}\#(extra)}"#
    }

    static let byName = [#"{"systemFieldName":"recordName","ascending":true}"#]

    @Test(
        arguments: TestStore.all,
        [
            (filter("EQUALS", "laps", "2"), ["drive-10", "drive-2", "drive-6"]),
            (filter("NOT_EQUALS", "laps", "0"), ["drive-1", "drive-10", "drive-2", "drive-3", "drive-5", "drive-6", "drive-7", "drive-9"]),
            (filter("LESS_THAN", "distance", "2000"), ["drive-0", "drive-1"]),
            (filter("LESS_THAN_OR_EQUALS", "distance", "2001"), ["drive-0", "drive-1", "drive-2"]),
            (filter("GREATER_THAN", "distance", "9000"), ["drive-10", "drive-9"]),
            (filter("GREATER_THAN_OR_EQUALS", "start", "1700000540000", type: "TIMESTAMP"), ["drive-10", "drive-9"]),
            (filter("BEGINS_WITH", "name", #""Morn""#), ["drive-0", "drive-1", "drive-2", "drive-3", "drive-4"]),
            (filter("NOT_BEGINS_WITH", "name", #""Morn""#), ["drive-10", "drive-5", "drive-6", "drive-7", "drive-8", "drive-9"]),
            (filter("IN", "laps", "[1,3]"), ["drive-1", "drive-3", "drive-5", "drive-7", "drive-9"]),
            (filter("NOT_IN", "laps", "[0,1,2]"), ["drive-3", "drive-7"]),
            (filter("EQUALS", "route", #"{"recordName":"route-1"}"#, type: "REFERENCE"), ["drive-1", "drive-10", "drive-4", "drive-7"]),
            (filter("LIST_CONTAINS", "tags", #""odd""#), ["drive-1", "drive-3", "drive-5", "drive-7", "drive-9"]),
            (filter("NOT_LIST_CONTAINS", "tags", #""drive""#), ["drive-11"]),
            (filter("LIST_CONTAINS_ANY", "scores", "[30,100]"), ["drive-10", "drive-3"]),
            (filter("NOT_LIST_CONTAINS_ANY", "tags", #"["even","drive"]"#), ["drive-11"]),
            (filter("LIST_CONTAINS_ALL", "scores", "[4,40]"), ["drive-4"]),
            (
                filter("NOT_LIST_CONTAINS_ALL", "tags", #"["odd","drive"]"#),
                ["drive-0", "drive-10", "drive-11", "drive-2", "drive-4", "drive-6", "drive-8"]
            ),
            (filter("LIST_MEMBER_BEGINS_WITH", "tags", #""ev""#), ["drive-0", "drive-10", "drive-2", "drive-4", "drive-6", "drive-8"]),
            (filter("EQUALS", "recordName", #""drive-3""#, system: true), ["drive-3"]),
            (
                filter("NEAR", "where", #"{"latitude":51.5007,"longitude":-0.1246}"#, type: "LOCATION", extra: #","distance":2000"#),
                ["drive-0", "drive-1", "drive-4", "drive-5", "drive-8", "drive-9"]
            ),
        ])
    func comparators(_ store: TestStore, _ example: (filter: String, expected: [String])) async throws {
        let (filter, expected) = example
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await Self.seed(client, as: world.alice)
            let response = try await Self.query(client, as: world.alice, filters: [filter], sorts: Self.byName)
            #expect(response.status == 200, "\(response.json)")
            #expect(Self.names(response) == expected)
        }
    }

    @Test(arguments: TestStore.all) func sortsOnFieldsAndSystemFields(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await Self.seed(client, as: world.alice)
            let byDistance = try await Self.query(client, as: world.alice, sorts: [#"{"fieldName":"distance","ascending":false}"#])
            // Descending puts the record without the field last.
            #expect(Self.names(byDistance) == (0..<11).reversed().map { "drive-\($0)" } + ["drive-11"])
            let twoKeys = try await Self.query(
                client, as: world.alice, filters: [Self.filter("LESS_THAN", "laps", "2")],
                sorts: [#"{"fieldName":"laps"}"#, #"{"systemFieldName":"recordName","ascending":false}"#]
            )
            #expect(Self.names(twoKeys) == ["drive-8", "drive-4", "drive-0", "drive-9", "drive-5", "drive-1"])
            let byCreation = try await Self.query(
                client, as: world.alice, sorts: [#"{"systemFieldName":"createdTimestamp"}"#, #"{"systemFieldName":"recordName"}"#])
            #expect(byCreation.records.count == 12)
            let nearest = try await Self.query(
                client, as: world.alice, filters: [Self.filter("LESS_THAN", "distance", "4000")],
                sorts: [#"{"fieldName":"where","relativeLocation":{"latitude":48.85,"longitude":2.29}}"#, #"{"systemFieldName":"recordName"}"#]
            )
            #expect(Self.names(nearest) == ["drive-2", "drive-0", "drive-1", "drive-3"])
        }
    }

    @Test(
        arguments: TestStore.all,
        [
            // Descending: the record without the sorted field (drive-11) comes last; ascending, first.
            [#"{"fieldName":"laps","ascending":false}"#, #"{"fieldName":"distance"}"#],
            [#"{"fieldName":"laps","ascending":true}"#, #"{"fieldName":"distance","ascending":false}"#],
            [#"{"fieldName":"distance","ascending":true}"#],
            [#"{"systemFieldName":"recordName","ascending":false}"#],
        ])
    func continuationMarkersPageThroughEveryResultOnce(_ store: TestStore, _ sorts: [String]) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await Self.seed(client, as: world.alice)
            let all = Self.names(try await Self.query(client, as: world.alice, sorts: sorts))
            #expect(all.count == 12)
            for pageSize in [1, 5] {
                var paged: [String] = []
                var marker: String?
                repeat {
                    let extra = #""resultsLimit":\#(pageSize),"# + (marker.map { #""continuationMarker":"\#($0)","# } ?? "")
                    let page = try await Self.query(client, as: world.alice, sorts: sorts, extra: extra)
                    #expect(page.records.count <= pageSize)
                    paged += Self.names(page)
                    marker = page.json["continuationMarker"]?.stringValue
                } while marker != nil
                #expect(paged == all, "page size \(pageSize)")
            }

            // A marker belongs to its query.
            let first = try await Self.query(client, as: world.alice, sorts: sorts, extra: #""resultsLimit":5,"#)
            let mark = try #require(first.json["continuationMarker"]?.stringValue)
            let other = try await Self.query(client, as: world.alice, sorts: Self.byName, extra: #""continuationMarker":"\#(mark)","#)
            #expect(other.status == 400)
            #expect(other.reason?.hasPrefix("continuationMarker") == true)
            let forged = try await Self.query(client, as: world.alice, sorts: sorts, extra: #""continuationMarker":"AAAA\#(mark)","#)
            #expect(forged.status == 400)
        }
    }

    @Test(arguments: TestStore.all) func zoneWideQueriesAndDesiredKeys(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await Self.seed(client, as: world.alice)
            try await client.createZone("Archive", as: world.alice)
            _ = try await client.modify(
                [operation("create", "archived", type: "Drive", fields: #"{"laps":{"value":2}}"#)], zone: "Archive", as: .user(world.alice))
            let zoneWide = try await Self.query(
                client, as: world.alice, filters: [Self.filter("EQUALS", "laps", "2")], sorts: Self.byName, extra: #""zoneWide":true,"#, zone: "")
            #expect(Self.names(zoneWide) == ["archived", "drive-10", "drive-2", "drive-6"])
            #expect(zoneWide.records[0]["zoneID"]?["zoneName"]?.stringValue == "Archive")
            let narrow = try await Self.query(
                client, as: world.alice, filters: [Self.filter("EQUALS", "laps", "2")], extra: #""desiredKeys":["name"],"#)
            #expect(narrow.records.allSatisfy { $0["fields"]?.objectValue?.keys.sorted() == ["name"] })
            // Bob's database has none of Alice's records.
            let bob = try await client.send("records/query", as: .user(world.bob), body: #"{"zoneWide":true,"query":{"recordType":"Drive"}}"#)
            #expect(bob.status == 200)
            #expect(bob.records.isEmpty)
        }
    }

    /// Refused alike on both stores (the rules are `QueryPlan`'s), with a reason naming the field.
    @Test(
        arguments: TestStore.all,
        [
            (
                #"{"query":{"recordType":"Drive","filterBy":[{"comparator":"FUZZY","fieldName":"a","fieldValue":{"value":1}}]}}"#,
                "query.filterBy[0].comparator"
            ),
            (
                #"{"query":{"recordType":"Drive","filterBy":[{"comparator":"EQUALS","systemFieldName":"recordName","fieldValue":{"value":5}}]}}"#,
                "query.filterBy[0].fieldValue: a INT64 value cannot be compared with recordName"
            ),
            (
                #"{"query":{"recordType":"Drive","filterBy":[{"comparator":"IN","fieldName":"a","fieldValue":{"value":1}}]}}"#,
                "query.filterBy[0].fieldValue"
            ),
            (
                #"{"query":{"recordType":"Drive","filterBy":[{"comparator":"NEAR","fieldName":"a","fieldValue":{"value":{"latitude":1,"longitude":2}}}]}}"#,
                "query.filterBy[0].distance"
            ),
            (
                #"{"query":{"recordType":"Drive","filterBy":[{"comparator":"CONTAINS_ALL_TOKENS","fieldName":"a","fieldValue":{"value":"x"}}]}}"#,
                "query.filterBy[0].comparator"
            ),
            (
                #"{"query":{"recordType":"Drive","filterBy":[{"comparator":"EQUALS","fieldName":"bad name","fieldValue":{"value":1}}]}}"#,
                "query.filterBy[0].fieldName"
            ),
            (#"{"query":{"recordType":"Drive","sortBy":[{"systemFieldName":"nope"}]}}"#, "query.sortBy[0].systemFieldName"),
            (#"{"query":{"filterBy":[]}}"#, "query.recordType"),
            (#"{"query":{"recordType":"Drive"},"resultsLimit":0}"#, "resultsLimit"),
        ])
    func badQueriesNameTheField(_ store: TestStore, _ example: (body: String, path: String)) async throws {
        let (body, path) = example
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let response = try await client.send("records/query", as: .user(world.alice), body: body)
            #expect(response.status == 400)
            #expect(response.reason?.hasPrefix(path) == true, "\(response.reason ?? "")")
        }
    }
}
