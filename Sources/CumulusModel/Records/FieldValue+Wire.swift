import Foundation

// MARK: - Reading

extension FieldValue {
    /// Reads a record field dictionary `{"value": …, "type": …}`.
    ///
    /// `type` is optional, as in CloudKit Web Services: when it is absent the type is inferred from the value's JSON
    /// shape (a string is `STRING`, an integer `INT64`, a fraction `DOUBLE`, an object with `recordName` a
    /// `REFERENCE`, and so on). `BYTES` and `TIMESTAMP` cannot be told apart from `STRING` and `INT64` by shape, so
    /// clients send `type` for them.
    ///
    /// - Returns: The value, or `nil` when the field is null (which clears the field).
    public static func read(field json: JSONValue, path: @autoclosure () -> String) throws(WireFormatError) -> FieldValue? {
        // The common case, `{"value": scalar, "type": "TAG"}` as CloudKit writes it, reads without building a path
        // (this runs for every field of every record written); an error is placed after the fact.
        if case .object(let members) = json, case .string(let tag)? = members["type"], let type = FieldType(rawValue: tag),
            type.throwsAtItsOwnPath, let value = members["value"], !value.isNull
        {
            do {
                return try read(value, as: type, path: "")
            } catch {
                let object = try WireObject(json, path: path())
                throw WireFormatError(path: object.path("value"), message: error.message)
            }
        }
        let object = try WireObject(json, path: path())
        guard let value = object["value"] else { return nil }
        let valuePath = object.path("value")
        guard let tag = try object.string("type") else {
            return try infer(value, path: valuePath)
        }
        // The common case, a scalar tag as CloudKit writes it, without case folding: this runs for every field read.
        if let type = FieldType(rawValue: tag) {
            return try read(value, as: type, path: valuePath)
        }
        let normalized = tag.uppercased()
        if normalized.hasSuffix("_LIST") {
            let elementTag = String(normalized.dropLast(5))
            guard case .array(let elements) = value else {
                throw WireFormatError(path: valuePath, message: "expected an array for \(tag), found \(value.kindDescription)")
            }
            if elementTag == "UNKNOWN" {
                return try inferList(elements, path: valuePath)
            }
            guard let elementType = FieldType(wireTag: elementTag) else {
                throw WireFormatError(path: object.path("type"), message: "unknown field type \(tag)")
            }
            var values: [FieldValue] = []
            values.reserveCapacity(elements.count)
            for (index, element) in elements.enumerated() {
                values.append(try read(element, as: elementType, path: "\(valuePath)[\(index)]"))
            }
            return .list(elementType, values)
        }
        guard let type = FieldType(wireTag: normalized) else {
            throw WireFormatError(path: object.path("type"), message: "unknown field type \(tag)")
        }
        return try read(value, as: type, path: valuePath)
    }

    /// Reads a record field dictionary from a scanner, by the same rules as ``read(field:path:)``.
    ///
    /// Scalar values (all but lists, references, locations and assets) are read without a tree, and `BYTES` are decoded
    /// from the document's bytes: this is the change feed's hot path. `path` is built only for an error.
    public static func read(scanning scanner: inout JSONScanner, path: @autoclosure () -> String) throws -> FieldValue? {
        var sentType = false
        return try read(scanning: &scanner, path: path(), sentType: &sentType)
    }

