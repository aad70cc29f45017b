import CumulusClient
import CumulusModel
import DemoServer
import Foundation
import SplitCostsExample

/// `swift run SplitCostsDemo`: seed 001's cost-splitting app. Alice shares a trip with Bob; Bob adds a cost under it
/// from his phone without knowing which zone, owner or database it goes to; Alice's two devices see it; Alice removes
/// Bob and his phone drops the trip, keeping his own group. Each device is its own SQLite file; the server is one of its
/// own, in this process.
@main
struct SplitCostsDemo {
    static func main() async throws {
        try await DemoServer.run(container: "iCloud.com.example.splitcosts", users: ["alice", "bob"]) { containers in
            try await run(alice: containers["alice"]!, bob: containers["bob"]!)
        }
    }

    static func run(alice: CloudContainer, bob: CloudContainer) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("split-costs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        func device(_ container: CloudContainer, _ name: String) throws -> SplitCosts {
            try SplitCosts(container: container, path: directory.appendingPathComponent("\(name).sqlite").path)
        }
        let alicePhone = try device(alice, "alice-phone")
        let aliceTablet = try device(alice, "alice-tablet")
        let bobPhone = try device(bob, "bob-phone")
        try await alicePhone.prepare()
        try await bobPhone.prepare()

        let trip = try alicePhone.createGroup("Lisbon trip")
        try alicePhone.addCost("Fuel", amount: 80, paidBy: "Alice", to: trip)
        try await alicePhone.sync()
        let share = try await alicePhone.share(group: trip, with: ["bob@example.com"])
        guard let url = share.url?.absoluteString else { throw CloudError(code: .invalidResponse, reason: "the share has no URL") }
        print("alice's phone:  created “Lisbon trip” with Fuel 80.00 and shared it with bob@example.com")
        print("                the share's link: \(url)")

        let flat = try bobPhone.createGroup("Flat")
        try bobPhone.addCost("Rent", amount: 900, paidBy: "Bob", to: flat)
        try await bobPhone.accept(url)
        try await bobPhone.sync()
        print("bob's phone:    kept his own “Flat”, accepted the link, and now holds \(try describe(bobPhone))")

        try bobPhone.addCost("Snacks", amount: 12.5, paidBy: "Bob", to: trip)
        try await bobPhone.sync()
        print("bob's phone:    added Snacks 12.50 under the trip (into Alice's zone, through his shared database)")

        try await alicePhone.sync()
        try await aliceTablet.sync()
        print("alice's phone:  now holds \(try describe(alicePhone))")
        print("alice's tablet: now holds \(try describe(aliceTablet))")

        try await alicePhone.remove("bob@example.com", fromGroup: trip)
        try await bobPhone.sync()
        print("alice removed Bob from the trip; bob's phone now holds \(try describe(bobPhone))")
        print("Done. The code is Sources/SplitCostsDemo and Sources/SplitCostsExample; docs/SYNC.md explains it.")
    }

    /// A device's groups and costs, in words.
    static func describe(_ device: SplitCosts) throws -> String {
        let groups = try device.groups().keys.sorted().map { "“\($0)”" }.joined(separator: " and ")
        let costs = try device.costs().sorted { $0.key < $1.key }.map { "\($0.key) \(String(format: "%.2f", $0.value))" }.joined(separator: ", ")
        return "\(groups) with \(costs.isEmpty ? "no costs" : costs)"
    }
}
