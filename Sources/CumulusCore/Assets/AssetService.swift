public import CumulusModel
public import CumulusStore
import Foundation
public import Logging

/// Asset receipts: `assets/upload` issues them, the upload URL fills them with bytes, `records/modify` accepts an
/// `ASSETID` value only with a receipt issued to the caller for that zone, record and field, and the cleanup forgets
/// those no record holds.
public struct AssetService: Sendable, WriteHealthReporting {
    /// Receipts, the records that hold them, and the server's secret URLs are signed from.
    let store: any AssetUploadStore & RecordZoneStore & ContainerStore
    let zones: ZoneAccess
    let limits: Limits
    let clock: WallClock
    let writeHealth: WriteHealth
    /// How long the history keeps versions, and so the files they hold.
    let history: HistoryService

    // MARK: - Uploads and their bytes (the upload URL, download URLs, the cleanup)

    /// The uploads these receipts name (those that exist).
    public func uploads(receipts: [String], logger: Logger) async throws -> [AssetUpload] {
        try await mapStoreErrors { try await store.assetUploads(receipts: receipts, logger: logger) }
    }

    /// What an uploader keeps in the container: bytes saved in records, and bytes uploaded since `pendingSince` that no
    /// record holds yet.
    public func usage(uploader: String, container: String, pendingSince: Int64, logger: Logger) async throws -> AssetUsage {
        try await mapStoreErrors { try await store.assetUsage(uploader: uploader, container: container, pendingSince: pendingSince, logger: logger) }
    }

    /// Records that a receipt's bytes are in a file; `false` when the receipt has a file already (another upload won).
    public func completeUpload(receipt: String, fileID: String, size: Int64, checksum: String, logger: Logger) async throws -> Bool {
        try await mapStoreErrors(writing: true) {
            try await store.completeAssetUpload(receipt: receipt, fileID: fileID, size: size, checksum: checksum, logger: logger)
        }
    }

    /// Forgets receipts no record holds (see ``AssetUploadStore/collectAssetGarbage(unattachedBefore:detachedBefore:history:logger:)``)
    /// and answers the files to delete. While the history is on, a file no live record holds is kept as long as the
    /// history, so a restore or an undelete brings it back, but leaves its uploader's quota.
    public func collectGarbage(unattachedBefore: Int64, detachedBefore: Int64, logger: Logger) async throws -> [String] {
        let now = clock.milliseconds()
        let hold = history.keepsHistory ? AssetHistoryHold(now: now, keptSince: history.historyHorizon(now: now)) : nil
        return try await mapStoreErrors(writing: true) {
            try await store.collectAssetGarbage(unattachedBefore: unattachedBefore, detachedBefore: detachedBefore, history: hold, logger: logger)
        }
    }

    /// The server's secret, from which keys for signing asset URLs are derived, so every instance over one store signs
    /// and accepts alike.
    public func serverSecret(logger: Logger) async throws -> [UInt8] {
        try await mapStoreErrors { try await store.serverSecret(logger: logger) }
    }

    /// Receipts for uploads into a zone the caller may write, in the order asked, each with the record name it is for.
    ///
    /// A token that names no record (the reference makes `recordName` optional) gets a new name, answered with its
    /// upload URL, and its receipt may be saved in any record of the zone: a client may use the name it was given or
    /// one of its own.
    ///
    /// - Parameter maximumPending: How many receipts one uploader may hold that no record holds yet (made within the
    ///   last day): what one holder of the app's token can make the server keep before anything is saved.
    public func issueReceipts(
        caller: Caller, scope: DatabaseScope, zoneID: ZoneID?, tokens: [AssetUploadToken], maximumPending: Int = 1_000, logger: Logger
    ) async throws -> [(recordName: String, upload: AssetUpload)] {
        try limits.checkCount(tokens.count, path: "tokens")
        let (database, zoneName, _) = try await zones.zone(zoneID, caller: caller, scope: scope, access: .write, logger: logger)
        guard let author = caller.authorName else { throw CumulusError(.authenticationRequired, "request needs authorization") }
        let usage = try await mapStoreErrors {
            try await store.assetUsage(
                uploader: author, container: caller.container, pendingSince: clock.milliseconds() - 24 * 3600 * 1000, logger: logger)
        }
        if usage.pendingReceipts + tokens.count > maximumPending {
            throw CumulusError(
                .quotaExceeded,
                "tokens: \(usage.pendingReceipts) uploads are waiting to be saved in a record; at most \(maximumPending) may wait at once")
        }
        for (index, token) in tokens.enumerated() {
            try NameRules.checkIdentifier(token.fieldName, kind: "field name", path: "tokens[\(index)].fieldName", limits: limits)
            if let recordName = token.recordName {
                try NameRules.checkRecordName(recordName, path: "tokens[\(index)].recordName", limits: limits)
            }
        }
        let now = clock.milliseconds()
        let uploads = tokens.map { token in
            AssetUpload(
                receipt: TokenCodec.makeToken(), database: database, zoneName: zoneName, recordName: token.recordName, fieldName: token.fieldName,
                uploader: author, createdAt: now)
        }
        try await mapStoreErrors { try await store.createAssetUploads(uploads, logger: logger) }
        return uploads.map { ($0.recordName ?? UUID.random().uuidString, $0) }
    }

