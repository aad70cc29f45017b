public import CumulusModel
public import Foundation

/// The outcome of `records/modify`, split like CKSyncEngine's sent-changes event.
public struct ModifyRecordsResult: Sendable {
    public struct FailedSave: Sendable {
        public var record: CloudRecord
        public var error: CloudError
    }

    public var saved: [CloudRecord] = []
    public var deleted: [RecordID] = []
    public var failedSaves: [FailedSave] = []
    public var failedDeletes: [RecordID: CloudError] = [:]
}

/// Zones changed or deleted in a database since a token.
public struct DatabaseChanges: Sendable {
    public var changed: [ZoneID]
    public var deleted: [ZoneID]
    public var syncToken: String
    public var moreComing: Bool
}

/// Records changed or deleted in a zone since a token.
public struct ZoneChanges: Sendable {
    public struct Deletion: Sendable, Hashable {
        public var recordID: RecordID
        public var recordType: String?
    }

    public var zoneID: ZoneID
    public var records: [CloudRecord]
    public var deletions: [Deletion]
    public var syncToken: String
    public var moreComing: Bool
    /// On the page that ends the feed, the digest of the zone as this caller sees it at ``syncToken``: a device that
    /// applied every page holds exactly the records it sums (see ``ZoneDigest``).
    public var digest: ZoneDigest?

    public init(zoneID: ZoneID, records: [CloudRecord], deletions: [Deletion], syncToken: String, moreComing: Bool, digest: ZoneDigest? = nil) {
        self.zoneID = zoneID
        self.records = records
        self.deletions = deletions
        self.syncToken = syncToken
        self.moreComing = moreComing
        self.digest = digest
    }
}

/// What a share link leads to.
public struct ShareMetadata: Sendable, Hashable {
    public var shortGUID: String
    /// The owner's zone, as the recipient's shared database names it.
    public var zoneID: ZoneID
    public var rootRecordName: String?
    public var participantStatus: ParticipantStatus?
    public var participantPermission: SharePermission?
}

/// What an asset transfer reports, in order: progress, then its result.
public enum AssetTransfer: Sendable, Hashable {
    case progress(AssetProgress)
    /// An upload finished: the asset to save in the record's field.
    case uploaded(Asset)
    /// A download finished: the file.
    case downloaded(URL)
}

/// A database of a container, shaped like CKDatabase, over CloudKit Web Services.
public struct CloudDatabase: Sendable {
    public let container: CloudContainer
    public let scope: DatabaseScope

    private func path(_ operation: String) -> String {
        "database/1/\(container.containerIdentifier)/\(container.environment.rawValue)/\(scope.rawValue)/\(operation)"
    }

    func postForBytes(_ operation: String, _ build: (inout JSONWriter) -> Void) async throws(CloudError) -> [UInt8] {
        try await container.postForBytes(path: path(operation), body: Self.requestBody(build))
    }

    /// Sends a request message and reads the answer as the message type the server writes.
    func send<Answer: WireMessage>(_ operation: String, _ message: some WireMessage, answer: Answer.Type) async throws(CloudError) -> Answer {
        try Self.read(Answer.self, try await container.postForBytes(path: path(operation), body: message.wireBytes), operation: operation)
    }

