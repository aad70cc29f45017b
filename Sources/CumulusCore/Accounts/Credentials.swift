import Crypto
import CryptoExtras
import CumulusModel
import Foundation

/// Random tokens and their stored hashes.
///
/// Tokens carry 256 random bits, so a fast hash (SHA-256) is enough to store them: a stolen database reveals no token.
public enum TokenCodec {
    /// A new random token: 43 URL-safe characters, so it needs no escaping in a query string.
    public static func makeToken() -> String {
        Data(randomBytes(32)).base64URLEncoded
    }

    /// A new API token, shaped like Apple's: 64 lowercase hexadecimal digits (256 random bits).
    ///
    /// Third-party CloudKit clients check this shape before sending anything; tokens issued before in the older
    /// base64url shape keep working, since only the hash is looked up.
    public static func makeAPIToken() -> String {
        hex(randomBytes(32))
    }

    /// A new server-to-server key ID, shaped like CloudKit's: 64 lowercase hexadecimal digits.
    public static func makeKeyID() -> String {
        hex(randomBytes(32))
    }

    /// The stored hash of a token.
    public static func hash(_ token: String) -> [UInt8] {
        Array(SHA256.hash(data: Data(token.utf8)))
    }

    private static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }

    private static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// A new user record name: `_` and 32 hex digits, as CloudKit's look.
    public static func makeUserRecordName() -> String {
        "_" + UUID.random().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    }
}

/// Password hashing with scrypt, stored as `scrypt$N$r$p$salt$hash` (base64) so parameters can change later.
public struct PasswordHasher: Sendable {
    /// CPU/memory cost (a power of two).
    public var rounds: Int
    public var blockSize: Int
    public var parallelism: Int

    /// Interactive-login strength by default (N = 2^15, r = 8, p = 1: 32 MiB, tens of milliseconds).
    public init(rounds: Int = 1 << 15, blockSize: Int = 8, parallelism: Int = 1) {
        self.rounds = rounds
        self.blockSize = blockSize
        self.parallelism = parallelism
    }

    /// Hashes a password with a fresh salt.
    public func hash(_ password: String) throws -> String {
        var generator = SystemRandomNumberGenerator()
        let salt = Data((0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
        let key = try derive(password, salt: salt, rounds: rounds, blockSize: blockSize, parallelism: parallelism)
        return "scrypt$\(rounds)$\(blockSize)$\(parallelism)$\(salt.base64EncodedString())$\(key.base64EncodedString())"
    }

    /// A well-formed hash with this hasher's parameters that no password matches: checked when the user does not exist
    /// (or has no password), so a sign-in costs the same full key derivation either way and its time does not tell
    /// which names exist.
    public var decoy: String {
        "scrypt$\(rounds)$\(blockSize)$\(parallelism)$\(Data(count: 16).base64EncodedString())$\(Data(count: 32).base64EncodedString())"
    }

    /// Checks a password against a stored hash, in constant time.
    public func verify(_ password: String, against stored: String) -> Bool {
        let parts = stored.split(separator: "$").map(String.init)
        guard parts.count == 6, parts[0] == "scrypt", let rounds = Int(parts[1]), let blockSize = Int(parts[2]),
            let parallelism = Int(parts[3]), let salt = Data(base64Encoded: parts[4]), let expected = Data(base64Encoded: parts[5]),
            let key = try? derive(password, salt: salt, rounds: rounds, blockSize: blockSize, parallelism: parallelism)
        else { return false }
        guard key.count == expected.count else { return false }
        var difference: UInt8 = 0
        for (a, b) in zip(key, expected) { difference |= a ^ b }
        return difference == 0
    }

    private func derive(_ password: String, salt: Data, rounds: Int, blockSize: Int, parallelism: Int) throws -> Data {
        let key = try KDF.Scrypt.deriveKey(
            from: Data(password.utf8), salt: salt, outputByteCount: 32, rounds: rounds, blockSize: blockSize, parallelism: parallelism
        )
        return key.withUnsafeBytes { Data($0) }
    }
}

extension Data {
    /// Base64url without padding (RFC 4648 §5).
    var base64URLEncoded: String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
