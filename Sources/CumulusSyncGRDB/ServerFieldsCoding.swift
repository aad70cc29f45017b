import Crypto
public import CumulusModel
import Foundation

/// The server's last version of a record's fields as this device keeps it: the common ancestor of a later merge,
/// which only ever asks whether a value equals the ancestor's.
///
/// So a large `STRING` or `BYTES` value is kept as its SHA-256 digest: the ancestor is written for every fetched record,
/// and keeping a photo or a route twice on the device (once in the app's row, once here) cost more than the row itself.
public struct ServerFields: Sendable, Equatable {
    /// Values kept whole.
    public var values: [String: FieldValue]
    /// Digests of the values kept as digests.
    var digests: [String: [UInt8]]

    public init(_ values: [String: FieldValue]) {
        self.values = values
        self.digests = [:]
    }

    init(values: [String: FieldValue], digests: [String: [UInt8]]) {
        self.values = values
        self.digests = digests
    }

    /// Whether the ancestor's value of `field` is `value` (`nil`: the ancestor has no such field).
    public func holds(_ field: String, _ value: FieldValue?) -> Bool {
        if let digest = digests[field] { return value.flatMap(ServerFieldsCoding.digest) == digest }
        return values[field] == value
    }
}

/// How ``ServerFields`` are kept in `cumulus_sync_metadata.server_fields`: a compact binary form, where canonical JSON,
/// with its base64 of every `BYTES` field, cost more than writing the row itself.
///
/// Layout: a version byte (`2`; `1` before digests), then per field: its name (length-prefixed UTF-8), a tag, and the
/// value. Scalars are raw (lengths and integers little-endian); references, locations, assets and lists are their
/// canonical JSON; strings and bytes longer than ``digestThreshold`` are their digest. Rows written before this form
/// (canonical JSON, starting with `{`) still read.
enum ServerFieldsCoding {
    private enum Tag: UInt8 {
        case string = 1, int64, double, timestamp, bytes, json, digest
    }

    /// Strings and bytes longer than this are kept as a digest: a digest and its tag are 37 bytes.
    static let digestThreshold = 64

    /// The digest of a large string or bytes value, or `nil` for a value kept whole.
    static func digest(_ value: FieldValue) -> [UInt8]? {
        switch value {
        case .string(let text) where text.utf8.count > digestThreshold:
            var hash = SHA256()
            hash.update(data: [Tag.string.rawValue])
            var text = text
            text.withUTF8 { hash.update(bufferPointer: UnsafeRawBufferPointer($0)) }
            return Array(hash.finalize())
        case .bytes(let data) where data.count > digestThreshold:
            var hash = SHA256()
            hash.update(data: [Tag.bytes.rawValue])
            hash.update(data: data)
            return Array(hash.finalize())
        default:
            return nil
        }
    }

    static func encode(_ fields: [String: FieldValue]) -> [UInt8] {
        var bytes: [UInt8] = [2]
        bytes.reserveCapacity(16 + fields.count * 32)
        for (name, value) in fields {
            append(name.utf8, to: &bytes)
            if let digest = digest(value) {
                bytes.append(Tag.digest.rawValue)
                append(digest, to: &bytes)
                continue
            }
            switch value {
            case .string(let text):
                bytes.append(Tag.string.rawValue)
                append(text.utf8, to: &bytes)
            case .int64(let int):
                bytes.append(Tag.int64.rawValue)
                append(UInt64(bitPattern: int), to: &bytes)
            case .double(let double):
                bytes.append(Tag.double.rawValue)
                append(double.bitPattern, to: &bytes)
            case .timestamp(let milliseconds):
                bytes.append(Tag.timestamp.rawValue)
                append(UInt64(bitPattern: milliseconds), to: &bytes)
            case .bytes(let data):
                bytes.append(Tag.bytes.rawValue)
                append(data, to: &bytes)
            case .reference, .location, .asset, .list:
                bytes.append(Tag.json.rawValue)
                append(RecordFieldsCoding.canonical([name: value]), to: &bytes)
            }
        }
        return bytes
    }

    static func decode(_ bytes: [UInt8]) -> ServerFields? {
        guard let first = bytes.first else { return ServerFields([:]) }
        guard first == 1 || first == 2 else { return (try? RecordFieldsCoding.parseCanonical(bytes)).map(ServerFields.init) }
        var fields = ServerFields([:])
        var reader = Reader(bytes: bytes, offset: 1)
        while reader.offset < bytes.count {
            guard let name = reader.chunk().map({ String(decoding: $0, as: UTF8.self) }), let tag = reader.byte().flatMap(Tag.init) else {
                return nil
            }
            switch tag {
            case .string:
                guard let text = reader.chunk() else { return nil }
                fields.values[name] = .string(String(decoding: text, as: UTF8.self))
            case .int64:
                guard let raw = reader.word() else { return nil }
                fields.values[name] = .int64(Int64(bitPattern: raw))
            case .double:
                guard let raw = reader.word() else { return nil }
                fields.values[name] = .double(Double(bitPattern: raw))
            case .timestamp:
                guard let raw = reader.word() else { return nil }
                fields.values[name] = .timestamp(Int64(bitPattern: raw))
            case .bytes:
                guard let data = reader.chunk() else { return nil }
                fields.values[name] = .bytes(Data(data))
            case .json:
                guard let json = reader.chunk(), let value = (try? RecordFieldsCoding.parseCanonical(Array(json)))?[name] else { return nil }
                fields.values[name] = value
            case .digest:
                guard let digest = reader.chunk() else { return nil }
                fields.digests[name] = Array(digest)
            }
        }
        return fields
    }

    private static func append(_ chunk: some Collection<UInt8>, to bytes: inout [UInt8]) {
        append(UInt32(chunk.count), to: &bytes)
        bytes.append(contentsOf: chunk)
    }

    private static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset: Int

        mutating func byte() -> UInt8? {
            guard offset < bytes.count else { return nil }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
            let size = MemoryLayout<T>.size
            guard offset + size <= bytes.count else { return nil }
            var value: T = 0
            for index in 0..<size { value |= T(bytes[offset + index]) << (8 * index) }
            offset += size
            return value
        }

        mutating func word() -> UInt64? { integer(UInt64.self) }

        mutating func chunk() -> ArraySlice<UInt8>? {
            guard let count = integer(UInt32.self).map(Int.init), offset + count <= bytes.count else { return nil }
            defer { offset += count }
            return bytes[offset..<offset + count]
        }
    }
}
