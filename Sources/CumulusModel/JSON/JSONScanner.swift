/// A pull reader of JSON: walks a document member by member without building a ``JSONValue`` tree.
///
/// For the hot decoding paths (a change feed page of hundreds of records), where building the tree and then reading
/// it costs more than the parse itself. Anything unusual inside can still be read as a tree with ``readValue()``.
/// The scanner checks the syntax of everything it passes over, as ``JSONValue/init(parsing:maximumDepth:)`` does.
///
/// ```swift
/// let name = try JSONScanner.scan(body) { scanner in
///     var name: String?
///     try scanner.beginObject()
///     while let key = try scanner.nextKey() {
///         if key == "recordName" { name = try scanner.readString() } else { try scanner.skipValue() }
///     }
///     return name
/// }
/// ```
public struct JSONScanner: ~Copyable {
    private var parser: JSONParser
    /// Just after `{` or `[`: the next member needs no separator.
    private var atOpening = false

    private init(buffer: UnsafeBufferPointer<UInt8>, maximumDepth: Int, maximumValues: Int) {
        parser = JSONParser(buffer: buffer, maximumDepth: maximumDepth, maximumValues: maximumValues)
    }

    /// Scans a document: `body` reads its one value, and nothing but whitespace may follow it.
    ///
    /// The limits are those of ``JSONValue/init(parsing:maximumDepth:maximumValues:)``, counted the same way (every
    /// value read or passed over, keys not included), so a document one refuses the other refuses too.
    ///
    /// - Throws: ``JSONParseError`` for bad syntax or a limit passed, and whatever `body` throws.
    public static func scan<Result>(
        _ bytes: some Collection<UInt8>, maximumDepth: Int = 64, maximumValues: Int = .max, _ body: (inout JSONScanner) throws -> Result
    ) throws -> Result {
        func scan(_ buffer: UnsafeBufferPointer<UInt8>) throws -> Result {
            var scanner = JSONScanner(buffer: buffer, maximumDepth: maximumDepth, maximumValues: maximumValues)
            let result = try body(&scanner)
            scanner.parser.skipWhitespace()
            guard scanner.parser.index == buffer.count else { throw scanner.parser.error("unexpected data after the document") }
            return result
        }
        // Scanned where it lies, as a request body is parsed; only a collection without contiguous storage is copied.
        if let result = try bytes.withContiguousStorageIfAvailable(scan) { return result }
        return try Array(bytes).withUnsafeBufferPointer(scan)
    }

    /// What the next value is.
    public enum Kind: Sendable {
        case object, array, string, number, bool, null
    }

    /// The kind of the next value, without reading it.
    public mutating func peek() throws(JSONParseError) -> Kind {
        parser.skipWhitespace()
        guard parser.index < parser.buffer.count else { throw parser.error("unexpected end of input") }
        switch parser.buffer[parser.index] {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number
        default: throw parser.error("unexpected character")
        }
    }

    /// Enters an object; read its members with ``nextKey()``.
    public mutating func beginObject() throws(JSONParseError) {
        try open(UInt8(ascii: "{"), "an object")
    }

    /// The key of the object's next member, positioned at its value, or `nil` after the object's last member.
    public mutating func nextKey() throws(JSONParseError) -> String? {
        guard try advance(closing: UInt8(ascii: "}")) else { return nil }
        guard parser.index < parser.buffer.count, parser.buffer[parser.index] == UInt8(ascii: "\"") else {
            throw parser.error("expected a key string")
        }
        let key = try parser.parseString()
        parser.skipWhitespace()
        guard parser.index < parser.buffer.count, parser.buffer[parser.index] == UInt8(ascii: ":") else { throw parser.error("expected ':'") }
        parser.index += 1
        return key
    }

    /// Enters an array; read its elements while ``nextElement()`` is true.
    public mutating func beginArray() throws(JSONParseError) {
        try open(UInt8(ascii: "["), "an array")
    }

    /// Whether another element follows, positioned at it; `false` after the array's last element.
    public mutating func nextElement() throws(JSONParseError) -> Bool {
        try advance(closing: UInt8(ascii: "]"))
    }

