import Foundation
import Testing

/// `swift run GhostCarDemo` as a newcomer runs it: a server of its own, two devices, and the story told in words.
@Suite("The runnable examples", .serialized, .timeLimit(.minutes(10)))
struct ExampleDemoTests {
    /// Runs a built example to its end: its exit status, and what it printed (both streams).
    static func run(_ name: String) async throws -> (Int32, String) {
        let binary = ServeProcessTests.binary.deletingLastPathComponent().appendingPathComponent(name)
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build it first: swift build --build-tests")
        return try await ServeProcessTests.onThread { () -> (Int32, String) in
            let child = try ChildProcess(binary.path, [], output: .pipe, error: .pipe)
            let stdout = child.standardOutput?.readDataToEndOfFile() ?? Data()
            let stderr = child.standardError?.readDataToEndOfFile() ?? Data()
            return (child.wait(), String(decoding: stdout + stderr, as: UTF8.self))
        }
    }

    @Test func ghostCarDemoSyncsTwoDevicesThroughAServerOfItsOwn() async throws {
        let output = try await Self.run("GhostCarDemo")
        #expect(output.0 == 0, "\(output.1)")
        for line in [
            "tablet: fetched, and now holds “Morning commute”, 12.4 km", "phone:  fetched, and now holds “Commute (fast)”, 12.4 km",
            "tablet fetched, and now holds no drives", "Both devices agree.",
        ] {
            #expect(output.1.contains(line), "\(line) in \(output.1)")
        }
        #expect(!output.1.contains("error"), "nothing logged as an error: \(output.1)")
    }

    @Test func splitCostsDemoSharesAGroupAndDropsItWhenTheParticipantIsRemoved() async throws {
        let output = try await Self.run("SplitCostsDemo")
        #expect(output.0 == 0, "\(output.1)")
        for line in [
            "now holds “Flat” and “Lisbon trip” with Fuel 80.00, Rent 900.00",
            "alice's tablet: now holds “Lisbon trip” with Fuel 80.00, Snacks 12.50",
            "bob's phone now holds “Flat” with Rent 900.00",
        ] {
            #expect(output.1.contains(line), "\(line) in \(output.1)")
        }
        #expect(!output.1.contains("error"), "nothing logged as an error: \(output.1)")
    }
}
