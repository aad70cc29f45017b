/// A request body does not match the CloudKit Web Services wire format.
///
/// The `path` names the offending key (for example `operations[2].record.fields.distance.value`), so the error that
/// reaches the client says exactly which field to fix.
public struct WireFormatError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Dotted path of the offending key in the request body.
    public var path: String
    /// What is wrong with it.
    public var message: String

    /// Creates an error for a key.
    public init(path: String, message: String) {
        self.path = path
        self.message = message
    }

    public var description: String { path.isEmpty ? message : "\(path): \(message)" }
}

/// A JSON object being read, with the path it was found at.
public struct WireObject: Sendable {
    /// The object's members.
    public let members: [String: JSONValue]
    /// Where the object sits in the request body.
    public let path: String

    /// Wraps a JSON value that must be an object.
    public init(_ value: JSONValue, path: String) throws(WireFormatError) {
        guard case .object(let members) = value else {
            throw WireFormatError(path: path.isEmpty ? "body" : path, message: "expected an object, found \(value.kindDescription)")
        }
        self.members = members
        self.path = path
    }

    /// The path of a member key.
    public func path(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// A member, treating JSON `null` as absent.
    public subscript(key: String) -> JSONValue? {
        guard let value = members[key], !value.isNull else { return nil }
        return value
    }

    /// An optional string member.
    public func string(_ key: String) throws(WireFormatError) -> String? {
        guard let value = self[key] else { return nil }
        guard case .string(let string) = value else {
            throw WireFormatError(path: path(key), message: "expected a string, found \(value.kindDescription)")
        }
        return string
    }

    /// A required string member.
    public func requiredString(_ key: String) throws(WireFormatError) -> String {
        guard let string = try string(key) else { throw WireFormatError(path: path(key), message: "is required") }
        return string
    }

    /// An optional boolean member. Accepts `0`/`1` and `"true"`/`"false"` as well, as some clients send them.
    public func bool(_ key: String) throws(WireFormatError) -> Bool? {
        guard let value = self[key] else { return nil }
        switch value {
        case .bool(let bool): return bool
        case .number("0"): return false
        case .number("1"): return true
        case .string("true"): return true
        case .string("false"): return false
        default: throw WireFormatError(path: path(key), message: "expected a boolean, found \(value.kindDescription)")
        }
    }

    /// An optional integer member. Accepts a numeric string as well.
    public func int(_ key: String) throws(WireFormatError) -> Int? {
        guard let value = self[key] else { return nil }
        switch value {
        case .number(let text), .string(let text):
            if let int = Int(text) { return int }
            if let double = Double(text), double.rounded() == double, let int = Int(exactly: double) { return int }
            throw WireFormatError(path: path(key), message: "expected an integer, found \(text)")
        default:
            throw WireFormatError(path: path(key), message: "expected an integer, found \(value.kindDescription)")
        }
    }

    /// An optional object member.
    public func object(_ key: String) throws(WireFormatError) -> WireObject? {
        guard let value = self[key] else { return nil }
        return try WireObject(value, path: path(key))
    }

    /// An object member that must be there.
    public func requiredObject(_ key: String) throws(WireFormatError) -> WireObject {
        guard let object = try object(key) else { throw WireFormatError(path: path(key), message: "is required") }
        return object
    }

    /// An optional array member.
    public func array(_ key: String) throws(WireFormatError) -> [JSONValue]? {
        guard let value = self[key] else { return nil }
        guard case .array(let elements) = value else {
            throw WireFormatError(path: path(key), message: "expected an array, found \(value.kindDescription)")
        }
        return elements
    }

    /// An optional array of strings.
    public func stringArray(_ key: String) throws(WireFormatError) -> [String]? {
        guard let elements = try array(key) else { return nil }
        var strings: [String] = []
        strings.reserveCapacity(elements.count)
        for (index, element) in elements.enumerated() {
            guard case .string(let string) = element else {
                throw WireFormatError(path: "\(path(key))[\(index)]", message: "expected a string, found \(element.kindDescription)")
            }
            strings.append(string)
        }
        return strings
    }
}
