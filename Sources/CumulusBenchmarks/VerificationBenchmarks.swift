import CumulusClient
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusSyncGRDB
import Foundation
import GRDB
import GhostCarExample
import HummingbirdTesting
import Logging
import Synchronization

/// A transport that counts the bytes of every request and answer body.
final class CountingTransport: Transport {
    let wrapped: any Transport
    private let counted = Mutex((sent: 0, received: 0, requests: 0))

    init(wrapping wrapped: any Transport) { self.wrapped = wrapped }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        let response = try await wrapped.send(request)
        counted.withLock { $0 = ($0.sent + (request.body?.count ?? 0), $0.received + response.body.count, $0.requests + 1) }
        return response
    }

    /// Bytes both ways and requests since the last call.
    func take() -> (bytes: Int, requests: Int) {
        counted.withLock { counted in
            defer { counted = (0, 0, 0) }
            return (counted.sent + counted.received, counted.requests)
        }
    }
}

extension Benchmarks {
    /// `--only verify`: a device holding a zone of `records` drives proves it is in sync, then finds and repairs ten
    /// differences made behind its engine's back, against the bytes of downloading the zone again.
    static func verification(records: Int) async throws {
        let world = try await BenchWorld.make()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-bench-verify-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer {
            world.cleanUp()
            try? FileManager.default.removeItem(at: directory)
        }
        let (store, logger) = (world.store, world.logger)
        let database = DatabaseRef(
            container: world.container, environment: .development, scope: .private, ownerRecordName: world.user.userRecordName)
        _ = try await store.modifyZones([ZoneOperation(operationType: .create, zoneID: GhostCar.zone)], in: database, timestamp: 0, logger: logger)
        let route = Data((0..<675).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        for batch in stride(from: 0, to: records, by: batchSize) {
            let operations = (batch..<min(batch + batchSize, records)).map { index in
                RecordModification(
                    operationType: .create, recordName: String(format: "drive-%06d", index), recordType: "Drive",
                    fields: [
                        "startTime": .timestamp(1_700_000_000_000 + Int64(index)), "distance": .double(Double(index)),
                        "coordinatesData": .bytes(route),
                        "customName": .string("Drive \(index)"), "modifiedAt": .int64(1),
                    ])
            }
            _ = try await store.modifyRecords(
                RecordBatch(
                    database: database, zoneName: GhostCar.zone.zoneName, atomic: true, operations: operations,
                    author: world.user.userRecordName, deviceID: "d", timestamp: 0), logger: logger)
        }
        var silent = Logger(label: "bench-server")
        silent.logLevel = .warning
        let app = buildApplication(configuration: .throughput, store: store, logger: silent)
        try await app.test(.live) { client in
            let counter = CountingTransport(wrapping: URLSessionTransport())
            var cloud = CloudContainer(
                serverURL: URL(string: "http://127.0.0.1:\(client.port!)")!, containerIdentifier: world.container, apiToken: world.apiToken,
                webAuthToken: world.webToken)
            cloud.transport = counter
            let queue = try DatabasePool(path: directory.appendingPathComponent("device.sqlite").path)
            try GhostCar.migrate(queue)
            let syncStore = try GRDBSyncStore(writer: queue, scope: "private")
            let adapter = try GRDBSyncAdapter(writer: queue, store: syncStore, tables: [GhostCar.drivesTable()])
            let engine = SyncEngine(.init(database: cloud.privateCloudDatabase, stateStore: syncStore, delegate: adapter))
            try await engine.fetchChanges()
            let download = counter.take()

            var start = ContinuousClock.now
            let clean = try await engine.verify(.zoneIDs([GhostCar.zone]))
            var seconds = (ContinuousClock.now - start).seconds
            precondition(clean.allSatisfy(\.isInSync), "\(clean)")
            let inSync = counter.take()
            print(
                "| verify a zone in sync (SyncEngine + GRDB) | \(records) | \(format(seconds)) | \(Int(Double(records) / seconds)) | "
                    + "\(inSync.bytes) bytes in \(inSync.requests) requests; the full download was \(download.bytes) bytes |")

            // Ten differences behind the engine's back: four rows deleted, three changed, three added.
            try await queue.write { db in
                for index in [11, 20_011, 40_011, 60_011] where index < records {
                    try db.execute(sql: "DELETE FROM drives WHERE id = ?", arguments: [String(format: "drive-%06d", index)])
                }
                for index in [5, 30_005, 70_005] where index < records {
                    try db.execute(sql: "UPDATE drives SET customName = 'tampered' WHERE id = ?", arguments: [String(format: "drive-%06d", index)])
                }
                for index in 0..<3 {
                    try db.execute(sql: "INSERT INTO drives (id, distance, modifiedAt) VALUES (?, 1, 1)", arguments: ["stray-\(index)"])
                }
            }
            start = ContinuousClock.now
            let found = try requireBench(try await engine.verify(.zoneIDs([GhostCar.zone])).first)
            let fixed = try await engine.repair([found])
            seconds = (ContinuousClock.now - start).seconds
            precondition(fixed.allSatisfy(\.isInSync), "\(fixed)")
            let differences = found.missing.count + found.extra.count + found.stale.count
            let repair = counter.take()
            print(
                "| verify and repair \(differences) differences | \(records) | \(format(seconds)) | — | "
                    + "\(repair.bytes) bytes in \(repair.requests) requests (reconcile took \(found.roundTrips)), "
                    + "\(String(format: "%.2f", 100 * Double(repair.bytes) / Double(download.bytes)))% of the full download; "
                    + "a verification in sync included |")
        }
    }

    /// Unwraps for a benchmark: there is no test to fail, so a missing value stops the run.
    static func requireBench<T>(_ value: T?) throws -> T {
        guard let value else { throw CancellationError() }
        return value
    }
}
