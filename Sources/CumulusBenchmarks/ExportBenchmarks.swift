import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// `users/export` of a large account (`--only export`): the server's memory while it streams the document, in a server
/// process of its own (issue 54: a 600 MB account took it from 122 to 1,322 MB when the document was built whole).
extension Benchmarks {
    static func exportMemory(megabytes: Int) async throws {
        let world = try await BenchWorld.make()
        defer { world.cleanUp() }
        let (store, logger, container, apiToken, user, webToken) =
            (world.store, world.logger, world.container, world.apiToken, world.user, world.webToken)
        let database = DatabaseRef(container: container, environment: .development, scope: .private, ownerRecordName: user.userRecordName)
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Big"))], in: database, timestamp: 0, logger: logger)
        // Records of 900 KB each, near the 1 MB limit: the account's size in ten-record batches.
        let text = String(repeating: "0123456789abcdef", count: 900_000 / 16)
        let count = megabytes * 1_000_000 / 900_000
        for first in stride(from: 0, to: count, by: 10) {
            let operations = (first..<min(first + 10, count)).map { index in
                RecordModification(operationType: .create, recordName: "r\(index)", recordType: "Blob", fields: ["text": .string("\(index) \(text)")])
            }
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: database, zoneName: "Big", atomic: true, operations: operations, author: user.userRecordName, deviceID: "d",
                    timestamp: 0),
                logger: logger)
        }
        let server = try ServerProcess.start(store: world.location)
        defer { server.stop() }
        let before = server.residentMiB
        let request = HTTPClientRequest(
            url: "\(server.url)/database/1/\(container)/development/private/users/export?ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)")
        let start = ContinuousClock.now
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(600))
        guard response.status == .ok else { throw BenchmarkError("users/export answered \(response.status)") }
        var bytes = 0
        for try await chunk in response.body { bytes += chunk.readableBytes }
        let seconds = (ContinuousClock.now - start).seconds
        print(
            "| `users/export` of a \(megabytes) MB account (\(count) records of 900 KB) | \(count) | \(format(seconds)) | "
                + "\(Int(Double(count) / seconds)) | \(bytes / 1_000_000) MB streamed; the server's resident memory \(Int(before)) MiB before, "
                + "\(Int(server.peakResidentMiB)) MiB at its peak |")
    }
}
