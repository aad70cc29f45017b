/// An order-independent digest of a set of records: what a zone holds, or a range of it, as `(recordName, recordChangeTag)`
/// pairs. Two sides that hold the same records compute the same digest, whatever the order they add them in, so a
/// device proves it holds exactly what the server holds by comparing 40 bytes.
///
/// Each record contributes the SHA-256 of its name, a zero byte and its change tag (UTF-8), read as eight big-endian
/// 32-bit lanes; the digest is the lane-wise sum of its records' contributions modulo 2³², with the number of records.
/// The sum makes it a commutative group: a write subtracts the record's old contribution and adds its new one, so the
/// server keeps every zone's digest up to date in the transaction of each write without reading the zone, and a store
/// adds lanes in SQL (no read-modify-write). The lanes are a checksum against accidental divergence, not a commitment:
/// whoever can write records could aim for a collision, and gain only a wrong "in sync" about their own data.
public struct ZoneDigest: Sendable, Hashable, CustomStringConvertible {
    // Eight lanes stored inline: a digest is made and added for every record a write touches, and an array would
    // allocate each time.
    private var l0: UInt32, l1: UInt32, l2: UInt32, l3: UInt32, l4: UInt32, l5: UInt32, l6: UInt32, l7: UInt32
    /// The number of records, as a signed sum, so a change can remove more than it adds.
    public var recordCount: Int64

    /// The lane-wise sums, modulo 2³².
    public var lanes: [UInt32] { [l0, l1, l2, l3, l4, l5, l6, l7] }

    /// The digest of no record.
    public static let empty = ZoneDigest(l0: 0, l1: 0, l2: 0, l3: 0, l4: 0, l5: 0, l6: 0, l7: 0, recordCount: 0)

    private init(l0: UInt32, l1: UInt32, l2: UInt32, l3: UInt32, l4: UInt32, l5: UInt32, l6: UInt32, l7: UInt32, recordCount: Int64) {
        (self.l0, self.l1, self.l2, self.l3, self.l4, self.l5, self.l6, self.l7) = (l0, l1, l2, l3, l4, l5, l6, l7)
        self.recordCount = recordCount
    }

    /// A digest from its stored lanes and count.
    public init(lanes: [UInt32], recordCount: Int64) {
        precondition(lanes.count == 8, "a zone digest has eight lanes")
        self.init(
            l0: lanes[0], l1: lanes[1], l2: lanes[2], l3: lanes[3], l4: lanes[4], l5: lanes[5], l6: lanes[6], l7: lanes[7], recordCount: recordCount)
    }

    /// The digest of one record: the SHA-256 of its name, a zero byte and its change tag, whose eight big-endian words
    /// are the lanes.
    public init(recordName: String, changeTag: String) {
        var message = recordName
        message.append("\u{0}")
        message.append(changeTag)
        let words = message.withUTF8 { SHA256Hash.words(UnsafeRawBufferPointer($0)) }
        self.init(
            l0: words.0, l1: words.1, l2: words.2, l3: words.3, l4: words.4, l5: words.5, l6: words.6, l7: words.7, recordCount: 1)
    }

    /// The digest of these records.
    public init(records: some Sequence<(recordName: String, changeTag: String)>) {
        var digest = ZoneDigest.empty
        for record in records { digest.add(ZoneDigest(recordName: record.recordName, changeTag: record.changeTag)) }
        self = digest
    }

    /// Adds the records of `other`.
    public mutating func add(_ other: ZoneDigest) {
        l0 &+= other.l0
        l1 &+= other.l1
        l2 &+= other.l2
        l3 &+= other.l3
        l4 &+= other.l4
        l5 &+= other.l5
        l6 &+= other.l6
        l7 &+= other.l7
        recordCount += other.recordCount
    }

    /// Removes the records of `other`.
    public mutating func subtract(_ other: ZoneDigest) {
        l0 &-= other.l0
        l1 &-= other.l1
        l2 &-= other.l2
        l3 &-= other.l3
        l4 &-= other.l4
        l5 &-= other.l5
        l6 &-= other.l6
        l7 &-= other.l7
        recordCount -= other.recordCount
    }

    /// This digest with the records of `other` added.
    public func adding(_ other: ZoneDigest) -> ZoneDigest {
        var sum = self
        sum.add(other)
        return sum
    }

    /// The lanes as 64 lowercase hexadecimal digits: the digest's `fingerprint` on the wire.
    public var fingerprint: String {
        var text = ""
        text.reserveCapacity(64)
        for lane in lanes {
            let hex = String(lane, radix: 16)
            text += String(repeating: "0", count: 8 - hex.count) + hex
        }
        return text
    }

