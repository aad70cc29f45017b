/// Writes compact JSON into a byte array.
///
/// Responses are written with this writer rather than `JSONEncoder`, so stored record fields (kept as canonical JSON)
/// can be spliced into a response without being decoded and encoded again.
public struct JSONWriter: Sendable {
    /// The bytes written so far.
    public private(set) var bytes: [UInt8]
    private var needsComma = false

    /// Creates a writer.
    public init(reservingCapacity capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// Starts an object (`{`).
    public mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    /// Ends an object (`}`).
    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    /// Starts an array (`[`).
    public mutating func beginArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        needsComma = false
    }

    /// Ends an array (`]`).
    public mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    /// Writes an object key; the next write is its value.
    public mutating func key(_ key: String) {
        separate()
        writeEscaped(key)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    /// Writes a string value.
    public mutating func string(_ value: String) {
        separate()
        writeEscaped(value)
        needsComma = true
    }

    /// Writes bytes as a standard base64 string (with padding), straight into the output: base64 needs no escaping.
    public mutating func base64String(_ input: UnsafeRawBufferPointer) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        let count = input.count
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: (count + 2) / 3 * 4))
        Self.base64Alphabet.withUnsafeBufferPointer { alphabet in
            bytes.withUnsafeMutableBufferPointer { output in
                var out = start
                var index = 0
                while index + 3 <= count {
                    let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
                    output[out] = alphabet[Int(group >> 18)]
                    output[out + 1] = alphabet[Int(group >> 12 & 0x3F)]
                    output[out + 2] = alphabet[Int(group >> 6 & 0x3F)]
                    output[out + 3] = alphabet[Int(group & 0x3F)]
                    index += 3
                    out += 4
                }
                guard index < count else { return }
                let second = index + 1 < count ? UInt32(input[index + 1]) : 0
                let group = UInt32(input[index]) << 16 | second << 8
                output[out] = alphabet[Int(group >> 18)]
                output[out + 1] = alphabet[Int(group >> 12 & 0x3F)]
                output[out + 2] = index + 1 < count ? alphabet[Int(group >> 6 & 0x3F)] : UInt8(ascii: "=")
                output[out + 3] = UInt8(ascii: "=")
            }
        }
        bytes.append(UInt8(ascii: "\""))
        needsComma = true
    }

    private static let base64Alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// Writes an integer value.
    public mutating func int(_ value: some BinaryInteger) {
        separate()
        if let value = Int64(exactly: value) {
            writeDigits(value)
        } else {
            bytes.append(contentsOf: String(value).utf8)
        }
        needsComma = true
    }

    /// A 64-bit integer's decimal digits, written in place: timestamps and change counters are in every record written,
    /// and `String(value)` goes through the generic radix conversion.
    private mutating func writeDigits(_ value: Int64) {
        // Digits are made last to first in a buffer on the stack, then appended at once.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var magnitude = value.magnitude
            var start = 20
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if value < 0 { bytes.append(UInt8(ascii: "-")) }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start..<20]))
        }
    }

    /// Writes a finite double value using its shortest round-tripping form.
    public mutating func double(_ value: Double) {
        separate()
        if value.isFinite {
            bytes.append(contentsOf: value.description.utf8)
        } else {
            bytes.append(contentsOf: "null".utf8)
        }
        needsComma = true
    }

    /// Writes a boolean value.
    public mutating func bool(_ value: Bool) {
        separate()
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
        needsComma = true
    }

    /// Writes `null`.
    public mutating func null() {
        separate()
        bytes.append(contentsOf: "null".utf8)
        needsComma = true
    }

    /// Writes a value that is already valid JSON, as is.
    public mutating func raw(_ json: some Sequence<UInt8>) {
        separate()
        bytes.append(contentsOf: json)
        needsComma = true
    }

    /// Appends bytes to the value being written (the rest of a string written in pieces), with no separator before them.
    public mutating func rawContinuing(_ json: some Sequence<UInt8>) {
        bytes.append(contentsOf: json)
    }

    /// Hands over the bytes written so far and goes on after them, as if they were still there: a long document is
    /// written and sent in pieces.
    public mutating func takeBytes() -> [UInt8] {
        let taken = bytes
        bytes.removeAll(keepingCapacity: true)
        return taken
    }

    /// Writes a parsed JSON value.
    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: null()
        case .bool(let bool): self.bool(bool)
        case .number(let text):
            separate()
            bytes.append(contentsOf: text.utf8)
            needsComma = true
        case .string(let string): self.string(string)
        case .array(let elements):
            beginArray()
            for element in elements { write(element) }
            endArray()
        case .object(let members):
            beginObject()
            for (name, member) in members.sorted(by: { $0.key < $1.key }) {
                key(name)
                write(member)
            }
            endObject()
        }
    }

    private mutating func separate() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    private mutating func writeEscaped(_ string: String) {
        bytes.append(UInt8(ascii: "\""))
        var string = string
        // Native strings are contiguous UTF-8: copy runs that need no escaping in bulk.
        string.withUTF8 { buffer in
            var runStart = 0
            for index in 0..<buffer.count {
                let byte = buffer[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                if runStart < index { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[runStart..<index])) }
                appendEscape(byte)
                runStart = index + 1
            }
            if runStart < buffer.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[runStart...])) }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func appendEscape(_ byte: UInt8) {
        switch byte {
        case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
        case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
        case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
        case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
        case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
        default:
            bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
            bytes.append(Self.hexDigits[Int(byte >> 4)])
            bytes.append(Self.hexDigits[Int(byte & 0xF)])
        }
    }
}
