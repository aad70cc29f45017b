import CumulusModel

/// Short GUIDs for share links: 22 URL-safe characters from about 131 random bits (62 symbols each).
public enum ShortGUID {
    /// A new short GUID.
    public static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        return String((0..<22).map { _ in alphabet[Int(generator.next(upperBound: UInt64(alphabet.count)))] })
    }
}
