import CumulusModel
public import CumulusStore
import Foundation
public import Logging

/// What `cumulus users export` writes: everything of one user, in one JSON document (`docs/OPERATIONS.md`, "Export a
/// user"), for GDPR articles 15 and 20.
///
/// Per environment: the records of every zone of their private database (as `records/lookup` answers them), the
/// records they created in the public database, the shares they own with their participants, the shares of others they
/// take part in, and their subscriptions; then every asset those records hold, its bytes in base64. Records are read
/// page by page from the zones' feeds, so the export never holds more than a page of records besides what it wrote.
public struct UserExport: Sendable {
    /// The format's name and version, the document's first members.
    public static let format = "cumulus.user-export"
    public static let version = 1

    let store: any RecordStore
    let assets: (any AssetStorage)?

    /// An export that reads `store`, and asset bytes from `assets` (without, assets are listed without their bytes).
    public init(store: any RecordStore, assets: (any AssetStorage)?) {
        self.store = store
        self.assets = assets
    }

    /// The document for `user`, exported at `time` (milliseconds).
    public func document(for user: UserAccount, at time: Int64, logger: Logger) async throws -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.member("format", Self.format)
        writer.member("version", Self.version)
        writer.key("exportedAt")
        writer.int(time)
        writer.member("container", user.container)
        writer.key("user")
        writer.beginObject()
        writer.member("userRecordName", user.userRecordName)
        writer.member("name", user.name)
        writer.member("email", user.email)
        writer.member("discoverable", user.discoverable)
        writer.key("createdAt")
        writer.int(user.createdAt)
        writer.endObject()
        var held: [(receipt: String, asset: Asset, place: String)] = []
        writer.key("environments")
        writer.beginArray()
        for environment in ContainerEnvironment.allCases {
            try await writeEnvironment(environment, of: user, to: &writer, assets: &held, logger: logger)
        }
        writer.endArray()
        try await writeAssets(held, to: &writer, logger: logger)
        writer.endObject()
        return writer.bytes
    }

    private func writeEnvironment(
        _ environment: ContainerEnvironment, of user: UserAccount, to writer: inout JSONWriter,
        assets held: inout [(receipt: String, asset: Asset, place: String)], logger: Logger
    ) async throws {
        let database = DatabaseRef(container: user.container, environment: environment, scope: .private, ownerRecordName: user.userRecordName)
        writer.beginObject()
        writer.member("environment", environment.rawValue)
        var shareNames: [String: [String]] = [:]
        writer.key("zones")
        writer.beginArray()
        for zone in try await store.zones(in: database, logger: logger) where zone.incarnation != 0 {
            writer.beginObject()
            writer.member("zoneName", zone.zoneID.zoneName)
            writer.key("records")
            writer.beginArray()
            try await forEachRecord(in: zone.zoneID.zoneName, of: database, logger: logger) { record in
                if record.header.recordType == ShareRecord.recordType {
                    shareNames[zone.zoneID.zoneName, default: []].append(record.header.recordName)
                }
                Self.write(record, to: &writer, assets: &held, place: "\(environment.rawValue)/private/\(zone.zoneID.zoneName)")
            }
            writer.endArray()
            writer.endObject()
        }
        writer.endArray()

        // What they created in the public database (its records belong to no user; theirs are the ones they made).
        writer.key("publicRecords")
        writer.beginArray()
        let publicDatabase = DatabaseRef.publicDatabase(container: user.container, environment: environment)
        try await forEachRecord(in: ZoneID.defaultZoneName, of: publicDatabase, logger: logger) { record in
            guard record.header.created.userRecordName == user.userRecordName else { return }
            Self.write(record, to: &writer, assets: &held, place: "\(environment.rawValue)/public")
        }
        writer.endArray()

        writer.key("sharesOwned")
        writer.beginArray()
        for (zoneName, names) in shareNames.sorted(by: { $0.key < $1.key }) {
            for share in try await store.shares(named: names, zoneName: zoneName, in: database, logger: logger) {
                Self.write(share, to: &writer)
            }
        }
        writer.endArray()

        writer.key("participations")
        writer.beginArray()
        for shared in try await store.sharedZones(
            userRecordName: user.userRecordName, container: user.container, environment: environment, logger: logger)
        where !shared.deleted {
            guard let owner = shared.zoneID.ownerRecordName else { continue }
            let ownerDatabase = DatabaseRef(container: user.container, environment: environment, scope: .private, ownerRecordName: owner)
            for share in try await store.shares(listing: user.userRecordName, zoneName: shared.zoneID.zoneName, in: ownerDatabase, logger: logger) {
                guard let me = share.participant(user.userRecordName) else { continue }
                writer.beginObject()
                writer.member("ownerRecordName", owner)
                writer.member("zoneName", shared.zoneID.zoneName)
                writer.member("shareRecordName", share.shareRecordName)
                writer.member("rootRecordName", share.rootRecordName)
                writer.member("permission", me.permission.rawValue)
                writer.member("status", me.status.rawValue)
                writer.endObject()
            }
        }
        writer.endArray()

        writer.key("subscriptions")
        writer.beginArray()
        for scope in [DatabaseScope.private, .shared, .public] {
            let owner = SubscriptionOwner(container: user.container, environment: environment, scope: scope, userRecordName: user.userRecordName)
            for subscription in try await store.subscriptions(of: owner, ids: nil, logger: logger) {
                writer.beginObject()
                writer.member("database", scope.rawValue)
                writer.key("subscription")
                writer.raw(subscription.json)
                writer.endObject()
            }
        }
        writer.endArray()
        writer.endObject()
    }

    /// Calls `body` with each live record of a zone, page by page from its feed.
    private func forEachRecord(
        in zoneName: String, of database: DatabaseRef, logger: Logger, _ body: (StoredRecord) throws -> Void
    ) async throws {
        var after: Int64 = 0
        var incarnation: Int64?
        while true {
            let page: ZoneChangePage
            do {
                page = try await store.zoneChanges(
                    ZoneChangeRequest(database: database, zoneName: zoneName, incarnation: incarnation, after: after, limit: 500), logger: logger)
            } catch let error as StoreError where error.code == .zoneNotFound {
                return
            }
            for case .changed(let record) in page.changes { try body(record) }
            guard page.moreComing else { return }
            after = page.sequence
            incarnation = page.zone.incarnation
        }
    }

    private static func write(
        _ record: StoredRecord, to writer: inout JSONWriter, assets held: inout [(receipt: String, asset: Asset, place: String)], place: String
    ) {
        RecordResult.record(ResponseRecord(header: record.header, fields: .canonical(record.fieldsJSON), desiredKeys: nil, share: nil))
            .write(to: &writer, options: FieldWriteOptions())
        guard let fields = try? record.fields() else { return }
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
            for asset in DatabaseService.assets(in: value) {
                if let receipt = asset.receipt { held.append((receipt, asset, "\(place)/\(record.header.recordName)/\(name)")) }
            }
        }
    }

    private static func write(_ share: ShareState, to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("zoneName", share.zoneName)
        writer.member("shareRecordName", share.shareRecordName)
        writer.member("rootRecordName", share.rootRecordName)
        writer.member("shortGUID", share.shortGUID)
        writer.member("publicPermission", share.publicPermission.rawValue)
        writer.array("participants", share.participants) { writer, participant in
            writer.beginObject()
            writer.member("userRecordName", participant.userRecordName)
            writer.member("email", participant.email)
            writer.member("type", participant.type.rawValue)
            writer.member("permission", participant.permission.rawValue)
            writer.member("status", participant.status.rawValue)
            writer.endObject()
        }
        writer.endObject()
    }

    /// Every asset the exported records hold, once each, with its bytes.
    private func writeAssets(_ held: [(receipt: String, asset: Asset, place: String)], to writer: inout JSONWriter, logger: Logger) async throws {
        let uploads = Dictionary(
            try await store.assetUploads(receipts: Array(Set(held.map(\.receipt))), logger: logger).map { ($0.receipt, $0) },
            uniquingKeysWith: { first, _ in first })
        writer.key("assets")
        writer.beginArray()
        var written = Set<String>()
        for (receipt, asset, place) in held where written.insert(receipt).inserted {
            writer.beginObject()
            writer.member("record", place)
            writer.member("receipt", receipt)
            writer.member("fileChecksum", asset.fileChecksum)
            if let size = asset.size {
                writer.key("size")
                writer.int(size)
            }
            if let assets, let fileID = uploads[receipt]?.fileID {
                var bytes: [UInt8] = []
                for try await chunk in try await assets.read(fileID: fileID, range: nil) { bytes += chunk }
                writer.member("bytes", Data(bytes).base64EncodedString())
            }
            writer.endObject()
        }
        writer.endArray()
    }
}

extension DatabaseService {
    /// `users/export` (a Cumulus extension): the signed-in caller's own export, as `cumulus users export` writes it but
    /// with the assets listed without their bytes (the records' answers in `records/lookup` carry download URLs), so
    /// one request never holds a user's every file in memory.
    public func exportUser(caller: Caller, logger: Logger) async throws -> [UInt8] {
        guard let user = caller.user else { throw CumulusError(.authenticationRequired, "users/export: sign in; a user exports their own data") }
        return try await mapStoreErrors {
            try await UserExport(store: store, assets: nil).document(for: user, at: clock.milliseconds(), logger: logger)
        }
    }
}
