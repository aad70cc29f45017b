import CumulusModel
import Testing

@Suite("Request decoding", .timeLimit(.minutes(10)))
struct RequestDecodingTests {
    private func modify(_ json: String) throws -> RecordsModifyRequest {
        try RecordsModifyRequest(wire: WireObject(JSONValue(parsing: json), path: ""))
    }

    @Test func decodesAModifyRequest() throws {
        let request = try modify(
            #"""
            {"zoneID":{"zoneName":"Z","ownerName":"_o"},"atomic":false,"numbersAsStrings":true,"desiredKeys":["a"],
             "operations":[{"operationType":"FORCEUPDATE","desiredKeys":[],"record":{"recordName":"r","recordType":"T",
               "fields":{"a":{"value":1},"gone":null},"parent":null,"createShortGUID":true}}]}
            """#
        )
        #expect(request.zoneID == ZoneID(zoneName: "Z", ownerRecordName: "_o"))
        #expect(request.atomic == false)
        #expect(request.numbersAsStrings)
        let operation = try #require(request.operations.first)
        #expect(operation.operationType == .forceUpdate)
        #expect(operation.desiredKeys == [])
        #expect(operation.record.fields["a"] == .some(.int64(1)))
        #expect(operation.record.fields["gone"] == .some(nil))
        #expect(operation.record.parent == .clear)
        #expect(operation.record.createShortGUID)
    }

    @Test(arguments: [
        (#"{}"#, "operations"),
        (#"{"operations":[{"record":{}}]}"#, "operations[0].operationType"),
        (#"{"operations":[{"operationType":"upsert","record":{}}]}"#, "operations[0].operationType"),
        (#"{"operations":[{"operationType":"create"}]}"#, "operations[0].record"),
        (
            #"{"operations":[{"operationType":"create","record":{"fields":{"x":{"value":"a","type":"INT64"}}}}]}"#,
            "operations[0].record.fields.x.value"
        ),
        (#"{"operations":"no"}"#, "operations"),
    ])
    func errorsNameThePath(_ json: String, _ path: String) throws {
        let error = #expect(throws: WireFormatError.self) { try modify(json) }
        #expect(error?.path == path)
    }

    @Test func decodesZoneRequests() throws {
        let modify = try ZonesModifyRequest(
            wire: WireObject(
                JSONValue(
                    parsing:
                        #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"A"}}},{"operationType":"delete","zoneID":{"zoneName":"B"}}]}"#
                ), path: "")
        )
        #expect(modify.operations.map(\.zoneID.zoneName) == ["A", "B"])
        #expect(modify.operations.map(\.operationType) == [.create, .delete])
        let lookup = try ZonesLookupRequest(
            wire: WireObject(JSONValue(parsing: #"{"zones":[{"zoneName":"A"},{"zoneID":{"zoneName":"B"}}]}"#), path: ""))
        #expect(lookup.zones.map(\.zoneName) == ["A", "B"])
    }
}
