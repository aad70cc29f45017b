import CumulusModel
public import CumulusStore
import Foundation
public import Logging

/// What `cumulus users export` writes: everything of one user, in one JSON document (`docs/OPERATIONS.md`, "Export a
/// user"), for GDPR articles 15 and 20.
///
/// Per environment: the records of every zone of their private database (as `records/lookup` answers them), the
/// records they created in the public database, the shares they own with their participants, the shares of others they
/// take part in, and their subscriptions; then every asset those records hold, its bytes in base64.
///
/// The document is written in pieces of about ``pieceSize`` bytes, each handed to the reader before the next is made:
/// records are read from the zones' feeds ``pageSize`` at a time and asset bytes a chunk at a time, so an export holds
/// at most a page of records (16 MB at the 1 MB record limit, usually tens of kilobytes), a piece and a record, and the
/// list of the assets it met (a receipt each), whatever the size of the account.
public struct UserExport: Sendable {
    /// The format's name and version, the document's first members.
    public static let format = "cumulus.user-export"
    /// 2 added each zone's kept versions (`history`) and each environment's `devices`.
    public static let version = 2
    /// Records read from a feed at once: few, as a record may hold up to 1 MB.
    static let pageSize = 16
    /// The bytes written before they are handed over.
    public static let pieceSize = 256 * 1024

    let store: any RecordStore
    let assets: (any AssetStorage)?

    /// An export that reads `store`, and asset bytes from `assets` (without, assets are listed without their bytes).
    public init(store: any RecordStore, assets: (any AssetStorage)?) {
        self.store = store
        self.assets = assets
    }

    /// The document for `user`, exported at `time` (milliseconds), whole: for a small account or a test.
    public func document(for user: UserAccount, at time: Int64, logger: Logger) async throws -> [UInt8] {
        var document: [UInt8] = []
        try await write(for: user, at: time, logger: logger) { document += $0 }
        return document
    }

    /// Writes the document for `user`, exported at `time` (milliseconds), handing it to `send` in pieces, in order.
    public func write(for user: UserAccount, at time: Int64, logger: Logger, to send: ([UInt8]) async throws -> Void) async throws {
        try await withoutActuallyEscaping(send) { send in
            try await write(for: user, at: time, to: Output(send: send), logger: logger)
        }
    }

    private func write(for user: UserAccount, at time: Int64, to output: Output, logger: Logger) async throws {
        output.writer.beginObject()
        output.writer.member("format", Self.format)
        output.writer.member("version", Self.version)
        output.writer.key("exportedAt")
        output.writer.int(time)
        output.writer.member("container", user.container)
        output.writer.key("user")
        output.writer.beginObject()
        output.writer.member("userRecordName", user.userRecordName)
        output.writer.member("name", user.name)
        output.writer.member("email", user.email)
        output.writer.member("discoverable", user.discoverable)
        output.writer.key("createdAt")
        output.writer.int(user.createdAt)
        output.writer.endObject()
        output.writer.key("environments")
        output.writer.beginArray()
        for environment in ContainerEnvironment.allCases {
            try await writeEnvironment(environment, of: user, to: output, logger: logger)
        }
        output.writer.endArray()
        try await writeAssets(to: output, logger: logger)
        output.writer.endObject()
        try await output.send(output.writer.takeBytes())
    }

    /// The document being written, handed over a piece at a time, and the assets its records hold.
    final class Output {
        var writer = JSONWriter(reservingCapacity: UserExport.pieceSize + 64 * 1024)
        var held: [(receipt: String, asset: Asset, place: String)] = []
        let send: ([UInt8]) async throws -> Void

        init(send: @escaping ([UInt8]) async throws -> Void) {
            self.send = send
        }

        /// Hands over what is written once it reaches a piece's size.
        func flushIfFull() async throws {
            if writer.bytes.count >= UserExport.pieceSize { try await send(writer.takeBytes()) }
        }
    }

