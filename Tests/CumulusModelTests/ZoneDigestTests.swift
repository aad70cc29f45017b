import Foundation
import Testing

@testable import CumulusModel

@Suite("Zone digests", .timeLimit(.minutes(10)))
struct ZoneDigestTests {
    /// The model's SHA-256 against FIPS 180-4's examples, one and two blocks, and a message at the padding boundary.
    @Test func sha256MatchesTheStandardsVectors() {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        #expect(hex(SHA256Hash.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex(SHA256Hash.hash([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            hex(SHA256Hash.hash(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(
            hex(SHA256Hash.hash(Array(repeating: UInt8(ascii: "a"), count: 55)))
                == "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318")
    }

    @Test func theDigestIgnoresOrderAndSubtractsWhatItAdded() {
        let records = (0..<50).map { (recordName: "r\($0)", changeTag: String($0, radix: 36)) }
        let forward = ZoneDigest(records: records)
        let backward = ZoneDigest(records: records.reversed())
        #expect(forward == backward && forward.recordCount == 50)
        var changed = forward
        changed.subtract(ZoneDigest(recordName: "r7", changeTag: "7"))
        changed.add(ZoneDigest(recordName: "r7", changeTag: "zz"))
        #expect(changed != forward && changed.recordCount == 50)
        changed.subtract(ZoneDigest(recordName: "r7", changeTag: "zz"))
        changed.add(ZoneDigest(recordName: "r7", changeTag: "7"))
        #expect(changed == forward)
        // A different tag, or the same tag under another name, is another digest.
        #expect(ZoneDigest(recordName: "a", changeTag: "bc") != ZoneDigest(recordName: "ab", changeTag: "c"))
    }

    @Test func theFingerprintReadsBackAndRefusesWhatIsNotOne() throws {
        let digest = ZoneDigest(records: [(recordName: "a", changeTag: "1"), (recordName: "b", changeTag: "2")])
        #expect(digest.fingerprint.count == 64)
        #expect(ZoneDigest(fingerprint: digest.fingerprint, recordCount: 2) == digest)
        #expect(ZoneDigest(fingerprint: "xyz", recordCount: 1) == nil)
        #expect(ZoneDigest(fingerprint: String(repeating: "g", count: 64), recordCount: 1) == nil)
        var writer = JSONWriter()
        writer.zoneDigest(digest)
        let read = try ZoneDigest(wire: WireObject(try JSONValue(parsing: writer.bytes), path: "zoneDigest"))
        #expect(read == digest)
        let bad = try JSONValue(parsing: Array(#"{"fingerprint": "00", "recordCount": 1}"#.utf8))
        #expect(throws: WireFormatError(path: "zoneDigest.fingerprint", message: "must be 64 hexadecimal digits")) {
            try ZoneDigest(wire: WireObject(bad, path: "zoneDigest"))
        }
    }

    /// Ranges compare names by their UTF-8 bytes, as both stores sort them, not as Swift orders strings.
    @Test func rangesCompareNamesByTheirBytes() {
        let range = RecordNameRange(lowerBound: "B", upperBound: "a")
        #expect(range.contains("Z"))
        #expect(!range.contains("a") && !range.contains("A"))
        // Swift calls "é" and "e" + U+0301 equal; their bytes differ (C3 A9 against 65 CC 81), and bytes decide.
        #expect(RecordNameRange(upperBound: "\u{E9}").contains("e\u{301}"))
        #expect(!RecordNameRange(upperBound: "e\u{301}").contains("\u{E9}"))
        #expect(RecordNameRange.all.contains(""))
    }
}
