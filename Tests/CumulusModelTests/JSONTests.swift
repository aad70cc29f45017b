import CumulusModel
import Testing

@Suite("JSON parsing and writing")
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

    @Test func writerEscapesAndRoundTrips() throws {
        let original = JSONValue.object([
            "text": .string("line\nbreak \"quoted\" \u{1} tab\t"), "list": .array([.number("1"), .null, .bool(true)]),
        ])
        var writer = JSONWriter()
        writer.write(original)
        #expect(try JSONValue(parsing: writer.bytes) == original)
        #expect(String(decoding: writer.bytes, as: UTF8.self).contains(#"\u0001"#))
    }
}
