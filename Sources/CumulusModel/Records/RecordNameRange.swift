/// A range of record names, in the byte order of their UTF-8 (the order both stores sort names in, `COLLATE "C"` on
/// PostgreSQL and `BINARY` on SQLite): from `lowerBound`, included, to `upperBound`, excluded; `nil` is open.
public struct RecordNameRange: Sendable, Hashable {
    public var lowerBound: String?
    public var upperBound: String?

    public init(lowerBound: String? = nil, upperBound: String? = nil) {
        self.lowerBound = lowerBound
        self.upperBound = upperBound
    }

    /// Every name.
    public static let all = RecordNameRange()

    /// Whether `name` falls in the range, comparing UTF-8 bytes.
    public func contains(_ name: String) -> Bool {
        if let lowerBound, name.utf8.lexicographicallyPrecedes(lowerBound.utf8) { return false }
        if let upperBound, !name.utf8.lexicographicallyPrecedes(upperBound.utf8) { return false }
        return true
    }
}
