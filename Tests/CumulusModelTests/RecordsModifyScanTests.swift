import CumulusModel
import Foundation
import Testing

/// The scanned `records/modify` reader is a shortcut, not a second definition of the wire format: whatever body it
/// reads must make the request the tree reader makes, and whatever body the tree refuses it must leave to the tree.
@Suite("records/modify read straight from its bytes", .timeLimit(.minutes(10)))
struct RecordsModifyScanTests {
    static let bodies: [String] = [
        // As CloudKit clients send it.
        #"{"zoneID":{"zoneName":"Drives"},"operations":[{"operationType":"create","record":{"recordName":"d1","recordType":"Drive","#
            + #""fields":{"name":{"value":"Drive 1","type":"STRING"},"start":{"value":1700000000000,"type":"TIMESTAMP"},"#
            + #""km":{"value":12.5,"type":"DOUBLE"},"laps":{"value":3,"type":"INT64"},"route":{"value":"AAECAw==","type":"BYTES"}}}}],"#
            + #""desiredKeys":[],"atomic":true}"#,
        // Every kind of field, typed and inferred, lists, nulls, and tags in any case.
        #"{"operations":[{"operationType":"forceUpdate","record":{"recordName":"r","recordType":"T","recordChangeTag":"5","fields":{"#
            + #""ref":{"value":{"recordName":"p","action":"DELETE_SELF"},"type":"REFERENCE"},"#
            + #""loc":{"value":{"latitude":1.5,"longitude":-2,"altitude":3},"type":"LOCATION"},"#
            + #""asset":{"value":{"fileChecksum":"abc","size":10,"receipt":"r1"},"type":"ASSET"},"#
            + #""names":{"value":["a","b"],"type":"STRING_LIST"},"nums":{"value":[1,2.5],"type":"double_list"},"#
            + #""inferredString":{"value":"x"},"inferredInt":{"value":7},"inferredDouble":{"value":7.25},"#
            + #""inferredList":{"value":[1,2,3.5]},"inferredRef":{"value":{"recordName":"q"}},"emptyList":{"value":[],"type":"INT64_LIST"},"#
            + #""lower":{"value":"s","type":"string"},"typeNull":{"value":"t","type":null},"valueNull":{"value":null,"type":"STRING"},"#
            + #""noValue":{"type":"STRING"},"cleared":null,"flag":{"value":true,"type":"INT64"},"stringNumber":{"value":"12","type":"INT64"},"#
            + #""stringStamp":{"value":"1700000000000","type":"TIMESTAMP"},"fractionStamp":{"value":1.7e12,"type":"TIMESTAMP"},"#
            + #""extraKeys":{"value":"v","type":"STRING","isEncrypted":false}}}}]}"#,
        // Parents, short GUIDs, sharing keys and echoed response keys.
        #"{"operations":[{"operationType":"update","record":{"recordName":"a","parent":{"recordName":"root"},"createShortGUID":true}},"#
            + #"{"operationType":"update","record":{"recordName":"b","parent":null,"createShortGUID":1}},"#
            + #"{"operationType":"REPLACE","record":{"recordName":"c","createShortGUID":"false","publicPermission":"READ_ONLY","#
            + #""participants":[{"userIdentity":{"userRecordName":"_u"},"permission":"READ_WRITE"}],"created":{"timestamp":1},"#
            + #""modified":{"timestamp":2},"deleted":false,"zoneID":{"zoneName":"z"},"shortGUID":"g","share":{"recordName":"s"}}},"#
            + #"{"operationType":"delete","record":{"recordName":"d","recordChangeTag":"9"},"desiredKeys":["name"]},"#
            + #"{"operationType":"forceDelete","record":{"recordName":"e"},"desiredKeys":null,"ignored":[1,{"x":null}]}],"#
            + #""numbersAsStrings":"true","desiredKeys":null,"zoneID":{"zoneName":"z","ownerRecordName":"_o"},"unknown":{"deep":[[]]}}"#,
        // Repeated keys keep their last value, at every level.
        #"{"operations":[],"operations":[{"operationType":"delete","operationType":"create","record":{"recordName":"x"},"#
            + #""record":{"recordName":"y","recordName":"z","fields":{"a":{"value":"1"}},"fields":{"b":{"value":"2","value":"3"},"b":{"value":"4"}}}}],"#
            + #""atomic":false,"atomic":true}"#,
        // Escapes, whitespace everywhere, names the server makes up.
        " \n{ \"operations\" : [ { \"operationType\" : \"create\" , \"record\" : { \"recordType\" : \"T\\u00e9\" , \"fields\" : "
            + "{ \"t\\\"q\" : { \"value\" : \"line\\nbreak \\ud83d\\ude97\" , \"type\" : \"STRING\" } , \"b\" : { \"value\" : \"AA\\u003d\\u003d\" ,"
            + " \"type\" : \"BYTES\" } } } } ] }\t",
        // Empty things.
        #"{"operations":[]}"#,
        #"{"operations":[{"operationType":"create","record":{}}]}"#,
        #"{"operations":[{"operationType":"create","record":{"fields":{}}},{"operationType":"create","record":{"fields":null}}]}"#,
    ]