    /// Reads a record field dictionary from a scanner, and tells whether it named its type (see ``sendsType(_:)``).
    static func read(scanning scanner: inout JSONScanner, path: @autoclosure () -> String, sentType: inout Bool) throws -> FieldValue? {
        enum Member {
            case string(JSONScanner.StringToken)
            case other(JSONValue)
        }
        var value: Member?
        var tag: String?
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            switch key {
            case "value":
                value = try scanner.peek() == .string ? .string(try scanner.readStringToken()) : .other(try scanner.readValue())
            case "type":
                tag = try scanner.readNull() ? nil : try scanner.readString()
            default:
                try scanner.skipValue()
            }
        }
        sentType = tag.map(Self.namesType) ?? false
        let json: JSONValue
        switch value {
        case nil, .other(.null)?:
            return nil
        case .string(let token)? where tag == FieldType.bytes.rawValue:
            guard let data = scanner.withBytes(of: token, { Data(lenientBase64: $0) }) else {
                throw WireFormatError(path: path() + ".value", message: "expected base64 for BYTES")
            }
            return .bytes(data)
        case .string(let token)?:
            json = .string(scanner.string(token))
        case .other(let other)?:
            json = other
        }
        // A scalar tag as CloudKit writes it, the common case; the rest (lists, references, inferred types) as a tree.
        if let tag, let type = FieldType(rawValue: tag), type.throwsAtItsOwnPath {
            do {
                return try read(json, as: type, path: "")
            } catch {
                throw WireFormatError(path: path() + ".value", message: error.message)
            }
        }
        return try read(field: .object(["value": json, "type": tag.map(JSONValue.string) ?? .null]), path: path())
    }

    /// Whether a field dictionary names its value's type: a `type` other than `UNKNOWN_LIST`. A value sent without one
    /// was typed from its JSON shape, and is read again as the schema's type of its field when that differs (see
    /// ``converted(to:)``).
    public static func sendsType(_ field: JSONValue) -> Bool {
        guard case .object(let members) = field, case .string(let tag)? = members["type"] else { return false }
        return namesType(tag)
    }

    private static func namesType(_ tag: String) -> Bool {
        tag.utf8.count != 12 || tag.uppercased() != "UNKNOWN_LIST"
    }

    /// This value, sent without `type` and so typed from its JSON shape, read as `type` would have read it, had the
    /// client sent that; `nil` when the JSON it came from does not read as `type`.
    ///
    /// CloudKit Web Services lets a request leave `type` out and infers it from the schema. A number is `INT64` or
    /// `DOUBLE` by its shape and a string `STRING`, so a whole-number `DOUBLE`, a `TIMESTAMP` (milliseconds) or `BYTES`
    /// (base64) sent so reads here as its field's type in the schema: a number as `DOUBLE`, `INT64` (when whole) or
    /// `TIMESTAMP`, a string as `BYTES` (base64) or as a number, an array element by element into the matching list.
    /// Objects are typed by their keys (`recordName`, `latitude`, `receipt`…), which already tell them apart.
    public func converted(to type: SchemaFieldType) -> FieldValue? {
        if SchemaFieldType(of: self) == type { return self }
        switch self {
        case .list(_, let elements):
            guard type.isList else { return nil }
            var converted: [FieldValue] = []
            converted.reserveCapacity(elements.count)
            for element in elements {
                guard let value = element.scalarConverted(to: type.base) else { return nil }
                converted.append(value)
            }
            return .list(type.base, converted)
        default:
            guard !type.isList else { return nil }
            return scalarConverted(to: type.base)
        }
    }

    private func scalarConverted(to type: FieldType) -> FieldValue? {
        if self.type == type { return self }
        // The JSON the value was read from, for the shapes a conversion starts from.
        let json: JSONValue
        switch self {
        case .string(let string): json = .string(string)
        case .int64(let int): json = .number(String(int))
        case .double(let double): json = .number("\(double)")
        default: return nil
        }
        return try? Self.read(json, as: type, path: "")
    }

    /// Reads a scalar value of a known type.
    public static func read(_ value: JSONValue, as type: FieldType, path: String) throws(WireFormatError) -> FieldValue {
        switch type {
        case .string:
            guard case .string(let string) = value else { throw mismatch(value, type, path) }
            return .string(string)
        case .int64:
            return .int64(try readInt64(value, type: type, path: path))
        case .double:
            return .double(try readDouble(value, type: type, path: path))
        case .timestamp:
            switch value {
            case .number(let text), .string(let text):
                if let int = Int64(text) { return .timestamp(int) }
                if let double = Double(text), double.isFinite, let int = Int64(exactly: double.rounded()) { return .timestamp(int) }
                throw WireFormatError(path: path, message: "expected milliseconds since the epoch for TIMESTAMP, found \(text)")
            default:
                throw mismatch(value, type, path)
            }
        case .bytes:
            guard case .string(let string) = value else { throw mismatch(value, type, path) }
            guard let data = Data(lenientBase64: string) else {
                throw WireFormatError(path: path, message: "expected base64 for BYTES")
            }
            return .bytes(data)
        case .reference:
            return .reference(try Reference(wire: value, path: path))
        case .location:
            return .location(try Location(wire: value, path: path))
        case .asset:
            return .asset(try Asset(wire: value, path: path))
        }
    }

    private static func mismatch(_ value: JSONValue, _ type: FieldType, _ path: String) -> WireFormatError {
        WireFormatError(path: path, message: "expected a value of type \(type.rawValue), found \(value.kindDescription)")
    }

    public static func readInt64(_ value: JSONValue, type: FieldType, path: String) throws(WireFormatError) -> Int64 {
        switch value {
        case .number(let text), .string(let text):
            if let int = Int64(text) { return int }
            if let double = Double(text), double.isFinite, double.rounded() == double, let int = Int64(exactly: double) { return int }
            throw WireFormatError(path: path, message: "expected a 64-bit integer for \(type.rawValue), found \(text)")
        case .bool(let bool):
            return bool ? 1 : 0
        default:
            throw mismatch(value, type, path)
        }
    }

    public static func readDouble(_ value: JSONValue, type: FieldType, path: String) throws(WireFormatError) -> Double {
        switch value {
        case .number(let text), .string(let text):
            guard let double = Double(text) else {
                throw WireFormatError(path: path, message: "expected a number for \(type.rawValue), found \(text)")
            }
            guard double.isFinite else { throw WireFormatError(path: path, message: "must be a finite number") }
            return double
        default:
            throw mismatch(value, type, path)
        }
    }

    private static func infer(_ value: JSONValue, path: String) throws(WireFormatError) -> FieldValue {
        switch value {
        case .array(let elements):
            return try inferList(elements, path: path)
        default:
            return try read(value, as: inferType(value, path: path), path: path)
        }
    }

    private static func inferList(_ elements: [JSONValue], path: String) throws(WireFormatError) -> FieldValue {
        guard let first = elements.first else { return .list(nil, []) }
        var elementType = try inferType(first, path: "\(path)[0]")
        // A list mixing integers and fractions is a DOUBLE list.
        if elementType == .int64, elements.contains(where: { if case .number(let text) = $0 { return !isIntegral(text) } else { return false } }) {
            elementType = .double
        }
        var values: [FieldValue] = []
        values.reserveCapacity(elements.count)
        for (index, element) in elements.enumerated() {
            values.append(try read(element, as: elementType, path: "\(path)[\(index)]"))
        }
        return .list(elementType, values)
    }

    private static func isIntegral(_ text: String) -> Bool {
        !text.utf8.contains(where: { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") })
    }

    private static func inferType(_ value: JSONValue, path: String) throws(WireFormatError) -> FieldType {
        switch value {
        case .string: return .string
        case .bool: return .int64
        // An integer past INT64's range is a DOUBLE, as a fraction is (it can only be stored as one).
        case .number(let text): return isIntegral(text) && Int64(text) != nil ? .int64 : .double
        case .object(let members):
            if members["recordName"] != nil { return .reference }
            if members["latitude"] != nil || members["longitude"] != nil { return .location }
            if members["fileChecksum"] != nil || members["receipt"] != nil || members["downloadURL"] != nil || members["size"] != nil {
                return .asset
            }
            throw WireFormatError(path: path, message: "cannot infer the field type of this object; send \"type\"")
        case .array:
            throw WireFormatError(path: path, message: "lists cannot be nested")
        case .null:
            throw WireFormatError(path: path, message: "list elements cannot be null")
        }
    }
}

extension FieldType {
    /// Reads a scalar type tag, accepting `ASSET` for `ASSETID`.
    public init?(wireTag: String) {
        if wireTag == "ASSET" {
            self = .asset
        } else {
            self.init(rawValue: wireTag)
        }
    }
}

extension Reference {
    /// Reads a reference dictionary `{recordName, zoneID, action}`; `action` defaults to `NONE`.
    public init(wire value: JSONValue, path: String) throws(WireFormatError) {
        let object = try WireObject(value, path: path)
        let recordName = try object.requiredString("recordName")
        let zoneID = try object.object("zoneID").map { (zone) throws(WireFormatError) in try ZoneID(wire: zone) }
        var action = Action.none
        if let tag = try object.string("action") {
            guard let parsed = Action(rawValue: tag.uppercased()) else {
                throw WireFormatError(path: object.path("action"), message: "expected NONE, DELETE_SELF or VALIDATE, found \(tag)")
            }
            action = parsed
        }
        self.init(recordName: recordName, zoneID: zoneID, action: action)
    }
}

extension Location {
    /// Reads a location dictionary; latitude and longitude are required and range-checked.
    public init(wire value: JSONValue, path: String) throws(WireFormatError) {
        let object = try WireObject(value, path: path)
        func double(_ key: String, required: Bool = false) throws(WireFormatError) -> Double? {
            guard let member = object[key] else {
                if required { throw WireFormatError(path: object.path(key), message: "is required") }
                return nil
            }
            return try FieldValue.readDouble(member, type: .location, path: object.path(key))
        }
        let latitude = try double("latitude", required: true)!
        let longitude = try double("longitude", required: true)!
        guard (-90...90).contains(latitude) else {
            throw WireFormatError(path: object.path("latitude"), message: "must be between -90 and 90")
        }
        guard (-180...180).contains(longitude) else {
            throw WireFormatError(path: object.path("longitude"), message: "must be between -180 and 180")
        }
        var timestamp: Int64?
        if let member = object["timestamp"] {
            timestamp = try FieldValue.readInt64(member, type: .timestamp, path: object.path("timestamp"))
        }
        self.init(
            latitude: latitude, longitude: longitude,
            horizontalAccuracy: try double("horizontalAccuracy"), verticalAccuracy: try double("verticalAccuracy"),
            altitude: try double("altitude"), speed: try double("speed"), speedAccuracy: try double("speedAccuracy"),
            course: try double("course"), courseAccuracy: try double("courseAccuracy"), timestamp: timestamp
        )
    }
}

extension Asset {
    /// Reads an asset dictionary.
    public init(wire value: JSONValue, path: String) throws(WireFormatError) {
        let object = try WireObject(value, path: path)
        var size: Int64?
        if let member = object["size"] {
            size = try FieldValue.readInt64(member, type: .asset, path: object.path("size"))
        }
        self.init(
            fileChecksum: try object.string("fileChecksum"), size: size,
            referenceChecksum: try object.string("referenceChecksum"), wrappingKey: try object.string("wrappingKey"),
            receipt: try object.string("receipt"), downloadURL: try object.string("downloadURL")
        )
    }
}

extension Data {
    /// Decodes standard or URL-safe base64, with or without padding, ignoring whitespace.
    init?(lenientBase64 string: String) {
        var string = string
        guard let data = string.withUTF8({ Data(lenientBase64: $0) }) else { return nil }
        self = data
    }

    /// Decodes standard or URL-safe base64 from UTF-8 bytes, with or without padding, ignoring whitespace.
    init?(lenientBase64 bytes: UnsafeBufferPointer<UInt8>) {
        var decoded = Data(count: bytes.count / 4 * 3 + 3)
        var count = 0
        let valid = decoded.withUnsafeMutableBytes { (output: UnsafeMutableRawBufferPointer) -> Bool in
            base64Digits.withUnsafeBufferPointer { table in
                // Whole groups of four digits first (nearly all of a value), then the general loop for whatever follows.
                var start = 0
                while start + 4 <= bytes.count {
                    let (first, second, third, fourth) = (
                        table[Int(bytes[start])], table[Int(bytes[start + 1])], table[Int(bytes[start + 2])], table[Int(bytes[start + 3])]
                    )
                    // Padding, whitespace or a stray byte (no digit: 64 or more) is left to the general loop.
                    guard first | second | third | fourth < 64 else { break }
                    let group = UInt32(first) << 18 | UInt32(second) << 12 | UInt32(third) << 6 | UInt32(fourth)
                    output[count] = UInt8(truncatingIfNeeded: group >> 16)
                    output[count + 1] = UInt8(truncatingIfNeeded: group >> 8)
                    output[count + 2] = UInt8(truncatingIfNeeded: group)
                    count += 3
                    start += 4
                }
                return Self.decodeBase64Rest(
                    UnsafeBufferPointer(rebasing: bytes[start...]), digitsBefore: start, into: output, at: &count, table: table)
            }
        }
        guard valid else { return nil }
        decoded.count = count
        self = decoded
    }

    /// Decodes the digits, padding and whitespace after the whole groups ``init(lenientBase64:)-(UnsafeBufferPointer<UInt8>)``
    /// read; `false` for what is not base64.
    private static func decodeBase64Rest(
        _ bytes: UnsafeBufferPointer<UInt8>, digitsBefore: Int, into output: UnsafeMutableRawBufferPointer, at count: inout Int,
        table base64Digits: UnsafeBufferPointer<UInt8>
    ) -> Bool {
        var accumulator: UInt32 = 0
        var bits = 0
        var digits = digitsBefore
        var padding = 0
        for byte in bytes {
            let digit = base64Digits[Int(byte)]
            if digit < 64 {
                // Nothing but padding and whitespace may follow padding.
                guard padding == 0 else { return false }
                accumulator = accumulator << 6 | UInt32(digit)
                bits += 6
                digits += 1
                if bits >= 8 {
                    bits -= 8
                    output[count] = UInt8(truncatingIfNeeded: accumulator >> UInt32(bits))
                    count += 1
                }
            } else if byte == UInt8(ascii: "=") {
                padding += 1
            } else if digit != base64Whitespace {
                return false
            }
        }
        // One digit alone cannot make a byte; padding, when present, completes the last group of four.
        return digits % 4 != 1 && (padding == 0 || (digits + padding) % 4 == 0) && padding <= 2
    }
}

private let base64Whitespace: UInt8 = 0xFE

/// Each byte's base64 digit (both alphabets), `base64Whitespace`, or 0xFF for a byte that is neither.
private let base64Digits: [UInt8] = {
    var table = [UInt8](repeating: 0xFF, count: 256)
    for (index, byte) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8.enumerated() { table[Int(byte)] = UInt8(index) }
    table[Int(UInt8(ascii: "-"))] = 62
    table[Int(UInt8(ascii: "_"))] = 63
    for byte in " \t\r\n".utf8 { table[Int(byte)] = base64Whitespace }
    return table
}()

// MARK: - Writing

/// Options for writing record fields.
public struct FieldWriteOptions: Sendable {
    /// Write `INT64` and `DOUBLE` values as strings (`numbersAsStrings` in requests).
    public var numbersAsStrings: Bool
    /// Makes the `downloadURL` of an asset from its `receipt`; `nil` writes assets as stored.
    public var assetDownloadURL: (@Sendable (String) -> String?)?

    /// Creates options.
    public init(numbersAsStrings: Bool = false, assetDownloadURL: (@Sendable (String) -> String?)? = nil) {
        self.numbersAsStrings = numbersAsStrings
        self.assetDownloadURL = assetDownloadURL
    }
}

extension JSONWriter {
    /// Writes a record field dictionary `{"value": …, "type": …}`; `type` is always written.
    public mutating func field(_ value: FieldValue, options: FieldWriteOptions = .init()) {
        beginObject()
        key("value")
        fieldValue(value, options: options)
        key("type")
        string(value.typeTag)
        endObject()
    }

    /// Writes a bare field value (the `value` of a field dictionary).
    public mutating func fieldValue(_ value: FieldValue, options: FieldWriteOptions = .init()) {
        switch value {
        case .string(let string): self.string(string)
        case .int64(let int): options.numbersAsStrings ? self.string(String(int)) : self.int(int)
        case .double(let double): options.numbersAsStrings ? self.string(double.description) : self.double(double)
        case .timestamp(let milliseconds): self.int(milliseconds)
        case .bytes(let data): data.withUnsafeBytes { base64String($0) }
        case .reference(let reference): self.reference(reference)
        case .location(let location): self.location(location)
        case .asset(var asset):
            // A download URL is made for each reader when the record is read, never kept from what a client sent.
            if let makeURL = options.assetDownloadURL {
                asset.downloadURL = asset.receipt.flatMap(makeURL)
            }
            self.asset(asset)
        case .list(_, let values):
            beginArray()
            for element in values { fieldValue(element, options: options) }
            endArray()
        }
    }

    /// Writes a reference dictionary.
    public mutating func reference(_ reference: Reference) {
        beginObject()
        key("recordName")
        string(reference.recordName)
        if let zoneID = reference.zoneID {
            key("zoneID")
            self.zoneID(zoneID)
        }
        key("action")
        string(reference.action.rawValue)
        endObject()
    }

    private mutating func location(_ location: Location) {
        beginObject()
        key("latitude")
        double(location.latitude)
        key("longitude")
        double(location.longitude)
        let optionals: [(String, Double?)] = [
            ("horizontalAccuracy", location.horizontalAccuracy), ("verticalAccuracy", location.verticalAccuracy),
            ("altitude", location.altitude), ("speed", location.speed), ("speedAccuracy", location.speedAccuracy),
            ("course", location.course), ("courseAccuracy", location.courseAccuracy),
        ]
        for case (let name, let value?) in optionals {
            key(name)
            double(value)
        }
        if let timestamp = location.timestamp {
            key("timestamp")
            int(timestamp)
        }
        endObject()
    }

    private mutating func asset(_ asset: Asset) {
        beginObject()
        let strings: [(String, String?)] = [
            ("fileChecksum", asset.fileChecksum), ("referenceChecksum", asset.referenceChecksum),
            ("wrappingKey", asset.wrappingKey), ("receipt", asset.receipt), ("downloadURL", asset.downloadURL),
        ]
        for case (let name, let value?) in strings {
            key(name)
            string(value)
        }
        if let size = asset.size {
            key("size")
            int(size)
        }
        endObject()
    }

    /// Writes a fields dictionary with keys in sorted order, so equal records encode to equal bytes.
    public mutating func fields(_ fields: [String: FieldValue], options: FieldWriteOptions = .init()) {
        beginObject()
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
            key(name)
            field(value, options: options)
        }
        endObject()
    }

    /// Writes the fields a request sent, leaving out those it cleared (`nil`), as ``fields(_:options:)`` would write
    /// the rest.
    public mutating func fields(sent fields: [String: FieldValue?], options: FieldWriteOptions = .init()) {
        beginObject()
        for case (let name, let value?) in fields.sorted(by: { $0.key < $1.key }) {
            key(name)
            field(value, options: options)
        }
        endObject()
    }
}

extension FieldType {
    /// Whether ``FieldValue/read(_:as:path:)`` throws for a value of this type only at the path it is given (never at
    /// a member's), so a read with an empty path can be placed afterwards: the scalar types.
    fileprivate var throwsAtItsOwnPath: Bool {
        switch self {
        case .string, .int64, .double, .timestamp, .bytes: true
        case .reference, .location, .asset: false
        }
    }
}
