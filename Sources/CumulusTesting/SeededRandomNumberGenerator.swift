/// A random number generator that a seed determines (SplitMix64), for randomized tests that print their seed on failure
/// and replay it exactly.
///
/// ```swift
/// let seed = UInt64.random(in: 0..<UInt64.max)
/// var random = SeededRandomNumberGenerator(seed: seed)
/// let step = Int.random(in: 0..<10, using: &random)
/// ```
public struct SeededRandomNumberGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) {
        state = seed
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}
