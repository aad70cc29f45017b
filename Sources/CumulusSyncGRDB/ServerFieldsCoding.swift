public import CumulusModel
import Foundation

/// How the server's last version of a record's fields is kept in `cumulus_sync_metadata.server_fields`: a compact
/// binary form, written for every fetched record (the common ancestor of a later merge), where canonical JSON, with
/// its base64 of every `BYTES` field, cost more than writing the row itself.
///
/// Layout: a version byte `1`, then per field: its name (length-prefixed UTF-8), a tag, and the value. Scalars are raw
/// (lengths and integers little-endian); references, locations, assets and lists are their canonical JSON. Rows written
/// before this form (canonical JSON, starting with `{`) still read.
enum ServerFieldsCoding {
    private enum Tag: UInt8 {
        case string = 1, int64, double, timestamp, bytes, json
    }

    static func encode(_ fields: [String: FieldValue]) -> [UInt8] {
        var bytes: [UInt8] = [1]
        bytes.reserveCapacity(16 + fields.count * 32)
        for (name, value) in fields {
            append(Array(name.utf8), to: &bytes)
            switch value {
            case .string(let text):
                bytes.append(Tag.string.rawValue)
                append(Array(text.utf8), to: &bytes)
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
                append(Array(data), to: &bytes)
            case .reference, .location, .asset, .list:
                bytes.append(Tag.json.rawValue)
                append(RecordFieldsCoding.canonical([name: value]), to: &bytes)
            }
        }
        return bytes
    }

    static func decode(_ bytes: [UInt8]) -> [String: FieldValue]? {
        guard let first = bytes.first else { return [:] }
        guard first == 1 else { return try? RecordFieldsCoding.parseCanonical(bytes) }
        var fields: [String: FieldValue] = [:]
        var reader = Reader(bytes: bytes, offset: 1)
        while reader.offset < bytes.count {
            guard let name = reader.chunk().map({ String(decoding: $0, as: UTF8.self) }), let tag = reader.byte().flatMap(Tag.init) else {
                return nil
            }
            switch tag {
            case .string:
                guard let text = reader.chunk() else { return nil }
                fields[name] = .string(String(decoding: text, as: UTF8.self))
            case .int64:
                guard let raw = reader.word() else { return nil }
                fields[name] = .int64(Int64(bitPattern: raw))
            case .double:
                guard let raw = reader.word() else { return nil }
                fields[name] = .double(Double(bitPattern: raw))
            case .timestamp:
                guard let raw = reader.word() else { return nil }
                fields[name] = .timestamp(Int64(bitPattern: raw))
            case .bytes:
                guard let data = reader.chunk() else { return nil }
                fields[name] = .bytes(Data(data))
            case .json:
                guard let json = reader.chunk(), let value = (try? RecordFieldsCoding.parseCanonical(Array(json)))?[name] else { return nil }
                fields[name] = value
            }
        }
        return fields
    }

    private static func append(_ chunk: [UInt8], to bytes: inout [UInt8]) {
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