    private func writeEnvironment(_ environment: ContainerEnvironment, of user: UserAccount, to output: Output, logger: Logger) async throws {
        let database = DatabaseRef(container: user.container, environment: environment, scope: .private, ownerRecordName: user.userRecordName)
        output.writer.beginObject()
        output.writer.member("environment", environment.rawValue)
        var shareNames: [String: [String]] = [:]
        output.writer.key("zones")
        output.writer.beginArray()
        for zone in try await store.zones(in: database, logger: logger) where zone.incarnation != 0 {
            output.writer.beginObject()
            output.writer.member("zoneName", zone.zoneID.zoneName)
            output.writer.key("records")
            output.writer.beginArray()
            try await forEachRecord(in: zone.zoneID.zoneName, of: database, output: output, logger: logger) { record in
                if record.header.recordType == ShareRecord.recordType {
                    shareNames[zone.zoneID.zoneName, default: []].append(record.header.recordName)
                }
                Self.write(record, to: output, place: "\(environment.rawValue)/private/\(zone.zoneID.zoneName)")
            }
            output.writer.endArray()
            // The versions the server keeps for restores and undelete (its history window): the user's data too.
            output.writer.key("history")
            output.writer.beginArray()
            var after: KeptVersion.Position?
            while true {
                let versions: [KeptVersion]
                do {
                    versions = try await store.keptVersions(
                        zoneName: zone.zoneID.zoneName, in: database, after: after, limit: Self.pageSize, logger: logger)
                } catch let error as StoreError where error.code == .zoneNotFound {
                    break
                }
                for version in versions {
                    output.writer.beginObject()
                    output.writer.key("replacedAt")
                    output.writer.int(version.replacedAt)
                    output.writer.member("deleted", version.deleted)
                    output.writer.key("record")
                    Self.write(version.record, to: output, place: "\(environment.rawValue)/private/\(zone.zoneID.zoneName)/history")
                    output.writer.endObject()
                    try await output.flushIfFull()
                }
                guard versions.count == Self.pageSize, let last = versions.last else { break }
                after = last.position
            }
            output.writer.endArray()
            output.writer.endObject()
        }
        output.writer.endArray()

        output.writer.key("devices")
        output.writer.beginArray()
        for device in try await store.devices(container: user.container, userRecordName: user.userRecordName, logger: logger)
        where device.environment == environment {
            Self.write(device, to: &output.writer)
        }
        output.writer.endArray()

        // What they created in the public database (its records belong to no user; theirs are the ones they made).
        output.writer.key("publicRecords")
        output.writer.beginArray()
        let publicDatabase = DatabaseRef.publicDatabase(container: user.container, environment: environment)
        try await forEachRecord(in: ZoneID.defaultZoneName, of: publicDatabase, output: output, logger: logger) { record in
            guard record.header.created.userRecordName == user.userRecordName else { return }
            Self.write(record, to: output, place: "\(environment.rawValue)/public")
        }
        output.writer.endArray()

        output.writer.key("sharesOwned")
        output.writer.beginArray()
        for (zoneName, names) in shareNames.sorted(by: { $0.key < $1.key }) {
            for share in try await store.shares(named: names, zoneName: zoneName, in: database, logger: logger) {
                Self.write(share, to: &output.writer)
            }
        }
        output.writer.endArray()

        output.writer.key("participations")
        output.writer.beginArray()
        for shared in try await store.sharedZones(
            userRecordName: user.userRecordName, container: user.container, environment: environment, logger: logger)
        where !shared.deleted {
            guard let owner = shared.zoneID.ownerRecordName else { continue }
            let ownerDatabase = DatabaseRef(container: user.container, environment: environment, scope: .private, ownerRecordName: owner)
            for share in try await store.shares(listing: user.userRecordName, zoneName: shared.zoneID.zoneName, in: ownerDatabase, logger: logger) {
                guard let me = share.participant(user.userRecordName) else { continue }
                output.writer.beginObject()
                output.writer.member("ownerRecordName", owner)
                output.writer.member("zoneName", shared.zoneID.zoneName)
                output.writer.member("shareRecordName", share.shareRecordName)
                output.writer.member("rootRecordName", share.rootRecordName)
                output.writer.member("permission", me.permission.rawValue)
                output.writer.member("status", me.status.rawValue)
                output.writer.endObject()
            }
        }
        output.writer.endArray()

        output.writer.key("subscriptions")
        output.writer.beginArray()
        for scope in [DatabaseScope.private, .shared, .public] {
            let owner = SubscriptionOwner(container: user.container, environment: environment, scope: scope, userRecordName: user.userRecordName)
            for subscription in try await store.subscriptions(of: owner, ids: nil, logger: logger) {
                output.writer.beginObject()
                output.writer.member("database", scope.rawValue)
                output.writer.key("subscription")
                output.writer.raw(subscription.json)
                output.writer.endObject()
            }
        }
        output.writer.endArray()
        output.writer.endObject()
    }

