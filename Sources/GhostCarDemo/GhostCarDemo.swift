import CumulusClient
import CumulusModel
import CumulusSyncGRDB
import DemoServer
import Foundation
import GRDB
import GhostCarExample

/// `swift run GhostCarDemo`: the Ghost Car example (seed 000) on two devices, a phone and a tablet, each with its own
/// SQLite file, syncing through Cumulus. It starts a server of its own on a free port (SQLite in a temporary
/// directory), or uses one you name:
///
///     swift run GhostCarDemo --server http://127.0.0.1:8080 --container iCloud.com.example.ghostcar \
///         --api-token … --web-auth-token …
@main
struct GhostCarDemo {
    static func main() async throws {
        var options: [String: String] = [:]
        var arguments = CommandLine.arguments.dropFirst().makeIterator()
        while let name = arguments.next() {
            guard name.hasPrefix("--"), let value = arguments.next() else {
                print("usage: GhostCarDemo [--server URL --container ID --api-token TOKEN --web-auth-token TOKEN]")
                exit(2)
            }
            options[String(name.dropFirst(2))] = value
        }
        if let server = options["server"].flatMap(URL.init(string:)), let container = options["container"], let apiToken = options["api-token"],
            let webAuthToken = options["web-auth-token"]
        {
            try await run(CloudContainer(serverURL: server, containerIdentifier: container, apiToken: apiToken, webAuthToken: webAuthToken))
        } else {
            try await DemoServer.run(container: "iCloud.com.example.ghostcar", users: ["driver"]) { containers in
                try await run(containers["driver"]!)
            }
        }
    }

    /// Two devices: a drive recorded on the phone appears on the tablet, the tablet's rename reaches the phone, and a
    /// deletion follows.
    static func run(_ container: CloudContainer) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ghost-car-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = container.privateCloudDatabase
        try await database.save(zones: [GhostCar.zone])
        let phone = try GhostCarDevice(path: directory.appendingPathComponent("phone.sqlite").path, database: database)
        let tablet = try GhostCarDevice(path: directory.appendingPathComponent("tablet.sqlite").path, database: database)
        func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

        let id = try phone.recordDrive(name: "Morning commute", distance: 12_400, at: now())
        print("phone:  recorded “Morning commute”, 12.4 km")
        try await phone.engine.sendChanges()
        print("phone:  sent it to the server")
        try await tablet.engine.fetchChanges()
        print("tablet: fetched, and now holds \(try tablet.describe())")

        try tablet.rename(id, to: "Commute (fast)", at: now())
        try await tablet.engine.sendChanges()
        print("tablet: renamed it “Commute (fast)” and sent the change")
        try await phone.engine.fetchChanges()
        print("phone:  fetched, and now holds \(try phone.describe())")

        try phone.delete(id)
        try await phone.engine.sendChanges()
        try await tablet.engine.fetchChanges()
        print("phone:  deleted it; tablet fetched, and now holds \(try tablet.describe())")
        print("Both devices agree. The code is Sources/GhostCarDemo and Sources/GhostCarExample; docs/SYNC.md explains it.")
    }
}
