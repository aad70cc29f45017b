#if canImport(Glibc)
import Glibc
#endif

/// Settings of the process's memory allocator for a long-running server, applied once at start.
///
/// glibc's `malloc` adapts its thresholds as it goes: a large block freed raises the size below which blocks come from
/// the heap, and the heap's free top is handed back to the kernel (`madvise`) past twice that. A server answering one
/// request after another then returns and faults in the same pages again and again: a change feed's 300 KB pages
/// spent 12% of their CPU in page faults, and the same code measured 5.3 or 7.3 µs a record depending on which requests
/// had come before. Fixed thresholds make that cost steady and small: blocks under 4 MiB come from the heap, and up to
/// 64 MiB of its free top is kept. Larger blocks (a big request body) still get pages of their own, returned when freed.
///
/// An operator's own `GLIBC_TUNABLES` for `malloc` win: nothing is changed then. Elsewhere than glibc, nothing is
/// changed.
public enum MemoryAllocatorTuning {
    /// Blocks from this size up get pages of their own.
    public static let mmapThreshold = 4 << 20
    /// Free memory at the heap's top kept for the next requests rather than handed back.
    public static let trimThreshold = 64 << 20
    /// Extra room taken whenever the heap grows, so it grows seldom.
    public static let topPad = 16 << 20

    /// Applies the settings; answers whether it did.
    @discardableResult
    public static func apply(environment: [String: String]) -> Bool {
        #if canImport(Glibc)
        if let tunables = environment["GLIBC_TUNABLES"], tunables.contains("glibc.malloc.") { return false }
        // `mallopt` is declared in <malloc.h>, which the Glibc module leaves out: found by name, with its C signature.
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return false }
        let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
        // <malloc.h>'s parameter numbers.
        let (trimThresholdParameter, topPadParameter, mmapThresholdParameter): (Int32, Int32, Int32) = (-1, -2, -3)
        return mallopt(mmapThresholdParameter, Int32(mmapThreshold)) == 1 && mallopt(trimThresholdParameter, Int32(trimThreshold)) == 1
            && mallopt(topPadParameter, Int32(topPad)) == 1
        #else
        return false
        #endif
    }
}