    /// Bodies the tree refuses; the scan must not read them.
    static let refused: [String] = [
        "", "{}", "[]", #"{"operations":null}"#, #"{"operations":{}}"#, #"{"operations":[1]}"#, #"{"operations":[{}]}"#,
        #"{"operations":[{"operationType":"create"}]}"#, #"{"operations":[{"operationType":"create","record":null}]}"#,
        #"{"operations":[{"operationType":"make","record":{}}]}"#, #"{"operations":[{"operationType":7,"record":{}}]}"#,
        #"{"operations":[{"operationType":"create","record":{"recordName":5}}]}"#,
        #"{"operations":[{"operationType":"create","record":{"fields":[]}}]}"#,
        #"{"operations":[{"operationType":"create","record":{"fields":{"a":"bare"}}}]}"#,
        #"{"operations":[{"operationType":"create","record":{"fields":{"a":{"value":"x","type":"INT64"}}}}]}"#,
        #"{"operations":[{"operationType":"create","record":{"fields":{"a":{"value":"!!","type":"BYTES"}}}}]}"#,
        #"{"operations":[{"operationType":"create","record":{"fields":{"a":{"value":1,"type":"NOPE"}}}}]}"#,
        #"{"operations":[{"operationType":"create","record":{"parent":"p"}}]}"#,
        #"{"operations":[{"operationType":"create","record":{"createShortGUID":"yes"}}]}"#,
        #"{"operations":[{"operationType":"create","record":{},"desiredKeys":[1]}]}"#,
        #"{"operations":[],"atomic":"maybe"}"#, #"{"operations":[],"zoneID":"z"}"#, #"{"operations":[],"desiredKeys":"a"}"#,
        #"{"operations":[]} x"#, #"{"operations":[],}"#, #"{"operations":[{"operationType":"create","record":{"a":1,}}]}"#,
    ]

    static func tree(_ body: String, maximumDepth: Int = 64, maximumValues: Int = .max) throws -> RecordsModifyRequest {
        try RecordsModifyRequest(
            wire: WireObject(JSONValue(parsing: Array(body.utf8), maximumDepth: maximumDepth, maximumValues: maximumValues), path: ""))
    }

    static func scan(_ body: String, maximumDepth: Int = 64, maximumValues: Int = .max) -> RecordsModifyRequest? {
        RecordsModifyRequest(scanning: Array(body.utf8), maximumDepth: maximumDepth, maximumValues: maximumValues)
    }

    @Test(arguments: bodies)
    func readsWhatTheTreeReads(_ body: String) throws {
        let scanned = try #require(Self.scan(body))
        #expect(scanned == (try Self.tree(body)))
    }

    @Test func theCloudKitBodyReadsAsExpected() throws {
        let request = try #require(Self.scan(Self.bodies[0]))
        #expect(request.zoneID == ZoneID(zoneName: "Drives"))
        #expect(request.atomic == true)
        #expect(request.desiredKeys == [])
        #expect(request.operations.count == 1)
        let record = request.operations[0].record
        #expect(record.recordName == "d1")
        #expect(record.fields["route"] == .some(.bytes(Data([0, 1, 2, 3]))))
        #expect(record.fields["start"] == .some(.timestamp(1_700_000_000_000)))
    }

    @Test(arguments: refused)
    func leavesWhatTheTreeRefusesToTheTree(_ body: String) {
        #expect(throws: (any Error).self) { try Self.tree(body) }
        #expect(Self.scan(body) == nil)
    }

    /// The limits are counted as the tree counts them: the smallest budget the tree accepts, the scan accepts, and one
    /// less it refuses.
    @Test(arguments: bodies)
    func countsValuesAndDepthAsTheTreeDoes(_ body: String) throws {
        let values = try #require((1...10_000).first { (try? Self.tree(body, maximumValues: $0)) != nil })
        #expect(Self.scan(body, maximumValues: values) != nil)
        #expect(Self.scan(body, maximumValues: values - 1) == nil)
        let depth = try #require((1...64).first { (try? Self.tree(body, maximumDepth: $0)) != nil })
        #expect(Self.scan(body, maximumDepth: depth) != nil)
        #expect(Self.scan(body, maximumDepth: depth - 1) == nil)
    }

    /// Damaged bodies: at every position of every body, a byte dropped, replaced by each of a handful of bytes that
    /// matter to JSON, or a few bytes repeated. Whatever the scan reads, the tree reads the same way.
    @Test func neverReadsADamagedBodyDifferently() throws {
        let replacements = Array(#"{}[]":,0-e tn\"#.utf8) + [0x01, 0xC3]
        var read = 0
        for body in Self.bodies.map({ Array($0.utf8) }) {
            for position in body.indices {
                var damaged: [[UInt8]] = []
                var dropped = body
                dropped.remove(at: position)
                damaged.append(dropped)
                for byte in replacements where byte != body[position] {
                    var replaced = body
                    replaced[position] = byte
                    damaged.append(replaced)
                }
                var repeated = body
                repeated.insert(contentsOf: body[position..<min(body.count, position + 7)], at: position)
                damaged.append(repeated)
                for bytes in damaged {
                    guard let scanned = RecordsModifyRequest(scanning: bytes, maximumDepth: 64, maximumValues: .max) else { continue }
                    read += 1
                    let tree = try? RecordsModifyRequest(wire: WireObject(JSONValue(parsing: bytes), path: ""))
                    #expect(scanned == tree, "\(String(decoding: bytes, as: UTF8.self))")
                }
            }
        }
        // Most damage breaks the syntax; enough survives to mean something.
        #expect(read > 1_000)
    }
}
