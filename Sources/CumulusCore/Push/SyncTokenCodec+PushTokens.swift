import Crypto
public import CumulusModel

/// Push tokens that prove they were issued here: 32 bytes, written as 64 lowercase hexadecimal digits as APNs tokens
/// are, of which 16 are random and 16 are an HMAC of them, the container and the environment under the server's secret.
///
/// A courier poll on a token this server never issued (or issued for another container or environment) is refused
/// with the HMAC alone, before it takes a connection's place or costs a store round trip: made-up tokens cannot hold
/// push connections, however many are sent.
extension SyncTokenCodec {
    private static let pushTokenRandomLength = 16

    /// A new push token for a container environment.
    public func newPushToken(container: String, environment: ContainerEnvironment) -> String {
        var random = [UInt8](repeating: 0, count: Self.pushTokenRandomLength)
        var generator = SystemRandomNumberGenerator()
        for index in random.indices { random[index] = generator.next() }
        return Self.hex(random + pushTokenMAC(random, container: container, environment: environment))
    }

    /// Whether this server issued `token` for the container environment.
    public func isPushToken(_ token: String, container: String, environment: ContainerEnvironment) -> Bool {
        guard let bytes = Self.bytes(hex: token), bytes.count == 2 * Self.pushTokenRandomLength else { return false }
        let random = Array(bytes.prefix(Self.pushTokenRandomLength))
        let expected = pushTokenMAC(random, container: container, environment: environment)
        // Compared in constant time: the answer must not tell how much of a guess was right.
        var difference: UInt8 = 0
        for (sent, made) in zip(bytes.suffix(Self.pushTokenRandomLength), expected) { difference |= sent ^ made }
        return difference == 0
    }

    private func pushTokenMAC(_ random: [UInt8], container: String, environment: ContainerEnvironment) -> [UInt8] {
        // A label of its own, so no other token this secret signs can pass for a push token.
        let message = Array("push-token\u{0}\(container)\u{0}\(environment.rawValue)\u{0}".utf8) + random
        return Array(mac(message).prefix(Self.pushTokenRandomLength))
    }

    private static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    private static func bytes(hex: String) -> [UInt8]? {
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 0x30...0x39: digit - 0x30
            case 0x61...0x66: digit - 0x61 + 10
            default: nil
            }
        }
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}
