import Foundation

/// A message of the Web Services wire format, read and written by one type: the server reads requests and writes
/// responses with it, the client writes requests and reads responses with it, and the OpenAPI description is checked
/// against it (`OpenAPIMessageTests`). Nothing else writes or parses that message.
///
/// Reading is lenient (what real clients send differs); writing is exact (the bytes CloudKit answers with).
public protocol WireMessage: Sendable {
    /// Reads the message from a JSON object; errors name the member.
    init(wire object: WireObject) throws(WireFormatError)
    /// Reads the message from JSON bytes: through a JSON tree unless the message scans its bytes itself (records,
    /// whose answers can be long).
    init(wireBytes bytes: some Collection<UInt8>) throws(WireFormatError)
    /// Writes the message as one JSON object.
    func write(to writer: inout JSONWriter)
}

extension WireMessage {
    /// The message as JSON bytes.
    public var wireBytes: [UInt8] {
        var writer = JSONWriter()
        write(to: &writer)
        return writer.bytes
    }

    /// Reads a message from JSON bytes.
    public init(wireBytes bytes: some Collection<UInt8>) throws(WireFormatError) {
        let value: JSONValue
        do { value = try JSONValue(parsing: bytes) } catch { throw WireFormatError(path: "", message: "not JSON: \(error)") }
        try self.init(wire: WireObject(value, path: ""))
    }
}

/// The error of one item of a batch (a record, a zone, a subscription), as CloudKit answers it in place of the item:
/// the item's identity, then `reason`, `serverErrorCode` and `uuid`.
public struct ItemError: Sendable, Hashable {
    public var code: ServerErrorCode
    public var reason: String
    /// Identifies the error in logs, as CloudKit's envelopes do.
    public var uuid: String
    /// The finer code of a case Web Services has no code for (an extension, ``CKErrorCode``).
    public var ckErrorCode: CKErrorCode?

    /// An error with a fresh `uuid`, or the one given.
    public init(code: ServerErrorCode, reason: String, uuid: String? = nil, ckErrorCode: CKErrorCode? = nil) {
        self.code = code
        self.reason = reason
        self.uuid = uuid ?? UUID.random().uuidString.lowercased()
        self.ckErrorCode = ckErrorCode
    }

    /// Reads the error of an item, or `nil` when the item has none. A code this version does not know fails the read
    /// rather than becoming another code (a client would retry an `INTERNAL_ERROR`).
    public init?(wire object: WireObject) throws(WireFormatError) {
        guard let code = try object.string("serverErrorCode") else { return nil }
        guard let known = ServerErrorCode(rawValue: code) else {
            throw WireFormatError(path: object.path("serverErrorCode"), message: "unknown code \(code)")
        }
        self.code = known
        self.reason = try object.string("reason") ?? code
        self.uuid = try object.string("uuid") ?? ""
        self.ckErrorCode = try object.string("ckErrorCode").flatMap(CKErrorCode.init(rawValue:))
    }

    /// Writes the error's members after the item's identity.
    public func write(to writer: inout JSONWriter) {
        writer.key("reason")
        writer.string(reason)
        writer.key("serverErrorCode")
        writer.string(code.rawValue)
        writer.key("uuid")
        writer.string(uuid)
        if let ckErrorCode {
            writer.key("ckErrorCode")
            writer.string(ckErrorCode.rawValue)
        }
    }
}

extension WireObject {
    /// Reads each element of an array member as an object (an absent member has none), each named by its index in
    /// errors: `zones[2].zoneID`.
    public func objects<Element>(
        _ key: String, _ read: (WireObject) throws(WireFormatError) -> Element
    ) throws(WireFormatError) -> [Element] {
        guard let values = try array(key) else { return [] }
        var elements: [Element] = []
        elements.reserveCapacity(values.count)
        for (index, value) in values.enumerated() {
            elements.append(try read(WireObject(value, path: "\(path(key))[\(index)]")))
        }
        return elements
    }

    /// Reads each element of an array member that must be there (it may be empty) as an object.
    public func requiredObjects<Element>(
        _ key: String, _ read: (WireObject) throws(WireFormatError) -> Element
    ) throws(WireFormatError) -> [Element] {
        guard self[key] != nil else { throw WireFormatError(path: path(key), message: "is required") }
        return try objects(key, read)
    }
}

extension JSONWriter {
    /// Writes `"key": value` when there is a value, nothing when it is `nil`: a message's optional members.
    public mutating func member(_ key: String, _ value: String?) {
        guard let value else { return }
        self.key(key)
        string(value)
    }

    public mutating func member(_ key: String, _ value: Int?) {
        guard let value else { return }
        self.key(key)
        int(value)
    }

    public mutating func member(_ key: String, _ value: Bool?) {
        guard let value else { return }
        self.key(key)
        bool(value)
    }

    public mutating func member(_ key: String, _ value: ZoneID?) {
        guard let value else { return }
        self.key(key)
        zoneID(value)
    }

    /// Writes a member holding a list of strings when there is one.
    public mutating func member(_ key: String, strings: [String]?) {
        guard let strings else { return }
        array(key, strings) { $0.string($1) }
    }

    /// Writes a member holding an array, one element per item.
    public mutating func array<Items: Sequence>(_ key: String, _ items: Items, _ write: (inout JSONWriter, Items.Element) -> Void) {
        self.key(key)
        beginArray()
        for item in items { write(&self, item) }
        endArray()
    }
}
