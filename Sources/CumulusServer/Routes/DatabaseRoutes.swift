import CumulusCore
import CumulusModel
import CumulusStore
import HTTPTypes
import Hummingbird
import Logging

/// The CloudKit Web Services routes under `/database/1/{container}/{environment}/{database}/`.
///
/// Handlers are thin: read the body, call ``DatabaseService``, write the result. Authorization is decided in the
/// domain's ``AuthorizationPolicy``, never here.
struct DatabaseRoutes {
    let database: DatabaseService
    let accounts: AccountService
    let limits: Limits
    /// The configured public URL; `nil` uses the request's host.
    let publicBaseURL: String?

    /// The stable link of a share: `{public URL}/share/{shortGUID}`.
    func shareURL(_ shortGUID: String, request: Request) -> String {
        (publicBaseURL ?? "http://\(request.head.authority ?? "localhost")") + "/share/" + shortGUID
    }

    func register(on group: RouterGroup<CumulusRequestContext>) {
        // The five GET operations also answer POST, as some clients (and Postman collections) send POST.
        for method in [HTTPRequest.Method.get, .post] {
            group.on("zones/list", method: method, use: listZones)
            group.on("users/caller", method: method, use: caller)
            group.on("users/current", method: method, use: caller)
        }
        group.post("zones/lookup", use: lookupZones)
        group.post("zones/modify", use: modifyZones)
        group.post("records/lookup", use: lookupRecords)
        group.post("records/modify", use: modifyRecords)
        group.post("records/query", use: queryRecords)
        group.post("records/resolve", use: resolveShares)
        group.post("records/accept", use: acceptShares)
        group.post("changes/database", use: databaseChanges)
        group.post("zones/changes", use: databaseChanges)
        group.post("changes/zone", use: zoneChanges)
        group.post("records/changes", use: legacyRecordChanges)
        group.on("users/discover", method: .get, use: discoverAll)
        group.post("users/discover", use: discoverUsers)
        group.post("users/lookup/email", use: discoverUsers)
        group.post("users/lookup/id", use: discoverUsers)
    }

    // MARK: - Zones

