import CumulusCore
import CumulusModel
import CumulusStore
import HTTPTypes
import Testing

@Suite("Limits and naming rules", .timeLimit(.minutes(10)))
struct LimitTests {
    @Test func atMost200OperationsPerRequest() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let ops200 = (0..<200).map { operation("create", "r\($0)") }
            #expect(try await client.modify(ops200, as: .user(world.alice)).records.count == 200)
            let ops201 = (0..<201).map { operation("create", "s\($0)") }
            let response = try await client.modify(ops201, as: .user(world.alice))
            #expect(response.status == 400)
            #expect(response.serverErrorCode == "BAD_REQUEST")
            #expect(response.reason?.hasPrefix("operations: 201 items") == true)
            #expect(try await client.lookup(["s0"], as: .user(world.alice)).records[0]["serverErrorCode"]?.stringValue == "NOT_FOUND")
            let lookup = try await client.lookup((0..<201).map { "r\($0)" }, as: .user(world.alice))
            #expect(lookup.status == 400)
        }
    }

    /// A database's live zones are bounded (`Limits.maximumZones`, the default zone among them): a create past the limit
    /// fails on its own with `QUOTA_EXCEEDED`, and the batch's other operations go on.
    @Test(arguments: TestStore.all)
    func zonesPerDatabaseAreLimited(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store, limits: Limits(maximumZones: 2))
        try await world.test { client in
            #expect(try await client.createZone("Trips", as: world.alice).zones[0]["serverErrorCode"] == nil)
            let response = try await client.send(
                "zones/modify", as: .user(world.alice),
                body: #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Cars"}}},"#
                    + #"{"operationType":"create","zone":{"zoneID":{"zoneName":"Trips"}}}]}"#)
            #expect(response.status == 200)
            #expect(response.zones[0]["serverErrorCode"]?.stringValue == "QUOTA_EXCEEDED")
            #expect(response.zones[0]["reason"]?.stringValue?.contains("2 zones") == true)
            #expect(response.zones[0]["zoneID"]?["zoneName"]?.stringValue == "Cars")
            #expect(response.zones[1]["serverErrorCode"] == nil, "creating a zone that exists is not a new one")
            // Bob's database has room of its own.
            #expect(try await client.createZone("Cars", as: world.bob).zones[0]["serverErrorCode"] == nil)
            // A zone deleted frees its place.
            let deleted = try await client.send(
                "zones/modify", as: .user(world.alice),
                body: #"{"operations":[{"operationType":"delete","zone":{"zoneID":{"zoneName":"Trips"}}}]}"#)
            #expect(deleted.zones[0]["serverErrorCode"] == nil)
            #expect(try await client.createZone("Cars", as: world.alice).zones[0]["serverErrorCode"] == nil)
        }
    }

    @Test func recordsAreAtMostOneMegabyte() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let big = String(repeating: "x", count: 1_000_001)
            let response = try await client.modify(
                [operation("create", "small"), operation("create", "big", fields: #"{"text":{"value":"\#(big)"}}"#)], as: .user(world.alice)
            )
            #expect(response.status == 413)
            #expect(response.serverErrorCode == "QUOTA_EXCEEDED")
            #expect(response.reason?.hasPrefix("operations[1].record.fields") == true)
            // Nothing of the request was stored.
            #expect(try await client.lookup(["small"], as: .user(world.alice)).records[0]["serverErrorCode"]?.stringValue == "NOT_FOUND")
            let fits = String(repeating: "x", count: 900_000)
            #expect(
                try await client.modify([operation("create", "fits", fields: #"{"text":{"value":"\#(fits)"}}"#)], as: .user(world.alice)).records[0][
                    "recordName"] != nil)
        }
    }

    @Test func requestBodiesHaveASizeLimit() async throws {
        let world = try await TestWorld.make(limits: Limits(maximumRequestBodySize: 10_000))
        try await world.test { client in
            let body = #"{"operations":[\#(operation("create", "r", fields: #"{"t":{"value":"\#(String(repeating: "y", count: 20_000))"}}"#))]}"#
            let response = try await client.send("records/modify", as: .user(world.alice), body: body)
            #expect(response.status == 413)
            #expect(response.serverErrorCode == "QUOTA_EXCEEDED")
        }
    }

    /// A body's parsed tree is bounded by counting values while parsing: a body of many empty containers once cost
    /// 250 times its size in memory.
    @Test func requestBodiesHaveAValueCountAndNestingLimit() async throws {
        let world = try await TestWorld.make(limits: Limits(maximumJSONValues: 1_000, maximumJSONDepth: 16))
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let empties = "[" + Array(repeating: "{}", count: 1_001).joined(separator: ",") + "]"
            let flood = try await client.send("records/query", as: .user(world.alice), body: empties)
            #expect(flood.status == 400)
            #expect(flood.serverErrorCode == "BAD_REQUEST")
            #expect(flood.reason?.hasPrefix("body: invalid JSON at byte") == true)
            #expect(flood.reason?.hasSuffix("more than 1000 values") == true)
            let deep = String(repeating: "[", count: 17) + String(repeating: "]", count: 17)
            let nested = try await client.send("records/query", as: .user(world.alice), body: deep)
            #expect(nested.status == 400)
            #expect(nested.reason?.hasSuffix("nesting deeper than 16 levels") == true)
            // Within both limits, a request is served.
            let ops = (0..<50).map { operation("create", "r\($0)") }
            #expect(try await client.modify(ops, as: .user(world.alice)).records.count == 50)
        }
    }

    @Test(arguments: [
        (
            #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"_private"}}}]}"#, "zones/modify",
            "operations[0].zone.zoneID.zoneName"
        ),
        (
            #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"\#(String(repeating: "z", count: 256))"}}}]}"#, "zones/modify",
            "operations[0].zone.zoneID.zoneName"
        ),
        (#"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Zoné"}}}]}"#, "zones/modify", "operations[0].zone.zoneID.zoneName"),
        (
            #"{"operations":[{"operationType":"create","record":{"recordName":"_x","recordType":"T"}}]}"#, "records/modify",
            "operations[0].record.recordName"
        ),
        (
            #"{"operations":[{"operationType":"create","record":{"recordName":"a b","recordType":"T"}}]}"#, "records/modify",
            "operations[0].record.recordName"
        ),
        (
            #"{"operations":[{"operationType":"create","record":{"recordName":"\#(String(repeating: "r", count: 256))","recordType":"T"}}]}"#,
            "records/modify", "operations[0].record.recordName"
        ),
        (
            #"{"operations":[{"operationType":"create","record":{"recordName":"r","recordType":"1Type"}}]}"#, "records/modify",
            "operations[0].record.recordType"
        ),
        (#"{"operations":[{"operationType":"create","record":{"recordName":"r"}}]}"#, "records/modify", "operations[0].record.recordType"),
        (
            #"{"operations":[{"operationType":"create","record":{"recordName":"r","recordType":"T","fields":{"bad-name":{"value":1}}}}]}"#,
            "records/modify", "operations[0].record.fields.bad-name"
        ),
        (
            #"{"operations":[{"operationType":"create","record":{"recordName":"r","recordType":"T"}},{"operationType":"forceDelete","record":{"recordName":"r"}}]}"#,
            "records/modify", "operations[1].record.recordName"
        ),
        (
            #"{"operations":[{"operationType":"create","record":{"recordName":"r","recordType":"T","fields":{"ref":{"value":{"recordName":"x","zoneID":{"zoneName":"Elsewhere"}},"type":"REFERENCE"}}}}]}"#,
            "records/modify", "operations[0].record.fields.ref.value.zoneID"
        ),
        (
            #"{"operations":[{"operationType":"create","record":{"recordName":"r","recordType":"T","fields":{"where":{"value":{"latitude":123,"longitude":0},"type":"LOCATION"}}}}]}"#,
            "records/modify", "operations[0].record.fields.where.value.latitude"
        ),
    ])
    func badNamesAndValuesAreRejectedNamingTheField(_ body: String, _ operation: String, _ path: String) async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let response = try await client.send(operation, as: .user(world.alice), body: body)
            #expect(response.status == 400)
            #expect(response.serverErrorCode == "BAD_REQUEST")
            #expect(response.reason?.hasPrefix(path) == true, "reason: \(response.reason ?? "")")
        }
    }
}