    /// New receipts for the assets records hold, for saving in other records of the same database (`assets/rereference`):
    /// for each `(recordName, fieldName)`, the assets of that field, in order.
    public func rereference(
        caller: Caller, scope: DatabaseScope, zoneID: ZoneID?, fields: [(recordName: String, fieldName: String)], logger: Logger
    ) async throws -> [[AssetUpload]] {
        try limits.checkCount(fields.count, path: "assets")
        let (database, zoneName, access) = try await zones.zone(zoneID, caller: caller, scope: scope, access: .write, logger: logger)
        guard let author = caller.authorName else { throw CumulusError(.authenticationRequired, "request needs authorization") }
        let records = try await mapStoreErrors {
            try await store.records(named: fields.map(\.recordName), zoneName: zoneName, in: database, access: access, logger: logger)
        }
        var held: [[String]] = []
        for (index, field) in fields.enumerated() {
            guard let record = records[field.recordName] else {
                throw CumulusError(.notFound, "assets[\(index)].recordName: record \(field.recordName) does not exist")
            }
            let value = try record.fields()[field.fieldName]
            let receipts = value.map(Self.assets(in:))?.compactMap(\.receipt) ?? []
            if receipts.isEmpty { throw CumulusError(.badRequest, "assets[\(index)].fieldName: \(field.fieldName) holds no asset") }
            held.append(receipts)
        }
        let existing = try await mapStoreErrors { try await store.assetUploads(receipts: held.flatMap { $0 }, logger: logger) }
        let byReceipt = Dictionary(existing.map { ($0.receipt, $0) }, uniquingKeysWith: { first, _ in first })
        let now = clock.milliseconds()
        let made = held.map { receipts in
            receipts.compactMap { byReceipt[$0] }.filter { $0.fileID != nil }.map { original in
                AssetUpload(
                    receipt: TokenCodec.makeToken(), database: database, zoneName: zoneName, recordName: nil, fieldName: nil, uploader: author,
                    fileID: original.fileID, size: original.size, checksum: original.checksum, createdAt: now)
            }
        }
        try await mapStoreErrors { try await store.createAssetUploads(made.flatMap { $0 }, logger: logger) }
        return made
    }

    /// Whether a receipt may be saved in this database, zone, record and field.
    private func upload(_ upload: AssetUpload?, isFor database: DatabaseRef, zoneName: String, recordName: String, field: String) -> Bool {
        guard let upload else { return false }
        return upload.database == database && upload.zoneName == zoneName && (upload.recordName == nil || upload.recordName == recordName)
            && (upload.fieldName == nil || upload.fieldName == field)
    }

    /// The assets a field value holds: itself, or the elements of a list.
    static func assets(in value: FieldValue) -> [Asset] {
        switch value {
        case .asset(let asset): [asset]
        case .list(_, let values): values.flatMap(assets(in:))
        default: []
        }
    }

    /// Refusals of operations whose `ASSETID` values name a receipt not issued to this caller for this zone, record and
    /// field, not uploaded yet, or with a checksum or size other than the upload's; and the receipts each saving
    /// operation would attach.
    func checkAssets(_ modifications: [RecordModification], database: DatabaseRef, zoneName: String, author: String, logger: Logger) async throws
        -> (refusals: [Int: RecordFailure], attachments: [Int: [AssetAttachment]])
    {
        var named: [(index: Int, field: String, asset: Asset)] = []
        for (index, modification) in modifications.enumerated() where !modification.operationType.isDelete {
            for (field, value) in modification.fields {
                guard let value else { continue }
                for asset in Self.assets(in: value) { named.append((index, field, asset)) }
            }
        }
        guard !named.isEmpty else { return ([:], [:]) }
        let uploads = try await mapStoreErrors { try await store.assetUploads(receipts: named.compactMap(\.asset.receipt), logger: logger) }
        let byReceipt = Dictionary(uploads.map { ($0.receipt, $0) }, uniquingKeysWith: { first, _ in first })
        var refusals: [Int: RecordFailure] = [:]
        var attachments: [Int: [AssetAttachment]] = [:]
        for (index, field, asset) in named {
            let recordName = modifications[index].recordName
            func refuse(_ reason: String) {
                if refusals[index] == nil {
                    refusals[index] = RecordFailure(recordName: recordName, code: .badRequest, reason: "fields.\(field).value: \(reason)")
                }
            }
            guard let receipt = asset.receipt else {
                refuse("an asset needs the receipt its upload answered")
                continue
            }
            // A receipt is the uploader's to save where it was issued for; once saved there, it may be saved there again
            // by anyone who may write the record (an edit of another field sends the record's assets back unchanged).
            let placed = upload(byReceipt[receipt], isFor: database, zoneName: zoneName, recordName: recordName, field: field)
            guard let upload = byReceipt[receipt], placed, upload.uploader == author || (upload.attached && upload.recordName == recordName)
            else {
                refuse("the receipt was not issued to this caller for zone \(zoneName), record \(recordName) and field \(field)")
                continue
            }
            guard upload.fileID != nil else {
                refuse("the asset's bytes were not uploaded")
                continue
            }
            if let checksum = asset.fileChecksum, checksum != upload.checksum {
                refuse("fileChecksum does not match the uploaded bytes")
                continue
            }
            if let size = asset.size, size != upload.size {
                refuse("size does not match the uploaded bytes")
                continue
            }
            attachments[index, default: []].append(AssetAttachment(receipt: receipt, zoneName: zoneName, recordName: recordName, fieldName: field))
        }
        return (refusals, attachments)
    }
}