    @Sendable func listZones(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let zones = try await database.listZones(caller: try context.requireCaller(), scope: try scope(context), logger: context.logger)
        var writer = JSONWriter(reservingCapacity: 128 * zones.count)
        writer.beginObject()
        writer.key("zones")
        writer.beginArray()
        for zone in zones { writer.zone(zone) }
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    @Sendable func lookupZones(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let results = try await database.lookupZones(
            caller: try context.requireCaller(), scope: try scope(context), request: try ZonesLookupRequest(wire: body), logger: context.logger
        )
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("zones")
        writer.beginArray()
        for result in results {
            switch result {
            case .found(let summary):
                writer.zone(summary)
            case .notFound(let zoneID):
                writer.itemError(code: .zoneNotFound, reason: "zone \(zoneID.zoneName) does not exist") { writer in
                    writer.key("zoneID")
                    writer.zoneID(zoneID)
                }
            }
        }
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    @Sendable func modifyZones(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let results = try await database.modifyZones(
            caller: try context.requireCaller(), scope: try scope(context), request: try ZonesModifyRequest(wire: body), logger: context.logger
        )
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("zones")
        writer.beginArray()
        for result in results { writer.zoneResult(result) }
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    // MARK: - Records

    @Sendable func lookupRecords(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let lookup = try RecordsLookupRequest(wire: body)
        let results = try await database.lookupRecords(
            caller: try context.requireCaller(), scope: try scope(context), request: lookup, logger: context.logger
        )
        let options = FieldWriteOptions(numbersAsStrings: lookup.numbersAsStrings)
        var writer = JSONWriter(reservingCapacity: 1024 * results.count)
        writer.beginObject()
        writer.key("records")
        writer.beginArray()
        for result in results {
            switch result {
            case .found(let record, let desiredKeys):
                writer.storedRecord(record, desiredKeys: desiredKeys, options: options)
            case .notFound(let recordName):
                writer.itemError(code: .notFound, reason: "record \(recordName) does not exist") { writer in
                    writer.key("recordName")
                    writer.string(recordName)
                }
            }
        }
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    @Sendable func modifyRecords(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let response = try await database.modifyRecords(
            caller: try context.requireCaller(), scope: try scope(context), request: try RecordsModifyRequest(wire: body), logger: context.logger
        )
        let options = FieldWriteOptions(numbersAsStrings: response.numbersAsStrings)
        var writer = JSONWriter(reservingCapacity: 1024 * response.results.count)
        writer.beginObject()
        writer.key("records")
        writer.beginArray()
        let viewer = try context.requireCaller().authorName
        for (result, desiredKeys) in response.results {
            writer.recordResult(result, desiredKeys: desiredKeys, options: options) { name in
                response.shares[name].map { SharePresentation(share: $0, viewer: viewer, url: shareURL($0.shortGUID, request: request)) }
            }
        }
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    @Sendable func queryRecords(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let response = try await database.query(
            caller: try context.requireCaller(), scope: try scope(context), request: try RecordsQueryRequest(wire: body), logger: context.logger
        )
        let options = FieldWriteOptions(numbersAsStrings: response.numbersAsStrings)
        var writer = JSONWriter(reservingCapacity: 1024 * response.records.count)
        writer.beginObject()
        writer.key("records")
        writer.beginArray()
        for record in response.records { writer.storedRecord(record, desiredKeys: response.desiredKeys, options: options) }
        writer.endArray()
        if let marker = response.continuationMarker {
            writer.key("continuationMarker")
            writer.string(marker)
        }
        writer.endObject()
        return .json(writer)
    }

    // MARK: - Share links

    @Sendable func resolveShares(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await shareLinks(request, context: context, accept: false)
    }

    @Sendable func acceptShares(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await shareLinks(request, context: context, accept: true)
    }

    /// `records/resolve` and `records/accept` answer `results[]` of ShortGUID results or errors.
    private func shareLinks(_ request: Request, context: CumulusRequestContext, accept: Bool) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let caller = try context.requireCaller()
        let results = try await database.resolveShares(
            caller: caller, request: try ShortGUIDRequest(wire: body), accept: accept, logger: context.logger)
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("results")
        writer.beginArray()
        for result in results {
            switch result {
            case .failed(let shortGUID, let error):
                writer.itemError(code: error.code.serverErrorCode, reason: error.reason) { writer in
                    writer.key("shortGUID")
                    writer.string(shortGUID)
                }
            case .resolved(let info):
                let share = info.share
                let url = shareURL(share.shortGUID, request: request)
                writer.beginObject()
                writer.key("containerIdentifier")
                writer.string(share.database.container)
                writer.key("environment")
                writer.string(share.database.environment.rawValue)
                writer.key("databaseScope")
                writer.string(info.scope == .private ? "PRIVATE" : "SHARED")
                writer.key("zoneID")
                writer.zoneID(share.database.zoneID(share.zoneName))
                writer.key("shortGUID")
                writer.string(share.shortGUID)
                if let rootName = share.rootRecordName {
                    writer.key("rootRecordName")
                    writer.string(rootName)
                }
                if let root = info.rootRecord {
                    writer.key("rootRecord")
                    writer.storedRecord(root, desiredKeys: info.rootRecordDesiredKeys, options: .init())
                }
                if let record = share.shareRecord {
                    writer.key("share")
                    writer.storedRecord(
                        record, desiredKeys: nil, options: .init(), share: SharePresentation(share: share, viewer: caller.authorName, url: url))
                }
                writer.key("ownerIdentity")
                writer.beginObject()
                writer.key("userRecordName")
                writer.string(share.database.ownerRecordName)
                if let owner = info.owner {
                    writer.key("nameComponents")
                    writer.beginObject()
                    writer.key("givenName")
                    writer.string(owner.name)
                    writer.endObject()
                }
                writer.endObject()
                let participant = info.participant
                writer.key("participantPermission")
                writer.string((participant?.permission ?? share.publicPermission).rawValue)
                writer.key("participantStatus")
                writer.string((participant?.status ?? .invited).rawValue)
                writer.key("participantType")
                writer.string((participant?.type ?? .publicUser).rawValue)
                writer.key("webpageURL")
                writer.string(url)
                writer.endObject()
            }
        }
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    // MARK: - Change feeds

    @Sendable func databaseChanges(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let response = try await database.databaseChanges(
            caller: try context.requireCaller(), scope: try scope(context), request: try DatabaseChangesRequest(wire: body), logger: context.logger
        )
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("zones")
        writer.beginArray()
        for zone in response.zones {
            switch zone {
            case .changed(let summary):
                writer.zone(summary)
            case .deleted(let zoneID):
                // Not in the 2016 documents; the reference suggests `deleted: true`, as native CloudKit reports deletions.
                writer.beginObject()
                writer.key("zoneID")
                writer.zoneID(zoneID)
                writer.key("deleted")
                writer.bool(true)
                writer.endObject()
            }
        }
        writer.endArray()
        writer.key("syncToken")
        writer.string(response.syncToken)
        writer.key("moreComing")
        writer.bool(response.moreComing)
        writer.endObject()
        return .json(writer)
    }

    @Sendable func zoneChanges(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let changes = try ZoneChangesRequest(wire: body)
        let results = try await database.zoneChanges(
            caller: try context.requireCaller(), scope: try scope(context), request: changes, logger: context.logger)
        let options = FieldWriteOptions(numbersAsStrings: changes.numbersAsStrings)
        var writer = JSONWriter(reservingCapacity: 64 * 1024)
        writer.beginObject()
        writer.key("zones")
        writer.beginArray()
        for result in results {
            switch result {
            case .page(let page, let syncToken, let desiredKeys):
                writer.beginObject()
                writer.key("zoneID")
                writer.zoneID(page.zone.zoneID)
                writer.key("syncToken")
                writer.string(syncToken)
                writer.key("moreComing")
                writer.bool(page.moreComing)
                writer.key("records")
                writer.beginArray()
                for change in page.changes { writer.recordChange(change, desiredKeys: desiredKeys, options: options) }
                writer.endArray()
                writer.endObject()
            case .failed(let zoneID, let error):
                writer.itemError(code: error.code.serverErrorCode, reason: error.reason) { writer in
                    writer.key("zoneID")
                    writer.zoneID(zoneID)
                }
            }
        }
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    /// `records/changes`: the older single-zone form, answering at the top level.
    @Sendable func legacyRecordChanges(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let changes = try ZoneChangesRequest(legacyWire: body)
        let results = try await database.zoneChanges(
            caller: try context.requireCaller(), scope: try scope(context), request: changes, logger: context.logger)
        guard case .page(let page, let syncToken, let desiredKeys) = results.first else {
            throw CumulusError(.internalError, "no result for records/changes")
        }
        let options = FieldWriteOptions(numbersAsStrings: changes.numbersAsStrings)
        var writer = JSONWriter(reservingCapacity: 64 * 1024)
        writer.beginObject()
        writer.key("records")
        writer.beginArray()
        for change in page.changes { writer.recordChange(change, desiredKeys: desiredKeys, options: options) }
        writer.endArray()
        writer.key("syncToken")
        writer.string(syncToken)
        writer.key("moreComing")
        writer.bool(page.moreComing)
        writer.key("reverse")
        writer.bool(false)
        writer.endObject()
        return .json(writer)
    }

    // MARK: - Users

    @Sendable func discoverUsers(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let body = try await RequestBody.object(request, limits: limits)
        let lookup = try UserLookupRequest(wire: body)
        try checkCount(lookup.keys.count, path: "lookupInfos")
        let users = try await accounts.discover(caller: try context.requireCaller(), request: lookup, logger: context.logger)
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("users")
        writer.beginArray()
        for user in users { writer.discoveredUser(user) }
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    /// `GET users/discover` lists address-book contacts in CloudKit; Cumulus has no address book, so it answers none.
    @Sendable func discoverAll(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let caller = try context.requireCaller()
        guard caller.user != nil else { throw CumulusError(.authenticationRequired, "request needs authorization") }
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("users")
        writer.beginArray()
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    // MARK: - Users

    @Sendable func caller(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let caller = try context.requireCaller()
        guard let name = caller.authorName else {
            throw CumulusError(.authenticationRequired, "request needs authorization: users/caller needs ckWebAuthToken")
        }
        var writer = JSONWriter()
        writer.userIdentity(userRecordName: name, user: caller.user)
        return .json(writer)
    }

    // MARK: - Helpers

    private func checkCount(_ count: Int, path: String) throws(CumulusError) {
        if count > limits.maximumOperationsPerRequest {
            throw CumulusError(.badRequest, "\(path): \(count) items; the limit is \(limits.maximumOperationsPerRequest) per request")
        }
    }

    private func scope(_ context: CumulusRequestContext) throws(CumulusError) -> DatabaseScope {
        guard let name = context.parameters.get("database"), let scope = DatabaseScope(rawValue: name) else {
            throw CumulusError(.badRequest, "path: database must be public, private or shared")
        }
        return scope
    }
}

/// Reading request bodies as JSON, whatever their content type (CloudKit clients send `text/plain` too).
enum RequestBody {
    static func object(_ request: Request, limits: Limits) async throws -> WireObject {
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limits.maximumRequestBodySize {
            throw CumulusError(.quotaExceeded, "body: \(length) bytes; the limit is \(limits.maximumRequestBodySize) bytes")
        }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: limits.maximumRequestBodySize)
        } catch let error as any HTTPResponseError where error.status == .contentTooLarge {
            throw CumulusError(.quotaExceeded, "body: larger than the limit of \(limits.maximumRequestBodySize) bytes")
        }
        let bytes = buffer.readableBytesView
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            return try WireObject(.object([:]), path: "")
        }
        do {
            return try WireObject(try JSONValue(parsing: bytes), path: "")
        } catch let error as JSONParseError {
            throw CumulusError(.badRequest, "body: \(error.description)")
        }
    }
}