    /// Calls `body` with each live record of a zone, a page at a time from its feed, handing over what is written once it
    /// makes a piece.
    private func forEachRecord(
        in zoneName: String, of database: DatabaseRef, output: Output, logger: Logger, _ body: (StoredRecord) throws -> Void
    ) async throws {
        var after: Int64 = 0
        var incarnation: Int64?
        while true {
            let page: ZoneChangePage
            do {
                page = try await store.zoneChanges(
                    ZoneChangeRequest(database: database, zoneName: zoneName, incarnation: incarnation, after: after, limit: Self.pageSize),
                    logger: logger)
            } catch let error as StoreError where error.code == .zoneNotFound {
                return
            }
            for case .changed(let record) in page.changes {
                try body(record)
                try await output.flushIfFull()
            }
            guard page.moreComing else { return }
            after = page.sequence
            incarnation = page.zone.incarnation
        }
    }

    private static func write(_ record: StoredRecord, to output: Output, place: String) {
        RecordResult.record(ResponseRecord(header: record.header, fields: .canonical(record.fieldsJSON), desiredKeys: nil, share: nil))
            .write(to: &output.writer, options: FieldWriteOptions())
        guard let fields = try? record.fields() else { return }
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
            for asset in AssetService.assets(in: value) {
                if let receipt = asset.receipt { output.held.append((receipt, asset, "\(place)/\(record.header.recordName)/\(name)")) }
            }
        }
    }

    private static func write(_ device: DeviceState, to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("deviceID", device.deviceID)
        writer.member("name", device.name)
        writer.key("lastSeenAt")
        writer.int(device.lastSeenAt)
        if let fetched = device.lastFetchedAt {
            writer.key("lastFetchedAt")
            writer.int(fetched)
        }
        if let verification = device.verification {
            writer.key("lastVerification")
            writer.beginObject()
            writer.key("verifiedAt")
            writer.int(verification.verifiedAt)
            writer.member("zones", verification.zones)
            writer.member("missing", verification.missing)
            writer.member("extra", verification.extra)
            writer.member("stale", verification.stale)
            writer.endObject()
        }
        writer.endObject()
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

    /// Every asset the exported records hold, once each, with its bytes: read a chunk at a time and written in base64
    /// as they come (three bytes make four characters, so a chunk's last one or two bytes wait for the next).
    private func writeAssets(to output: Output, logger: Logger) async throws {
        let held = output.held
        let uploads = Dictionary(
            try await store.assetUploads(receipts: Array(Set(held.map(\.receipt))), logger: logger).map { ($0.receipt, $0) },
            uniquingKeysWith: { first, _ in first })
        output.writer.key("assets")
        output.writer.beginArray()
        var written = Set<String>()
        for (receipt, asset, place) in held where written.insert(receipt).inserted {
            output.writer.beginObject()
            output.writer.member("record", place)
            output.writer.member("receipt", receipt)
            output.writer.member("fileChecksum", asset.fileChecksum)
            if let size = asset.size {
                output.writer.key("size")
                output.writer.int(size)
            }
            if let assets, let fileID = uploads[receipt]?.fileID {
                output.writer.key("bytes")
                output.writer.raw(#"""#.utf8)
                var carried: [UInt8] = []
                for try await chunk in try await assets.read(fileID: fileID, range: nil) {
                    carried += chunk
                    let whole = carried.count - carried.count % 3
                    output.writer.rawContinuing(Data(carried[..<whole]).base64EncodedData())
                    carried.removeFirst(whole)
                    try await output.flushIfFull()
                }
                output.writer.rawContinuing(Data(carried).base64EncodedData())
                output.writer.rawContinuing(#"""#.utf8)
            }
            output.writer.endObject()
            try await output.flushIfFull()
        }
        output.writer.endArray()
    }
}

/// `users/export` (a Cumulus extension): a signed-in user's own data. An export reads everything a user has, in every
/// concept, so this service holds the whole store.
public struct ExportService: Sendable, WriteHealthReporting {
    let store: any RecordStore
    let clock: WallClock
    let writeHealth: WriteHealth

    /// `users/export` (a Cumulus extension): the signed-in caller's own export, as `cumulus users export` writes it but
    /// with the assets listed without their bytes (the records' answers in `records/lookup` carry download URLs), so
    /// one request never holds a user's every file in memory.
    public func export(caller: Caller, logger: Logger, to send: ([UInt8]) async throws -> Void) async throws {
        guard let user = caller.user else { throw CumulusError(.authenticationRequired, "users/export: sign in; a user exports their own data") }
        try await mapStoreErrors {
            try await UserExport(store: store, assets: nil).write(for: user, at: clock.milliseconds(), logger: logger, to: send)
        }
    }
}
