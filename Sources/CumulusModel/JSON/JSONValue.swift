/// A parsed JSON document.
///
/// Cumulus parses request bodies into `JSONValue` rather than through `Codable`, for three reasons: numbers keep their
/// source text so an `INT64` is never rounded through a `Double`; a field's type can be inferred from the shape of its
/// value when a client omits `type`; and every error can name the exact path of the offending key.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number, kept as its source text.
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// A short description of the value's kind, for error messages.
    public var kindDescription: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// The members of an object, or `nil`.
    public var objectValue: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// The elements of an array, or `nil`.
    public var arrayValue: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// The string, or `nil`.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The member of an object with this key, or `nil`.
    public subscript(key: String) -> JSONValue? { objectValue?[key] }

    /// The element of an array at this index, or `nil`.
    public subscript(index: Int) -> JSONValue? {
        guard let array = arrayValue, array.indices.contains(index) else { return nil }
        return array[index]
    }

    /// Whether the value is JSON `null`.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// Serializes the value as compact JSON.
    public var jsonBytes: [UInt8] {
        var writer = JSONWriter()
        writer.write(self)
        return writer.bytes
    }
}

extension JSONValue {
    /// Parses a JSON document.
    ///
    /// - Parameters:
    ///   - bytes: UTF-8 encoded JSON.
    ///   - maximumDepth: Nesting limit, so hostile input cannot exhaust the stack.
    ///   - maximumValues: Limit on the values in the document (every object, array, string, number, boolean and null
    ///     counts one), checked while parsing, so a hostile document's tree stays a small multiple of its size.
    /// - Throws: ``JSONParseError`` naming the byte offset of the problem.
    public init(parsing bytes: some Collection<UInt8>, maximumDepth: Int = 64, maximumValues: Int = .max) throws(JSONParseError) {
        func parse(_ buffer: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> JSONValue {
            var parser = JSONParser(buffer: buffer, maximumDepth: maximumDepth, maximumValues: maximumValues)
            return try parser.parseDocument()
        }
        // A request body is parsed where it lies; only a collection without contiguous storage is copied first.
        let parsed: Result<JSONValue, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONParseError) in try parse(buffer) }
        }
        if let parsed {
            self = try parsed.get()
        } else {
            self = try Array(bytes).withUnsafeBufferPointer { buffer throws(JSONParseError) in try parse(buffer) }
        }
    }

    /// Parses a JSON document from a string.
    public init(parsing string: String) throws(JSONParseError) {
        try self.init(parsing: Array(string.utf8))
    }
}

/// A JSON document could not be parsed.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Byte offset where parsing stopped.
    public var offset: Int
    /// What was wrong.
    public var message: String

    public var description: String { "invalid JSON at byte \(offset): \(message)" }
}

/// Literals build documents the server writes itself, such as its OpenAPI description.
extension JSONValue: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .number(String(value)) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}