    /// Reads a fingerprint and a count; `nil` unless the fingerprint is 64 hexadecimal digits.
    public init?(fingerprint: String, recordCount: Int64) {
        let digits = Array(fingerprint.utf8)
        guard digits.count == 64 else { return nil }
        var lanes = [UInt32](repeating: 0, count: 8)
        for lane in 0..<8 {
            guard let value = UInt32(String(decoding: digits[lane * 8..<lane * 8 + 8], as: UTF8.self), radix: 16) else { return nil }
            lanes[lane] = value
        }
        self.init(lanes: lanes, recordCount: recordCount)
    }

    public var description: String { "\(fingerprint) (\(recordCount) records)" }
}

extension ZoneDigest {
    /// Reads a digest object: `{"fingerprint": "…64 hex digits…", "recordCount": n}`.
    public init(wire object: WireObject) throws(WireFormatError) {
        let fingerprint = try object.requiredString("fingerprint")
        let count = try object.int("recordCount") ?? 0
        guard let digest = ZoneDigest(fingerprint: fingerprint, recordCount: Int64(count)) else {
            throw WireFormatError(path: object.path("fingerprint"), message: "must be 64 hexadecimal digits")
        }
        self = digest
    }
}

extension JSONWriter {
    /// Writes a digest object: `{"fingerprint": …, "recordCount": …}`.
    public mutating func zoneDigest(_ digest: ZoneDigest) {
        beginObject()
        key("fingerprint")
        string(digest.fingerprint)
        key("recordCount")
        int(digest.recordCount)
        endObject()
    }
}

/// SHA-256 (FIPS 180-4) of a short message, in Swift, so the model and the client need no cryptography library: a zone
/// digest hashes one short string per record.
enum SHA256Hash {
    private static let roundConstants: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    /// The 32-byte hash of `message`.
    static func hash(_ message: [UInt8]) -> [UInt8] {
        let hashed = message.withUnsafeBytes { bytes in Self.words(bytes) }
        var output: [UInt8] = []
        output.reserveCapacity(32)
        for word in [hashed.0, hashed.1, hashed.2, hashed.3, hashed.4, hashed.5, hashed.6, hashed.7] {
            output.append(contentsOf: [
                UInt8(word >> 24), UInt8(truncatingIfNeeded: word >> 16), UInt8(truncatingIfNeeded: word >> 8), UInt8(truncatingIfNeeded: word),
            ])
        }
        return output
    }

    typealias Words = (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32)

    /// The hash of `message` as its eight big-endian words, with no allocation on the heap: the padded message and the
    /// schedule live on the stack.
    static func words(_ message: UnsafeRawBufferPointer) -> Words {
        var state: Words = (0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19)
        let blocks = (message.count + 9 + 63) / 64
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: blocks * 64) { padded in
            _ = padded.initialize(from: message)
            padded[message.count] = 0x80
            for index in (message.count + 1)..<(blocks * 64 - 8) { padded[index] = 0 }
            let bitLength = UInt64(message.count) &* 8
            for index in 0..<8 { padded[blocks * 64 - 8 + index] = UInt8(truncatingIfNeeded: bitLength >> UInt64(56 - 8 * index)) }
            return withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { schedule in
                for block in 0..<blocks {
                    let base = block * 64
                    for index in 0..<16 {
                        let offset = base + index * 4
                        schedule[index] =
                            UInt32(padded[offset]) << 24 | UInt32(padded[offset + 1]) << 16 | UInt32(padded[offset + 2]) << 8
                            | UInt32(padded[offset + 3])
                    }
                    for index in 16..<64 {
                        let s0 = rotate(schedule[index - 15], 7) ^ rotate(schedule[index - 15], 18) ^ (schedule[index - 15] >> 3)
                        let s1 = rotate(schedule[index - 2], 17) ^ rotate(schedule[index - 2], 19) ^ (schedule[index - 2] >> 10)
                        schedule[index] = schedule[index - 16] &+ s0 &+ schedule[index - 7] &+ s1
                    }
                    var (a, b, c, d, e, f, g, h) = state
                    for index in 0..<64 {
                        let sum1 = rotate(e, 6) ^ rotate(e, 11) ^ rotate(e, 25)
                        let choice = (e & f) ^ (~e & g)
                        let temp1 = h &+ sum1 &+ choice &+ roundConstants[index] &+ schedule[index]
                        let sum0 = rotate(a, 2) ^ rotate(a, 13) ^ rotate(a, 22)
                        let majority = (a & b) ^ (a & c) ^ (b & c)
                        let temp2 = sum0 &+ majority
                        (h, g, f, e, d, c, b, a) = (g, f, e, d &+ temp1, c, b, a, temp1 &+ temp2)
                    }
                    state = (
                        state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d, state.4 &+ e, state.5 &+ f, state.6 &+ g, state.7 &+ h
                    )
                }
                return state
            }
        }
    }

    @inline(__always)
    private static func rotate(_ value: UInt32, _ count: UInt32) -> UInt32 {
        (value >> count) | (value << (32 - count))
    }
}
