import CumulusModel
import Foundation
import Testing

@Suite("JSON parsing and writing", .timeLimit(.minutes(10)))
struct JSONTests {
    @Test func parsesAllValueKinds() throws {
        let value = try JSONValue(parsing: #"{"a":[1,-2.5e3,true,false,null,"x"],"b":{}}"#)
        #expect(
            value
                == .object([
                    "a": .array([.number("1"), .number("-2.5e3"), .bool(true), .bool(false), .null, .string("x")]),
                    "b": .object([:]),
                ])
        )
    }

    @Test func keepsIntegersExact() throws {
        // 2^63 - 1 does not survive a trip through Double; the parser keeps the source text.
        let value = try JSONValue(parsing: "9223372036854775807")
        #expect(value == .number("9223372036854775807"))
        let field = try FieldValue.read(field: JSONValue(parsing: #"{"value":9223372036854775807,"type":"INT64"}"#), path: "f")
        #expect(field == .int64(.max))
    }

    @Test func decodesEscapesAndSurrogatePairs() throws {
        let value = try JSONValue(parsing: #""a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude97""#)
        #expect(value == .string("a\"\\/\u{8}\u{c}\n\r\té🚗"))
    }

    @Test(arguments: [
        "", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "tru", "\"\\x\"", "\"\\ud800\"", "[1] 2", "\"a\u{1}\"",
    ])
    func rejectsMalformedDocuments(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: text) }
    }

    @Test func limitsNestingDepth() {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: deep) }
    }

    @Test func limitsTheNumberOfValues() throws {
        // Every value counts one: the array, its objects, their keys' values.
        #expect(try JSONValue(parsing: #"[{"a":1},{"b":[2,3]}]"#.utf8, maximumValues: 7).arrayValue?.count == 2)
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: #"[{"a":1},{"b":[2,3]}]"#.utf8, maximumValues: 6) }
        let error = #expect(throws: JSONParseError.self) { try JSONValue(parsing: Array("[{},{},{}]".utf8), maximumValues: 3) }
        #expect(error?.message == "more than 3 values")
        #expect(error?.offset == 7)
    }

    @Test func writerEscapesAndRoundTrips() throws {
        let original = JSONValue.object([
            "text": .string("line\nbreak \"quoted\" \u{1} tab\t"), "list": .array([.number("1"), .null, .bool(true)]),
        ])
        var writer = JSONWriter()
        writer.write(original)
        #expect(try JSONValue(parsing: writer.bytes) == original)
        #expect(String(decoding: writer.bytes, as: UTF8.self).contains(#"\u0001"#))
    }

    // MARK: - The scanner

    /// Rebuilds a tree member by member with the scanner, reading no value whole.
    private static func walk(_ scanner: inout JSONScanner) throws -> JSONValue {
        switch try scanner.peek() {
        case .object:
            var members: [String: JSONValue] = [:]
            try scanner.beginObject()
            while let key = try scanner.nextKey() { members[key] = try walk(&scanner) }
            return .object(members)
        case .array:
            var elements: [JSONValue] = []
            try scanner.beginArray()
            while try scanner.nextElement() { elements.append(try walk(&scanner)) }
            return .array(elements)
        case .string:
            let token = try scanner.readStringToken()
            return .string(scanner.string(token))
        case .number:
            return .number(try scanner.readNumber())
        case .null:
            _ = try scanner.readNull()
            return .null
        case .bool:
            return try scanner.readValue()
        }
    }

    @Test(arguments: [
        #"{"a":[1,-2.5e3,true,false,null,"x"],"b":{},"c":[],"d":[{"e":"\u00e9\n"},[[]]]}"#, #" [ 1 , { "k" : "v" } ] "#, "7", #""""#,
    ])
    func scannerReadsWhatTheParserReads(_ text: String) throws {
        let scanned = try JSONScanner.scan(Array(text.utf8)) { scanner in try Self.walk(&scanner) }
        #expect(scanned == (try JSONValue(parsing: text)))
        // Skipping checks the same syntax.
        try JSONScanner.scan(Array(text.utf8)) { scanner in try scanner.skipValue() }
    }

    @Test(arguments: [
        "", "{", "[1,]", "[,1]", "{\"a\" 1}", "{\"a\":1,}", "{\"a\":1 \"b\":2}", "[1 2]", "01", "1.", "-", "tru", "\"\\x\"", "\"\\ud800\"",
        "[1] 2", "\"a\u{1}\"",
    ])
    func scannerRejectsMalformedDocuments(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONScanner.scan(Array(text.utf8)) { scanner in try Self.walk(&scanner) } }
        #expect(throws: JSONParseError.self) { try JSONScanner.scan(Array(text.utf8)) { scanner in try scanner.skipValue() } }
    }

    @Test func scannerLimitsNestingDepth() {
        let deep = Array((String(repeating: "[", count: 100) + String(repeating: "]", count: 100)).utf8)
        #expect(throws: JSONParseError.self) { try JSONScanner.scan(deep) { scanner in try scanner.skipValue() } }
    }

    @Test func stringTokensGiveBytesWithAndWithoutEscapes() throws {
        let texts = try JSONScanner.scan(Array(#"["plain","with \"escape\" and \u00e9"]"#.utf8)) { scanner in
            var texts: [String] = []
            try scanner.beginArray()
            while try scanner.nextElement() {
                let token = try scanner.readStringToken()
                #expect(scanner.withBytes(of: token) { String(decoding: $0, as: UTF8.self) } == scanner.string(token))
                texts.append(scanner.string(token))
            }
            return texts
        }
        #expect(texts == ["plain", "with \"escape\" and é"])
    }

    /// Every field the tree reader reads, the scanner reads the same, and refuses the same.
    @Test(arguments: [
        #"{"value":"text","type":"STRING"}"#, #"{"value":"aGVsbG8=","type":"BYTES"}"#, #"{"value":"aGVsbG8","type":"BYTES"}"#,
        #"{"value":"-_8","type":"BYTES"}"#, #"{"value":"aGVs\nbG8=","type":"BYTES"}"#, #"{"type":"INT64","value":"42"}"#,
        #"{"value":9223372036854775807,"type":"INT64"}"#, #"{"value":2.5,"type":"DOUBLE"}"#, #"{"value":1700000000000,"type":"TIMESTAMP"}"#,
        #"{"value":{"recordName":"r","action":"DELETE_SELF"},"type":"REFERENCE"}"#, #"{"value":{"latitude":1,"longitude":2},"type":"LOCATION"}"#,
        #"{"value":[1,2.5],"type":"DOUBLE_LIST"}"#, #"{"value":["a","b"]}"#, #"{"value":"inferred"}"#, #"{"value":3}"#, #"{"value":null}"#,
        #"{"value":"x","type":"int64"}"#, #"{"value":"x","type":"BOGUS"}"#, #"{"value":"!!!","type":"BYTES"}"#, #"{"value":"a","type":"BYTES"}"#,
        #"{"value":"x","type":"INT64"}"#, #"{"value":{"recordName":"r","action":"NO"},"type":"REFERENCE"}"#, #"{"value":[[1]]}"#,
    ])
    func scannedFieldsReadAsTheTreeReadsThem(_ text: String) throws {
        let tree = Result { try FieldValue.read(field: JSONValue(parsing: text), path: "record.fields.f") }
        let scanned = Result {
            try JSONScanner.scan(Array(text.utf8)) { scanner in try FieldValue.read(scanning: &scanner, path: "record.fields.f") }
        }
        switch (tree, scanned) {
        case (.success(let expected), .success(let actual)):
            #expect(actual == expected)
        case (.failure(let expected as WireFormatError), .failure(let actual as WireFormatError)):
            #expect(actual.path == expected.path)
        default:
            Issue.record("tree: \(tree), scanner: \(scanned)")
        }
    }

    @Test func lenientBase64DecodesBothAlphabetsWithOrWithoutPadding() throws {
        let bytes = Data((0..<256).map { UInt8($0) })
        let standard = bytes.base64EncodedString()
        for text in [
            standard, standard.replacingOccurrences(of: "=", with: ""),
            standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_"),
        ] {
            let field = try FieldValue.read(field: .object(["value": .string(text), "type": .string("BYTES")]), path: "f")
            #expect(field == .bytes(bytes))
        }
    }

    @Test func base64WithWhitespaceOrAStrayByteAnywhereIsReadOrRefusedAsAWhole() throws {
        func read(_ text: String) -> FieldValue? {
            try? FieldValue.read(field: .object(["value": .string(text), "type": .string("BYTES")]), path: "f")
        }
        let bytes = Data((0..<30).map { UInt8(truncatingIfNeeded: $0 &* 41) })
        let text = bytes.base64EncodedString()
        for position in 0...text.count {
            let index = text.index(text.startIndex, offsetBy: position)
            var spaced = text
            spaced.insert(contentsOf: " \n", at: index)
            #expect(read(spaced) == .bytes(bytes), "whitespace at \(position)")
            var stray = text
            stray.insert("!", at: index)
            #expect(read(stray) == nil, "a stray byte at \(position)")
        }
        #expect(read("QUJD") == .bytes(Data("ABC".utf8)))
        #expect(read("QUJ!") == nil && read("QU=D") == nil && read("Q") == nil)
    }

    @Test func bytesAreWrittenAsFoundationsStandardBase64() {
        for length in [0, 1, 2, 3, 4, 5, 6, 7, 255, 256, 257, 675] {
            let data = Data((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ length) })
            var writer = JSONWriter()
            writer.fieldValue(.bytes(data))
            #expect(String(decoding: writer.bytes, as: UTF8.self) == "\"\(data.base64EncodedString())\"", "\(length) bytes")
        }
    }

    @Test func integersAreWrittenAsTheirDecimalText() {
        let edges: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, .max, .min, .max - 1, .min + 1, 1_700_000_000_000]
        // Every length of digits, both signs, with digits that vary.
        let spread = (0...63).flatMap { shift in [Int64.max >> shift, Int64.min >> shift, (Int64.max >> shift) / 7 * 3] }
        for value in edges + spread {
            var writer = JSONWriter()
            writer.int(value)
            #expect(String(decoding: writer.bytes, as: UTF8.self) == String(value))
        }
        // Past Int64, the generic conversion.
        var writer = JSONWriter()
        writer.beginArray()
        writer.int(UInt64.max)
        writer.int(Int8(-5))
        writer.endArray()
        #expect(String(decoding: writer.bytes, as: UTF8.self) == "[18446744073709551615,-5]")
    }

    @Test func sentFieldsEncodeAsTheirSetValuesDo() {
        let sent: [String: FieldValue?] = ["b": .string("two"), "a": .int64(1), "cleared": FieldValue?.none, "c": .bytes(Data([1, 2, 3, 4]))]
        #expect(RecordFieldsCoding.canonical(sent: sent) == RecordFieldsCoding.canonical(sent.compactMapValues { $0 }))
    }
}