    /// Reads a string.
    public mutating func readString() throws(JSONParseError) -> String {
        guard try peek() == .string else { throw parser.error("expected a string") }
        try countValue()
        return try parser.parseString()
    }

    /// A string read but not yet made a `String`: where it lies in the document, or its text when it has escapes.
    ///
    /// Valid only inside the ``scan(_:maximumDepth:_:)`` call that read it.
    public struct StringToken {
        fileprivate let range: Range<Int>
        fileprivate let unescaped: String?
    }

    /// Reads a string without making a `String` of it when it has no escapes (base64 read as bytes, for one).
    public mutating func readStringToken() throws(JSONParseError) -> StringToken {
        guard try peek() == .string else { throw parser.error("expected a string") }
        try countValue()
        let start = parser.index + 1
        var end = start
        while end < parser.buffer.count, parser.buffer[end] != UInt8(ascii: "\""), parser.buffer[end] != UInt8(ascii: "\\"),
            parser.buffer[end] >= 0x20
        {
            end += 1
        }
        if end < parser.buffer.count, parser.buffer[end] == UInt8(ascii: "\"") {
            parser.index = end + 1
            return StringToken(range: start..<end, unescaped: nil)
        }
        return StringToken(range: start..<start, unescaped: try parser.parseString())
    }

    /// The token's text.
    public func string(_ token: StringToken) -> String {
        token.unescaped ?? String(decoding: UnsafeBufferPointer(rebasing: parser.buffer[token.range]), as: UTF8.self)
    }

    /// The token's UTF-8 bytes.
    public func withBytes<Result>(of token: StringToken, _ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        guard var text = token.unescaped else { return body(UnsafeBufferPointer(rebasing: parser.buffer[token.range])) }
        return text.withUTF8(body)
    }

    /// Reads a number, as its source text.
    public mutating func readNumber() throws(JSONParseError) -> String {
        guard try peek() == .number else { throw parser.error("expected a number") }
        try countValue()
        return try parser.parseNumber()
    }

    /// Reads `null` and answers true, or answers false and reads nothing.
    public mutating func readNull() throws(JSONParseError) -> Bool {
        guard try peek() == .null else { return false }
        try countValue()
        try parser.expectLiteral("null")
        return true
    }

    /// Reads the next value as a tree.
    public mutating func readValue() throws(JSONParseError) -> JSONValue {
        parser.skipWhitespace()
        return try parser.parseValue()
    }

    /// Passes over the next value, checking it.
    public mutating func skipValue() throws(JSONParseError) {
        switch try peek() {
        case .object:
            try beginObject()
            while try nextKey() != nil { try skipValue() }
        case .array:
            try beginArray()
            while try nextElement() { try skipValue() }
        case .string:
            _ = try readStringToken()
        default:
            _ = try readValue()
        }
    }

    private mutating func open(_ byte: UInt8, _ description: String) throws(JSONParseError) {
        parser.skipWhitespace()
        guard parser.index < parser.buffer.count, parser.buffer[parser.index] == byte else { throw parser.error("expected \(description)") }
        try countValue()
        try parser.enter()
        parser.index += 1
        atOpening = true
    }

    private mutating func countValue() throws(JSONParseError) {
        parser.values += 1
        if parser.values > parser.maximumValues { throw parser.error("more than \(parser.maximumValues) values") }
    }

    /// Moves past the separator before the next member or element, or past the closing bracket (answering false).
    private mutating func advance(closing: UInt8) throws(JSONParseError) -> Bool {
        parser.skipWhitespace()
        guard parser.index < parser.buffer.count else { throw parser.error("unexpected end of input") }
        let opening = atOpening
        atOpening = false
        if parser.buffer[parser.index] == closing {
            parser.index += 1
            parser.depth -= 1
            return false
        }
        if !opening {
            guard parser.buffer[parser.index] == UInt8(ascii: ",") else {
                throw parser.error(closing == UInt8(ascii: "}") ? "expected ',' or '}'" : "expected ',' or ']'")
            }
            parser.index += 1
            parser.skipWhitespace()
        }
        return true
    }
}
