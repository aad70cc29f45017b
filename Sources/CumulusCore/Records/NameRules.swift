import CumulusModel

/// CloudKit's naming rules, checked before anything is stored.
enum NameRules {
    /// Zone names: 1 to 255 printable ASCII characters, no leading underscore (the default zone aside).
    static func checkZoneName(_ name: String, path: @autoclosure () -> String, limits: Limits) throws(CumulusError) {
        if name == ZoneID.defaultZoneName { return }
        try checkPrintableASCII(name, path: path(), limits: limits, allowSpace: true)
        if name.hasPrefix("_") {
            throw CumulusError(.badRequest, "\(path()): zone names cannot start with an underscore")
        }
    }

    /// Record names: 1 to 255 printable ASCII characters without spaces, no leading underscore.
    static func checkRecordName(_ name: String, path: @autoclosure () -> String, limits: Limits) throws(CumulusError) {
        try checkPrintableASCII(name, path: path(), limits: limits, allowSpace: false)
        if name.hasPrefix("_") {
            throw CumulusError(.badRequest, "\(path()): record names cannot start with an underscore")
        }
    }

    /// Record types and field names: a letter, then letters, digits and underscores.
    static func checkIdentifier(_ name: String, kind: String, path: @autoclosure () -> String, limits: Limits) throws(CumulusError) {
        guard !name.isEmpty, name.utf8.count <= limits.maximumNameLength else {
            throw CumulusError(.badRequest, "\(path()): \(kind) must be 1 to \(limits.maximumNameLength) characters")
        }
        var bytes = name.utf8.makeIterator()
        guard let first = bytes.next(), isLetter(first) else {
            throw CumulusError(.badRequest, "\(path()): \(kind) \(name) must start with a letter")
        }
        while let byte = bytes.next() {
            guard isLetter(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_") else {
                throw CumulusError(.badRequest, "\(path()): \(kind) \(name) may contain only letters, digits and underscores")
            }
        }
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }

    private static func checkPrintableASCII(_ name: String, path: @autoclosure () -> String, limits: Limits, allowSpace: Bool) throws(CumulusError) {
        guard !name.isEmpty, name.utf8.count <= limits.maximumNameLength else {
            throw CumulusError(.badRequest, "\(path()): must be 1 to \(limits.maximumNameLength) characters")
        }
        let lowest: UInt8 = allowSpace ? 0x20 : 0x21
        guard name.utf8.allSatisfy({ $0 >= lowest && $0 <= 0x7E }) else {
            throw CumulusError(.badRequest, "\(path()): must contain only printable ASCII characters\(allowSpace ? "" : " without spaces")")
        }
        if allowSpace, name.first == " " || name.last == " " {
            throw CumulusError(.badRequest, "\(path()): cannot start or end with a space")
        }
    }
}
