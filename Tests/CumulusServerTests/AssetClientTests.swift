import CumulusClient
import CumulusModel
import CumulusSyncGRDB
import CumulusTesting
import Foundation
import GRDB
import Synchronization
import Testing

/// The client's assets against a real server: a record saved with a local file uploads it first, a lost upload answer
/// is recovered with a new receipt, and a second device syncs the record and downloads the same bytes.
@Suite("Assets in the client and the sync engine", .timeLimit(.minutes(10)))
struct AssetClientTests {
    static let zone = ZoneID(zoneName: "Receipts")

    static func file(_ bytes: [UInt8]) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-client-asset-\(UUID().uuidString)")
        try Data(bytes).write(to: url)
        return url
    }

    static func isAssetUpload(_ request: TransportRequest) -> Bool { request.url.path.contains("/assets/1/") && request.method == "POST" }

    @Test func aSavedRecordUploadsItsFileAndALostAnswerIsRecovered() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
            var flaky = container(world.alice)
            flaky.transport = faults
            let database = flaky.privateCloudDatabase
            try await database.save(zones: [Self.zone])
            let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }

            // The server stores the first upload's bytes; its answer is lost; the client starts again with a new receipt.
            faults.inject(.dropAnswer, times: 1, when: Self.isAssetUpload)
            var record = CloudRecord(recordType: "Receipt", recordID: RecordID(recordName: "lunch", zoneID: Self.zone))
            record["total"] = .double(12.5)
            record[asset: "photo"] = CloudAsset(fileURL: try Self.file(bytes))
            #expect(record[asset: "photo"] != nil && record["photo"] == nil, "a file to upload, no value yet")
            let result = try await database.modifyRecords(saving: [record], deleting: [], zoneID: Self.zone)
            #expect(result.failedSaves.isEmpty, "\(result.failedSaves.map(\.error))")
            #expect(faults.sentPaths.filter { $0.contains("/assets/1/") }.count == 2, "sent, lost, sent again with a new receipt")
            #expect(result.saved.first?.asset(forKey: "photo")?.size == Int64(bytes.count))

            // Another device reads the record and downloads the bytes; a lost download answer is an error to retry.
            let other = container(world.alice).privateCloudDatabase
            let fetched = try #require(try await other.records(named: ["lunch"], in: Self.zone)["lunch"])
            let asset = try #require(fetched.asset(forKey: "photo"))
            #expect(asset.downloadURL != nil)
            let target = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-download-\(UUID().uuidString)")
            faults.inject(.dropAnswer, times: 1) { $0.url.path.contains("/download/") }
            await #expect(throws: CloudError.self) { try await database.downloadAsset(asset, to: target) }
            try await database.downloadAsset(asset, to: target)
            #expect(try Data(contentsOf: target) == Data(bytes))

            // Progress as an AsyncSequence: progress, then the result.
            var events: [AssetTransfer] = []
            for try await event in database.assetUpload(
                fileAt: try Self.file(bytes), recordName: "dinner", recordType: "Receipt", fieldName: "photo", zoneID: Self.zone)
            {
                events.append(event)
            }
            #expect(events.first == .progress(AssetProgress(completedBytes: 0, totalBytes: Int64(bytes.count))))
            #expect(events.dropLast().last == .progress(AssetProgress(completedBytes: Int64(bytes.count), totalBytes: Int64(bytes.count))))
            guard case .uploaded(let uploaded)? = events.last else {
                Issue.record("no asset at the end: \(events)")
                return
            }
            #expect(uploaded.size == Int64(bytes.count))
            let again = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-download-\(UUID().uuidString)")
            var downloadEvents: [AssetTransfer] = []
            for try await event in database.assetDownload(asset, to: again) { downloadEvents.append(event) }
            #expect(downloadEvents.last == .downloaded(again))
            #expect(downloadEvents.contains { if case .progress(let progress) = $0 { progress.fractionCompleted == 1 } else { false } })
            #expect(try Data(contentsOf: again) == Data(bytes))
        }
    }

    /// A delegate that sends the records it is given and keeps what it fetches.
    final class ReceiptsDelegate: SyncEngineDelegate {
        let outgoing = Mutex<[RecordID: CloudRecord]>([:])
        let fetched = Mutex<[String: CloudRecord]>([:])

        func handleEvent(_ event: SyncEngine.Event, syncEngine: SyncEngine) async throws {
            if case .fetchedRecordZoneChanges(_, let modified, _) = event {
                fetched.withLock { for record in modified { $0[record.recordID.recordName] = record } }
            }
        }

        func nextRecordZoneChangeBatch(_ pending: [PendingRecordZoneChange], syncEngine: SyncEngine) async throws -> RecordZoneChangeBatch? {
            let records = outgoing.withLock { $0 }
            let batch = await RecordZoneChangeBatch(pendingChanges: pending) { records[$0] }
            return batch.recordsToSave.isEmpty && batch.recordIDsToDelete.isEmpty ? nil : batch
        }
    }

    @Test func twoDevicesSyncARecordWithAnAsset() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let database = container(world.alice).privateCloudDatabase
            try await database.save(zones: [Self.zone])
            let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
            let downloads = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-engine-assets-\(UUID().uuidString)")
            func engine(_ name: String, downloadingTo directory: URL? = nil) throws -> (SyncEngine, ReceiptsDelegate) {
                let queue = try DatabaseQueue(path: try SyncEngineTests.temporaryPath(name))
                let delegate = ReceiptsDelegate()
                var account = container(world.alice)
                if directory != nil { account.transport = faults }
                let engine = SyncEngine(
                    SyncEngine.Configuration(
                        database: account.privateCloudDatabase, stateStore: try GRDBSyncStore(writer: queue, scope: "private"),
                        delegate: delegate, sleep: { _ in }, assetDownloads: directory.map { .onFetch(directory: $0) } ?? .onDemand))
                return (engine, delegate)
            }
            let (phone, phoneDelegate) = try engine("phone")
            let (laptop, laptopDelegate) = try engine("laptop")
            let (tablet, tabletDelegate) = try engine("tablet", downloadingTo: downloads)

            let bytes = Array("a photo of the receipt".utf8)
            let id = RecordID(recordName: "dinner", zoneID: Self.zone)
            var record = CloudRecord(recordType: "Receipt", recordID: id)
            record.setAsset(fileAt: try Self.file(bytes), forKey: "photo")
            phoneDelegate.outgoing.withLock { $0[id] = record }
            try await phone.add(pendingRecordZoneChanges: [.saveRecord(id)])
            try await phone.sendChanges()

            try await laptop.fetchChanges()
            let synced = try #require(laptopDelegate.fetched.withLock { $0["dinner"] })
            let asset = try #require(synced.asset(forKey: "photo"))
            let target = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-synced-\(UUID().uuidString)")
            try await database.downloadAsset(asset, to: target)
            #expect(try Data(contentsOf: target) == Data(bytes))
            #expect(synced.downloadedAssets.isEmpty, "on demand: the engine downloads nothing by itself")

            // A device that downloads on fetch has the file before its delegate sees the record, a lost answer retried.
            faults.inject(.dropAnswer, times: 1) { $0.url.path.contains("/download/") }
            try await tablet.fetchChanges()
            let local = try #require(tabletDelegate.fetched.withLock { $0["dinner"] }?.downloadedAssets["photo"])
            #expect(try Data(contentsOf: local) == Data(bytes))
            #expect(faults.sentPaths.filter { $0.contains("/download/") }.count == 2, "lost, then downloaded")
        }
    }

    /// A GRDB table whose `photo` column is a local file: the adapter uploads it when it changed, and another device's
    /// row gets the path of the downloaded file.
    @Test func aGRDBColumnHoldsAnAssetAsALocalFile() async throws {
        let world = try await TestWorld.make()
        try await SyncEngineTests.live(world) { container in
            let table = SyncedTable(
                tableName: "receipts", recordType: "Receipt", zoneID: Self.zone,
                columns: [SyncedColumn("total", type: .double), SyncedColumn("photo", type: .asset)])
            let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
            var account = container(world.alice)
            account.transport = faults
            let database = account.privateCloudDatabase
            try await database.save(zones: [Self.zone])
            func device(_ name: String) throws -> (DatabaseQueue, SyncEngine) {
                let queue = try DatabaseQueue(path: try SyncEngineTests.temporaryPath(name))
                try queue.write { db in try db.execute(sql: "CREATE TABLE receipts (id TEXT PRIMARY KEY NOT NULL, total REAL, photo TEXT)") }
                let store = try GRDBSyncStore(writer: queue, scope: "private")
                let adapter = try GRDBSyncAdapter(writer: queue, store: store, tables: [table])
                let downloads = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-\(name)-assets-\(UUID().uuidString)")
                let engine = SyncEngine(
                    SyncEngine.Configuration(
                        database: database, stateStore: store, delegate: adapter, sleep: { _ in }, assetDownloads: .onFetch(directory: downloads)))
                return (queue, engine)
            }
            let (phoneDatabase, phone) = try device("phone")
            let (laptopDatabase, laptop) = try device("laptop")
            let photo = try Self.file(Array("scan of the receipt".utf8))
            try await phoneDatabase.write { db in
                try db.execute(sql: "INSERT INTO receipts (id, total, photo) VALUES ('lunch', 12.5, ?)", arguments: [photo.path])
            }
            try await phone.add(pendingRecordZoneChanges: [.saveRecord(RecordID(recordName: "lunch", zoneID: Self.zone))])
            try await phone.sendChanges()
            func uploads() -> Int { faults.sentPaths.filter { $0.contains("/assets/1/") && $0.contains("/upload/") }.count }
            #expect(uploads() == 1)

            try await laptop.fetchChanges()
            let path = try #require(
                try await laptopDatabase.read { db in try String.fetchOne(db, sql: "SELECT photo FROM receipts WHERE id = 'lunch'") })
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data("scan of the receipt".utf8))

            // An edit of another column sends the record again without uploading the unchanged file.
            try await phoneDatabase.write { db in try db.execute(sql: "UPDATE receipts SET total = 13 WHERE id = 'lunch'") }
            try await phone.add(pendingRecordZoneChanges: [.saveRecord(RecordID(recordName: "lunch", zoneID: Self.zone))])
            try await phone.sendChanges()
            #expect(uploads() == 1, "the same file is not uploaded again")
            // A new file is.
            let newer = try Self.file(Array("a better scan".utf8))
            try await phoneDatabase.write { db in try db.execute(sql: "UPDATE receipts SET photo = ? WHERE id = 'lunch'", arguments: [newer.path]) }
            try await phone.add(pendingRecordZoneChanges: [.saveRecord(RecordID(recordName: "lunch", zoneID: Self.zone))])
            try await phone.sendChanges()
            #expect(uploads() == 2)
            try await laptop.fetchChanges()
            let updated = try #require(
                try await laptopDatabase.read { db in try String.fetchOne(db, sql: "SELECT photo FROM receipts WHERE id = 'lunch'") })
            #expect(try Data(contentsOf: URL(fileURLWithPath: updated)) == Data("a better scan".utf8))
            #expect(try await laptopDatabase.read { db in try Double.fetchOne(db, sql: "SELECT total FROM receipts WHERE id = 'lunch'") } == 13)
        }
    }
}
