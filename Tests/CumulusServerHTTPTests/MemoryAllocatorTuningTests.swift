import Testing

@testable import CumulusServerHTTP

@Suite("Memory allocator tuning", .timeLimit(.minutes(10)))
struct MemoryAllocatorTuningTests {
    #if canImport(Glibc)
    @Test func glibcTakesTheFixedThresholds() {
        #expect(MemoryAllocatorTuning.apply(environment: [:]))
        #expect(MemoryAllocatorTuning.apply(environment: ["GLIBC_TUNABLES": "glibc.pthread.rseq=0"]))
    }
    #endif

    @Test func anOperatorsOwnMallocTunablesWin() {
        #expect(!MemoryAllocatorTuning.apply(environment: ["GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"]))
    }
}