    private static func requestBody(_ build: (inout JSONWriter) -> Void) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        build(&writer)
        writer.endObject()
        return writer.bytes
    }

    // MARK: - Zones

    /// All zones of the database.
    public func allZones() async throws(CloudError) -> [ZoneID] {
        let json = try await postForBytes("zones/list") { _ in }
        do {
            return try ZonesResponse(wireBytes: json).zones.map(\.zoneID)
        } catch {
            throw CloudError(code: .invalidResponse, reason: "zones/list: \(error.path): \(error.message)")
        }
    }

    /// Creates zones (creating an existing zone succeeds).
    public func save(zones: [ZoneID]) async throws(CloudError) {
        try await modifyZones(zones.map { ZoneOperation(operationType: .create, zoneID: $0) })
    }

    /// Deletes zones with their records.
    public func delete(zones: [ZoneID]) async throws(CloudError) {
        try await modifyZones(zones.map { ZoneOperation(operationType: .delete, zoneID: $0) })
    }

    private func modifyZones(_ operations: [ZoneOperation]) async throws(CloudError) {
        let answer = try await send("zones/modify", ZonesModifyRequest(operations: operations), answer: ZonesResponse.self)
        for case .failed(_, let error) in answer.zones { throw CloudError(code: .server(error.code), reason: error.reason) }
    }

    // MARK: - Records

    /// Saves and deletes records of one zone. Saves check the change tag (`update` with the record's tag, `create`
    /// without one), as CKSyncEngine's `.ifServerRecordUnchanged`; a stale tag fails that save with `CONFLICT` and the
    /// server's record.
    ///
    /// A record's ``CloudRecord/assetFiles`` are uploaded first, each into its field.
    public func modifyRecords(saving: [CloudRecord], deleting: [RecordID], zoneID: ZoneID, atomic: Bool = false) async throws(CloudError)
        -> ModifyRecordsResult
    {
        var saving = saving
        for index in saving.indices where !saving[index].assetFiles.isEmpty {
            for (field, file) in saving[index].assetFiles.sorted(by: { $0.key < $1.key }) {
                let asset = try await uploadAsset(
                    fileAt: file, recordName: saving[index].recordID.recordName, recordType: saving[index].recordType, fieldName: field,
                    zoneID: zoneID)
                saving[index].fields[field] = .asset(asset)
            }
            saving[index].assetFiles = [:]
        }
        let request = RecordsModifyRequest(
            operations: saving.map { RecordOperation(operationType: $0.recordChangeTag == nil ? .create : .update, record: $0.draft) }
                + deleting.map { RecordOperation(operationType: .forceDelete, record: RecordDraft(recordName: $0.recordName)) },
            zoneID: zoneID, atomic: atomic)
        let items = try await send("records/modify", request, answer: RecordsResponse.self).records
        guard items.count == saving.count + deleting.count else {
            throw CloudError(code: .invalidResponse, reason: "records/modify answered \(items.count) items")
        }
        var result = ModifyRecordsResult()
        for (index, item) in items.enumerated() {
            if index < saving.count {
                switch item {
                case .failed(_, let error, let serverRecord):
                    result.failedSaves.append(.init(record: saving[index], error: CloudError(error, serverRecord: serverRecord)))
                case .record(let record):
                    result.saved.append(CloudRecord(record))
                case .deleted:
                    break
                }
            } else {
                let recordID = deleting[index - saving.count]
                if case .failed(_, let error, _) = item {
                    result.failedDeletes[recordID] = CloudError(error)
                } else {
                    result.deleted.append(recordID)
                }
            }
        }
        return result
    }

    // MARK: - Assets

    /// Uploads a file for a record's `ASSETID` field and answers the asset to save in it (as `modifyRecords` does for
    /// ``CloudRecord/assetFiles``). An upload whose answer was lost is started again with a new receipt, since a
    /// receipt takes its bytes once.
    public func uploadAsset(
        fileAt file: URL, recordName: String, recordType: String?, fieldName: String, zoneID: ZoneID, attempts: Int = 3,
        progress: @escaping @Sendable (AssetProgress) -> Void = { _ in }
    ) async throws(CloudError) -> Asset {
        var lastError = CloudError(code: .networkFailure, reason: "no attempt")
        for _ in 0..<max(attempts, 1) {
            let request = AssetUploadRequest(
                zoneID: zoneID, tokens: [AssetUploadToken(recordName: recordName, recordType: recordType, fieldName: fieldName)])
            let tokens = try await send("assets/upload", request, answer: AssetUploadResponse.self).tokens
            guard let text = tokens.first?.url, let url = URL(string: text) else {
                throw CloudError(code: .invalidResponse, reason: "assets/upload answered no URL")
            }
            let response: TransportResponse
            do {
                response = try await container.transport.upload(
                    TransportRequest(method: "POST", url: url, headers: ["Content-Type": "application/octet-stream"]), fromFile: file,
                    progress: progress)
            } catch {
                lastError = CloudError(code: .networkFailure, reason: "\(error)")
                continue
            }
            // A body that is not JSON (a proxy's page, a cut answer): try again with a new receipt.
            guard (try? JSONValue(parsing: response.body)) != nil else {
                lastError = CloudError(code: .invalidResponse, reason: "HTTP \(response.status) without a JSON body")
                continue
            }
            guard (200..<300).contains(response.status) else {
                let error = CloudError.answer(response.body, status: response.status)
                // The first try's bytes arrived though its answer was lost: a new receipt takes them again.
                if error.code == .server(.conflict) || error.isTransient {
                    lastError = error
                    continue
                }
                throw error
            }
            do {
                return try AssetUploadedResponse(wireBytes: response.body).singleFile.asset
            } catch {
                throw CloudError(code: .invalidResponse, reason: "the upload answered no singleFile: \(error)")
            }
        }
        throw lastError
    }

    /// Downloads an asset's bytes into a file, from the `downloadURL` a fetched record carries.
    public func downloadAsset(_ asset: Asset, to file: URL, progress: @escaping @Sendable (AssetProgress) -> Void = { _ in })
        async throws(CloudError)
    {
        guard let text = asset.downloadURL, let url = URL(string: text) else {
            throw CloudError(code: .invalidResponse, reason: "the asset has no downloadURL: fetch its record first")
        }
        let response: TransportResponse
        do {
            response = try await container.transport.download(TransportRequest(method: "GET", url: url), toFile: file, progress: progress)
        } catch {
            throw CloudError(code: .networkFailure, reason: "\(error)")
        }
        guard (200..<300).contains(response.status) else { throw CloudError.answer(response.body, status: response.status) }
    }

    /// An upload as an `AsyncSequence`: its progress as it goes, then the asset to save (``AssetTransfer/uploaded(_:)``).
    public func assetUpload(fileAt file: URL, recordName: String, recordType: String?, fieldName: String, zoneID: ZoneID)
        -> AsyncThrowingStream<AssetTransfer, any Error>
    {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    let asset = try await uploadAsset(
                        fileAt: file, recordName: recordName, recordType: recordType, fieldName: fieldName, zoneID: zoneID,
                        progress: { continuation.yield(.progress($0)) })
                    continuation.yield(.uploaded(asset))
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// A download as an `AsyncSequence`: its progress as it goes, then where the file is (``AssetTransfer/downloaded(_:)``).
    public func assetDownload(_ asset: Asset, to file: URL) -> AsyncThrowingStream<AssetTransfer, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    try await downloadAsset(asset, to: file, progress: { continuation.yield(.progress($0)) })
                    continuation.yield(.downloaded(file))
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// `records/reconcile` (a Cumulus extension): compares ranges of a zone's record names with the digests of what this
    /// device holds in them; the server answers each range as matching, cut into parts to compare again, or with its
    /// records. ``SyncEngine/verify(_:)`` drives it.
    public func reconcile(_ ranges: [RangeDigest], in zoneID: ZoneID) async throws(CloudError) -> [RangeReconciliation] {
        try await send("records/reconcile", RecordsReconcileRequest(zoneID: zoneID, ranges: ranges), answer: RecordsReconcileResponse.self).ranges
    }

    /// `devices/verification`: tells the server what this device found when it verified its zones (a Cumulus
    /// extension), so the operator sees it; ``SyncEngine/verify(_:)`` sends it. Answers whether the server counts the
    /// device in sync.
    @discardableResult
    public func reportVerification(_ zones: [ZoneVerification]) async throws(CloudError) -> Bool {
        let report = DeviceVerificationReport(
            zones: zones.map { .init(zoneID: $0.zoneID, missing: $0.missing.count, extra: $0.extra.count, stale: $0.stale.count) })
        return try await send("devices/verification", report, answer: DeviceVerificationResponse.self).inSync
    }

    /// Fetches records by name; missing ones are absent.
    public func records(named names: [String], in zoneID: ZoneID) async throws(CloudError) -> [String: CloudRecord] {
        let answer = try await send(
            "records/lookup", RecordsLookupRequest(records: names.map { .init(recordName: $0) }, zoneID: zoneID), answer: RecordsResponse.self)
        var records: [String: CloudRecord] = [:]
        for case .record(let record) in answer.records {
            records[record.header.recordName] = CloudRecord(record)
        }
        return records
    }

    /// `records/query`: one page of records of a type matching filters, sorted; pass the returned marker for the next.
    public func query(
        recordType: String, filters: [QueryFilter] = [], sorts: [QuerySort] = [], zoneID: ZoneID, resultsLimit: Int? = nil,
        continuationMarker: String? = nil
    ) async throws(CloudError) -> (records: [CloudRecord], continuationMarker: String?) {
        let request = RecordsQueryRequest(
            recordType: recordType, filters: filters, sorts: sorts, zoneID: zoneID, resultsLimit: resultsLimit, continuationMarker: continuationMarker
        )
        let answer = try await send("records/query", request, answer: RecordsResponse.self)
        let records = answer.records.compactMap { result -> CloudRecord? in
            if case .record(let record) = result { CloudRecord(record) } else { nil }
        }
        return (records, answer.continuationMarker)
    }

    // MARK: - Change feeds

    /// `changes/database`: zones changed or deleted since a token (`nil`: since the beginning).
    public func databaseChanges(since token: String?) async throws(CloudError) -> DatabaseChanges {
        let answer = try await send("changes/database", DatabaseChangesRequest(syncToken: token), answer: DatabaseChangesResponse.self)
        var changed: [ZoneID] = []
        var deleted: [ZoneID] = []
        for zone in answer.zones {
            switch zone {
            case .zone(let info): changed.append(info.zoneID)
            case .deleted(let zoneID): deleted.append(zoneID)
            case .failed: continue
            }
        }
        return DatabaseChanges(changed: changed, deleted: deleted, syncToken: answer.syncToken, moreComing: answer.moreComing)
    }

    /// `changes/zone` for one zone: a page of records changed or deleted since a token.
    public func zoneChanges(_ zoneID: ZoneID, since token: String?, resultsLimit: Int? = nil) async throws(CloudError) -> ZoneChanges {
        let request = ZoneChangesRequest(zones: [ZoneChangesEntry(zoneID: zoneID, syncToken: token, resultsLimit: resultsLimit)])
        return try Self.zoneChanges(try await send("changes/zone", request, answer: ZoneChangesResponse.self), zoneID: zoneID)
    }

    /// The one zone a `changes/zone` answer was asked for (the message reads the answer's bytes without a JSON tree:
    /// an initial sync reads hundreds of pages of hundreds of records).
    static func zoneChanges(_ answer: ZoneChangesResponse, zoneID: ZoneID) throws(CloudError) -> ZoneChanges {
        guard let zone = answer.zones.first else {
            throw CloudError(code: .invalidResponse, reason: "no zone in changes/zone")
        }
        switch zone {
        case .failed(_, let error):
            throw CloudError(error)
        case .page(_, let syncToken, let moreComing, let records, let digest):
            var changes = ZoneChanges(zoneID: zoneID, records: [], deletions: [], syncToken: syncToken, moreComing: moreComing)
            changes.digest = digest
            changes.records.reserveCapacity(records.count)
            for result in records {
                switch result {
                case .record(let record): changes.records.append(CloudRecord(record))
                case .deleted(let recordName, let recordType):
                    changes.deletions.append(.init(recordID: RecordID(recordName: recordName, zoneID: zoneID), recordType: recordType))
                case .failed: continue
                }
            }
            return changes
        }
    }

    /// Reads an answer's message; one that does not read is an invalid response naming the operation.
    static func read<Answer: WireMessage>(_ type: Answer.Type, _ bytes: [UInt8], operation: String) throws(CloudError) -> Answer {
        do {
            return try Answer(wireBytes: bytes)
        } catch {
            throw CloudError(code: .invalidResponse, reason: "\(operation): \(error)")
        }
    }

    // MARK: - Sharing

    /// `records/resolve`, or `records/accept` with `accept`.
    public func shareMetadata(_ shortGUID: String, accept: Bool = false) async throws(CloudError) -> ShareMetadata {
        let publicDatabase = container.publicCloudDatabase
        let answer = try await publicDatabase.send(
            accept ? "records/accept" : "records/resolve", ShortGUIDRequest(entries: [.init(value: shortGUID)]), answer: ShareLinksResponse.self)
        switch answer.results.first {
        case nil:
            throw CloudError(code: .invalidResponse, reason: "no result")
        case .failed(_, let error):
            throw CloudError(error)
        case .resolved(let link):
            return ShareMetadata(
                shortGUID: shortGUID, zoneID: link.zoneID, rootRecordName: link.rootRecordName, participantStatus: link.participantStatus,
                participantPermission: link.participantPermission)
        }
    }
}
