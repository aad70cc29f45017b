import CumulusClient
import CumulusModel
import CumulusStore
import CumulusSyncGRDB
import Foundation
import GRDB
import GhostCarExample

/// The device's own parts of a first sync, without a server or a network (`--only sync-parts`): reading `changes/zone`
/// answers into records, as `CloudDatabase` does with each page, and applying them to an empty device, as the GRDB
/// adapter does for the sync engine. A whole sync's wall time moves with whatever else the machine does; these two
/// are the client's work alone, so a change to their hot paths shows here first (issue 64).
extension Benchmarks {
    static func syncParts(records: Int) async throws {
        let owner = "_" + String(repeating: "5e", count: 16)
        let zoneID = ZoneID(zoneName: GhostCar.zone.zoneName, ownerRecordName: owner)
        let route = Data((0..<675).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let stamp = RecordStamp(timestamp: 1_700_000_000_000, userRecordName: owner, deviceID: "phone")
        // The pages as the server writes them: 200 drives each, as the sync benchmark's.
        func drive(_ index: Int) -> RecordResult {
            let fields: [String: FieldValue] = [
                "startTime": .timestamp(1_700_000_000_000 + Int64(index)), "duration": .double(600), "distance": .double(Double(index)),
                "averageSpeed": .double(14.2), "maxSpeed": .double(31.7), "coordinatesData": .bytes(route),
                "customName": .string("Drive \(index)"), "modifiedAt": .int64(1),
            ]
            let header = RecordHeader(
                recordName: "drive-\(index)", recordType: "Drive", recordChangeTag: ChangeTag.make(Int64(index + 1)), created: stamp, modified: stamp,
                zoneID: zoneID)
            return .record(ResponseRecord(header: header, fields: .values(fields)))
        }
        let pages: [[UInt8]] = stride(from: 0, to: records, by: batchSize).map { first in
            let results = (first..<min(first + batchSize, records)).map(drive)
            return ZoneChangesResponse(zones: [.page(zoneID: zoneID, syncToken: "token-\(first)", moreComing: true, records: results)]).wireBytes
        }

        var read: [[CloudRecord]] = []
        read.reserveCapacity(pages.count)
        let readCPU = processCPUSeconds()
        let readStart = ContinuousClock.now
        for page in pages {
            guard case .page(_, _, _, let results, _)? = try ZoneChangesResponse(wireBytes: page).zones.first else {
                throw BenchmarkError("a page did not read as a page")
            }
            read.append(
                results.compactMap { result in
                    if case .record(let record) = result { return CloudRecord(record) }
                    return nil
                })
        }
        let readSeconds = (ContinuousClock.now - readStart).seconds
        let readCPUSeconds = processCPUSeconds() - readCPU
        print(
            "| the device reads changes/zone pages into records, no server | \(records) | \(format(readSeconds)) | "
                + "\(Int(Double(records) / readSeconds)) | pages of 200, \(pages.first?.count ?? 0) bytes each; the process's CPU \(format(readCPUSeconds)) s |"
        )

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-bench-parts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let pool = try DatabasePool(path: directory.appendingPathComponent("device.sqlite").path)
        try GhostCar.migrate(pool)
        let syncStore = try GRDBSyncStore(writer: pool, scope: "private")
        let adapter = try GRDBSyncAdapter(writer: pool, store: syncStore, tables: [GhostCar.drivesTable()])
        // An engine the adapter reads its database's scope from; it never reaches a server.
        let container = CloudContainer(serverURL: URL(string: "http://127.0.0.1:9")!, containerIdentifier: "iCloud.bench", apiToken: "unused")
        let engine = SyncEngine(.init(database: container.privateCloudDatabase, stateStore: syncStore, delegate: adapter))
        let applyCPU = processCPUSeconds()
        let applyStart = ContinuousClock.now
        for records in read {
            try await adapter.handleEvent(.fetchedRecordZoneChanges(zoneID: zoneID, modified: records, deleted: []), syncEngine: engine)
        }
        let applySeconds = (ContinuousClock.now - applyStart).seconds
        let applyCPUSeconds = processCPUSeconds() - applyCPU
        let count = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM drives") ?? 0 }
        precondition(count == records, "applied \(count) of \(records)")
        print(
            "| the device applies them to an empty GRDB store, no server | \(records) | \(format(applySeconds)) | "
                + "\(Int(Double(records) / applySeconds)) | the adapter's handleEvent, a page a transaction; the process's CPU \(format(applyCPUSeconds)) s |"
        )
    }
}
