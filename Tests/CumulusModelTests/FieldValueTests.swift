import CumulusModel
import Foundation
import Testing

@Suite("Record field wire format", .timeLimit(.minutes(10)))
struct FieldValueTests {
    static let everyType: [FieldValue] = [
        .string("Morning commute"),
        .int64(-9_223_372_036_854_775_808),
        .double(12_400.125),
        .timestamp(1_700_000_000_123),
        .bytes(Data([0, 1, 2, 250, 255])),
        .reference(Reference(recordName: "drive-1", zoneID: ZoneID(zoneName: "Drives", ownerRecordName: "_abc"), action: .deleteSelf)),
        .location(
            Location(latitude: 51.5, longitude: -0.12, horizontalAccuracy: 5, altitude: 11, speed: 13.4, course: 90, timestamp: 1_700_000_000_000)),
        .asset(Asset(fileChecksum: "abc", size: 1024, receipt: "r", downloadURL: "https://example.com/a")),
        .list(.string, [.string("a"), .string("b")]),
        .list(.int64, [.int64(1), .int64(2)]),
        .list(.double, [.double(1.5), .double(-2)]),
        .list(.timestamp, [.timestamp(1), .timestamp(2)]),
        .list(.bytes, [.bytes(Data([1])), .bytes(Data())]),
        .list(.reference, [.reference(Reference(recordName: "a")), .reference(Reference(recordName: "b", action: .validate))]),
        .list(.location, [.location(Location(latitude: 1, longitude: 2))]),
        .list(.asset, [.asset(Asset(fileChecksum: "x"))]),
        .list(nil, []),
    ]

    @Test(arguments: everyType)
    func roundTripsThroughTheWire(_ value: FieldValue) throws {
        var writer = JSONWriter()
        writer.field(value)
        let parsed = try FieldValue.read(field: JSONValue(parsing: writer.bytes), path: "f")
        #expect(parsed == value)
    }

    @Test func writesTypeTags() {
        #expect(FieldValue.list(.string, []).typeTag == "STRING_LIST")
        #expect(FieldValue.list(nil, []).typeTag == "UNKNOWN_LIST")
        #expect(FieldValue.asset(Asset()).typeTag == "ASSETID")
        #expect(FieldValue.timestamp(1).typeTag == "TIMESTAMP")
    }

    @Test(arguments: [
        (#"{"value":"x"}"#, FieldValue.string("x")),
        (#"{"value":42}"#, .int64(42)),
        (#"{"value":4.5}"#, .double(4.5)),
        (#"{"value":true}"#, .int64(1)),
        (#"{"value":{"recordName":"r"}}"#, .reference(Reference(recordName: "r"))),
        (#"{"value":{"latitude":1,"longitude":2}}"#, .location(Location(latitude: 1, longitude: 2))),
        (#"{"value":[1,2.5]}"#, .list(.double, [.double(1), .double(2.5)])),
        (#"{"value":[]}"#, .list(nil, [])),
        (#"{"value":"42","type":"INT64"}"#, .int64(42)),
        (#"{"value":"aGk","type":"bytes"}"#, .bytes(Data("hi".utf8))),
        (#"{"value":{"fileChecksum":"c"},"type":"ASSET"}"#, .asset(Asset(fileChecksum: "c"))),
    ])
    func infersOrAcceptsLenientInput(_ json: String, _ expected: FieldValue) throws {
        #expect(try FieldValue.read(field: JSONValue(parsing: json), path: "f") == expected)
    }

    @Test func nullClearsAField() throws {
        #expect(try FieldValue.read(field: JSONValue(parsing: #"{"value":null,"type":"STRING"}"#), path: "f") == nil)
    }

    @Test(arguments: [
        (#"{"value":"x","type":"INT64"}"#, "fields.n.value"),
        (#"{"value":1,"type":"NOPE"}"#, "fields.n.type"),
        (#"{"value":{"latitude":91,"longitude":0},"type":"LOCATION"}"#, "fields.n.value.latitude"),
        (#"{"value":[1,"a"],"type":"INT64_LIST"}"#, "fields.n.value[1]"),
        (#"{"value":"%%%","type":"BYTES"}"#, "fields.n.value"),
        (#"{"value":1e400,"type":"DOUBLE"}"#, "fields.n.value"),
        (#"{"value":{"action":"NONE"},"type":"REFERENCE"}"#, "fields.n.value.recordName"),
        (#"{"value":[[1]]}"#, "fields.n.value[0]"),
    ])
    func errorsNameTheField(_ json: String, _ path: String) throws {
        let error = #expect(throws: WireFormatError.self) {
            try FieldValue.read(field: JSONValue(parsing: json), path: "fields.n")
        }
        #expect(error?.path == path)
        // The change feed's scanning reader places errors the same way.
        let scanned = #expect(throws: WireFormatError.self) {
            try JSONScanner.scan(Array(json.utf8)) { try FieldValue.read(scanning: &$0, path: "fields.n") }
        }
        #expect(scanned?.path == path)
    }

    @Test func canonicalEncodingIsStable() throws {
        let fields: [String: FieldValue] = ["b": .int64(1), "a": .string("x"), "c": .list(.double, [.double(0.1)])]
        let json = RecordFieldsCoding.canonical(fields)
        #expect(
            String(decoding: json, as: UTF8.self)
                == #"{"a":{"value":"x","type":"STRING"},"b":{"value":1,"type":"INT64"},"c":{"value":[0.1],"type":"DOUBLE_LIST"}}"#)
        #expect(try RecordFieldsCoding.parseCanonical(json) == fields)
    }

    @Test func numbersAsStrings() throws {
        var writer = JSONWriter()
        writer.fields(["n": .int64(5), "d": .double(2.5), "l": .list(.int64, [.int64(7)])], options: FieldWriteOptions(numbersAsStrings: true))
        #expect(String(decoding: writer.bytes, as: UTF8.self).contains(#""value":"5""#))
        #expect(String(decoding: writer.bytes, as: UTF8.self).contains(#""value":"2.5""#))
        #expect(String(decoding: writer.bytes, as: UTF8.self).contains(#""value":["7"]"#))
    }
}

@Suite("Finding assets in canonical fields", .timeLimit(.minutes(10)))
struct HoldsAssetsTests {
    @Test func anAssetTypeIsFoundWhereverItIsAndNothingElseIs() {
        func holds(_ text: String) -> Bool { JSONWriter.holdsAssets(Array(text.utf8)) }
        #expect(holds(#"{"photo":{"type":"ASSETID","value":{}}}"#))
        #expect(holds(#"{"photos":{"type":"ASSETID_LIST","value":[]}}"#))
        #expect(holds(#""ASSETID"#))
        #expect(holds(#"xx"ASSETID"#))
        #expect(!holds(""))
        #expect(!holds(#""ASSETI"#))
        // A string value that reads so counts too: the fields are then parsed, and only assets get a URL.
        #expect(holds(#"{"name":{"type":"STRING","value":"ASSETID"}}"#))
        #expect(!holds(#"{"a":{"type":"STRING","value":"AAAA ASSET ID"}}"#))
    }
}
