import CumulusCore
import CumulusModel
import CumulusStore
import HTTPTypes
import Hummingbird
import Logging
import NIOHTTP1

/// The CloudKit Web Services routes under `/database/1/{container}/{environment}/{database}/`.
///
/// Handlers are thin: read the body, call ``DatabaseService``, write the result. Authorization is decided in the
/// domain's ``AuthorizationPolicy``, never here.
struct DatabaseRoutes {
    let database: DatabaseService
    let accounts: AccountService
    let limits: Limits
    /// The configured public URL; `nil` uses the request's host.
    let address: PublicAddress
    let metrics: ServerMetrics
    let assetURLs: AssetURLs
    let clock: WallClock
    let exports = ExportThrottle()

    /// The records a feed page holds (not its tombstones), for their assets' download URLs.
    static func changedRecords(in page: ZoneChangePage) -> [StoredRecord] {
        page.changes.compactMap { if case .changed(let record) = $0 { record } else { nil } }
    }

    static func changedRecords(_ result: ZoneChangesResult) -> [StoredRecord] {
        if case .page(let page, _, _, _) = result { return changedRecords(in: page) }
        return []
    }

    /// The stable link of a share: `{public URL}/share/{shortGUID}`.
    func shareURL(_ shortGUID: String, request: Request) -> String {
        address.shareURL(shortGUID, for: request)
    }

    /// How share records of an answer are shown to its caller: whole, with the caller's own participation.
    func sharePresentation(_ shares: [String: ShareState], caller: Caller, request: Request) -> (String) -> SharePresentation? {
        let viewer = caller.authorName
        return { recordName in
            shares[recordName].map { SharePresentation(share: $0, viewer: viewer, url: shareURL($0.shortGUID, request: request)) }
        }
    }

    func register(on group: RouterGroup<DatabaseContext>) {
        // The five GET operations also answer POST, as some clients (and Postman collections) send POST.
        for method in [HTTPRequest.Method.get, .post] {
            group.on("zones/list", method: method, use: listZones)
            group.on("users/caller", method: method, use: caller)
            group.on("users/current", method: method, use: caller)
            group.on("subscriptions/list", method: method, use: listSubscriptions)
            group.on("users/export", method: method, use: exportUser)
        }
        group.post("subscriptions/lookup", use: lookupSubscriptions)
        group.post("subscriptions/modify", use: modifySubscriptions)
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
        group.post("records/reconcile", use: reconcileRecords)
        group.post("devices/verification", use: reportVerification)
        group.on("users/discover", method: .get, use: discoverAll)
        group.post("users/discover", use: discoverUsers)
        group.post("users/lookup/email", use: discoverUsers)
        group.post("users/lookup/id", use: discoverUsers)
        group.post("users/lookup/contacts", use: discoverAll)
    }

    // MARK: - Zones

    @Sendable func listZones(_ request: Request, context: DatabaseContext) async throws -> ZonesResponse {
        let zones = try await database.zones.list(caller: context.caller, scope: context.scope, logger: context.logger)
        return ZonesResponse(zones: zones.map { .zone($0.info) })
    }

    @Sendable func lookupZones(_ request: Request, context: DatabaseContext) async throws -> ZonesResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let results = try await database.zones.lookup(
            caller: context.caller, scope: context.scope, request: try ZonesLookupRequest(wire: body),
            logger: context.logger
        )
        return ZonesResponse(
            zones: results.map { result in
                switch result {
                case .found(let summary): .zone(summary.info)
                case .notFound(let zoneID): .failed(zoneID, ItemError(code: .zoneNotFound, reason: "zone \(zoneID.zoneName) does not exist"))
                }
            })
    }

    @Sendable func modifyZones(_ request: Request, context: DatabaseContext) async throws -> ZonesResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let results = try await database.zones.modify(
            caller: context.caller, scope: context.scope, request: try ZonesModifyRequest(wire: body),
            logger: context.logger
        )
        return ZonesResponse(
            zones: results.map { result in
                switch result {
                case .saved(let zone): .zone(ZoneInfo(zoneID: zone.zoneID))
                case .deleted(let zoneID): .deleted(zoneID)
                case .failed(let zoneID, let code, let reason): .failed(zoneID, ItemError(code: code, reason: reason))
                }
            })
    }

    // MARK: - Subscriptions

    @Sendable func listSubscriptions(_ request: Request, context: DatabaseContext) async throws -> SubscriptionsResponse {
        let subscriptions = try await database.subscriptions.list(
            caller: context.caller, scope: context.scope, logger: context.logger)
        return SubscriptionsResponse(subscriptions: subscriptions.map { .subscription($0) })
    }

    @Sendable func lookupSubscriptions(_ request: Request, context: DatabaseContext) async throws -> SubscriptionsResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let results = try await database.subscriptions.lookup(
            caller: context.caller, scope: context.scope, request: try SubscriptionsLookupRequest(wire: body),
            logger: context.logger)
        return SubscriptionsResponse(
            subscriptions: results.map { result in
                switch result {
                case .found(let subscription): .subscription(subscription)
                case .notFound(let id): .failed(subscriptionID: id, ItemError(code: .notFound, reason: "subscription \(id) does not exist"))
                }
            })
    }

    @Sendable func modifySubscriptions(_ request: Request, context: DatabaseContext) async throws -> SubscriptionsResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let results = try await database.subscriptions.modify(
            caller: context.caller, scope: context.scope, request: try SubscriptionsModifyRequest(wire: body),
            logger: context.logger)
        return SubscriptionsResponse(
            subscriptions: results.map { result in
                switch result {
                case .saved(let subscription): .subscription(subscription)
                case .deleted(let id): .deleted(subscriptionID: id)
                case .failed(let id, let code, let reason): .failed(subscriptionID: id, ItemError(code: code, reason: reason))
                }
            })
    }

    // MARK: - Records

    @Sendable func lookupRecords(_ request: Request, context: DatabaseContext) async throws -> RecordsResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let lookup = try RecordsLookupRequest(wire: body)
        let caller = context.caller
        let response = try await database.records.lookup(caller: caller, scope: context.scope, request: lookup, logger: context.logger)
        metrics.read(response.results.count { if case .found = $0 { true } else { false } }, operation: "lookup")
        let options = try await assetURLs.options(
            numbersAsStrings: lookup.numbersAsStrings,
            records: response.results.compactMap { if case .found(let record, _) = $0 { record } else { nil } }, request: request,
            logger: context.logger)
        let presentation = sharePresentation(response.shares, caller: caller, request: request)
        return RecordsResponse(
            records: response.results.map { result in
                switch result {
                case .found(let record, let desiredKeys):
                    .record(ResponseRecord(record, desiredKeys: desiredKeys, share: presentation(record.header.recordName)))
                case .notFound(let recordName):
                    .failed(recordName: recordName, ItemError(code: .notFound, reason: "record \(recordName) does not exist"), serverRecord: nil)
                }
            }, options: options)
    }

    @Sendable func modifyRecords(_ request: Request, context: DatabaseContext) async throws -> RecordsResponse {
        let body = try await RequestBody.modifyRequest(request, limits: limits)
        let response = try await database.records.modify(caller: context.caller, scope: context.scope, request: body, logger: context.logger)
        metrics.wrote(response.results.count { if case .failed = $0.0 { false } else { true } })
        let options = try await assetURLs.options(
            numbersAsStrings: response.numbersAsStrings,
            // Links for the records answered with fields: saved ones the client asked fields of (a client asking for
            // none, as CloudKit clients saving do, costs no scan of its records for assets), and the server's record of
            // a conflict, which is always answered whole, for the client to merge.
            records: response.results.compactMap { result, desiredKeys in
                switch result {
                case .saved(let record) where desiredKeys?.isEmpty != true: record
                case .failed(let failure): failure.serverRecord
                default: nil
                }
            },
            request: request, logger: context.logger)
        let presentation = sharePresentation(response.shares, caller: context.caller, request: request)
        return RecordsResponse(
            records: response.results.map { result, desiredKeys in RecordResult(result, desiredKeys: desiredKeys, shares: presentation) },
            options: options)
    }

    @Sendable func queryRecords(_ request: Request, context: DatabaseContext) async throws -> RecordsResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let caller = context.caller
        let response = try await database.queries.query(
            caller: caller, scope: context.scope, request: try RecordsQueryRequest(wire: body), logger: context.logger
        )
        metrics.read(response.records.count, operation: "query")
        let options = try await assetURLs.options(
            numbersAsStrings: response.numbersAsStrings, records: response.records, request: request, logger: context.logger)
        let presentation = sharePresentation(response.shares, caller: caller, request: request)
        return RecordsResponse(
            records: response.records.map { record in
                .record(ResponseRecord(record, desiredKeys: response.desiredKeys, share: presentation(record.header.recordName)))
            }, continuationMarker: response.continuationMarker, options: options)
    }

    // MARK: - Share links

    @Sendable func resolveShares(_ request: Request, context: DatabaseContext) async throws -> ShareLinksResponse {
        try await shareLinks(request, context: context, accept: false)
    }

    @Sendable func acceptShares(_ request: Request, context: DatabaseContext) async throws -> ShareLinksResponse {
        try await shareLinks(request, context: context, accept: true)
    }

    /// `records/resolve` and `records/accept` answer `results[]` of ShortGUID results or errors.
    private func shareLinks(_ request: Request, context: DatabaseContext, accept: Bool) async throws -> ShareLinksResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let caller = context.caller
        let results = try await database.shares.resolve(
            caller: caller, request: try ShortGUIDRequest(wire: body), accept: accept, logger: context.logger)
        // A root record answered with fields has its assets' download URLs, as in a lookup.
        let roots = results.compactMap { result -> StoredRecord? in
            guard case .resolved(let info) = result, info.rootRecordDesiredKeys?.isEmpty != true else { return nil }
            return info.rootRecord
        }
        let options = try await assetURLs.options(numbersAsStrings: false, records: roots, request: request, logger: context.logger)
        return ShareLinksResponse(results, viewer: caller.authorName, rootRecordOptions: options) { shareURL($0, request: request) }
    }

    // MARK: - Change feeds

    @Sendable func databaseChanges(_ request: Request, context: DatabaseContext) async throws -> DatabaseChangesResponse {
        let body = try await RequestBody.object(request, limits: limits)
        return try await database.feeds.databaseChanges(
            caller: context.caller, scope: context.scope, request: try DatabaseChangesRequest(wire: body),
            logger: context.logger
        )
    }

    @Sendable func zoneChanges(_ request: Request, context: DatabaseContext) async throws -> ZoneChangesResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let changes = try ZoneChangesRequest(wire: body)
        let caller = context.caller
        let results = try await database.feeds.zoneChanges(caller: caller, scope: context.scope, request: changes, logger: context.logger)
        countFeedPages(results)
        let options = try await assetURLs.options(
            numbersAsStrings: changes.numbersAsStrings, records: results.flatMap(Self.changedRecords), request: request, logger: context.logger)
        return ZoneChangesResponse(
            zones: results.map { result in
                switch result {
                case .page(let page, let syncToken, let desiredKeys, let shares):
                    let presentation = sharePresentation(shares, caller: caller, request: request)
                    return .page(
                        zoneID: page.zone.zoneID, syncToken: syncToken, moreComing: page.moreComing,
                        records: page.changes.map { RecordResult($0, desiredKeys: desiredKeys, shares: presentation) }, zoneDigest: page.digest)
                case .failed(let zoneID, let error):
                    return .failed(zoneID, ItemError(error))
                }
            }, options: options)
    }

    /// Pages and the records they carry, for ``ServerMetrics``.
    func countFeedPages(_ results: [ZoneChangesResult]) {
        for case .page(let page, _, _, _) in results {
            metrics.feedPage(records: page.changes.count)
        }
    }

    /// `records/reconcile`: which ranges of a zone's record names differ from what a device holds (a Cumulus
    /// extension, `docs/API.md`).
    @Sendable func reconcileRecords(_ request: Request, context: DatabaseContext) async throws -> RecordsReconcileResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let reconcile = try RecordsReconcileRequest(wire: body)
        return try await database.reconciliation.reconcile(
            caller: context.caller, scope: context.scope, request: reconcile, logger: context.logger)
    }

    /// `devices/verification`: what a device found when it verified its zones (a Cumulus extension, `docs/API.md`).
    @Sendable func reportVerification(_ request: Request, context: DatabaseContext) async throws -> DeviceVerificationResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let report = try DeviceVerificationReport(wire: body)
        let answer = try await database.verification.report(
            caller: context.caller, scope: context.scope, report: report, logger: context.logger)
        return answer
    }

    /// `records/changes`: the older single-zone form, answering at the top level.
    @Sendable func legacyRecordChanges(_ request: Request, context: DatabaseContext) async throws -> RecordChangesResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let changes = try ZoneChangesRequest(legacyWire: body)
        let caller = context.caller
        let results = try await database.feeds.zoneChanges(caller: caller, scope: context.scope, request: changes, logger: context.logger)
        countFeedPages(results)
        guard case .page(let page, let syncToken, let desiredKeys, let shares) = results.first else {
            throw CumulusError(.internalError, "no result for records/changes")
        }
        let options = try await assetURLs.options(
            numbersAsStrings: changes.numbersAsStrings, records: Self.changedRecords(in: page), request: request, logger: context.logger)
        let presentation = sharePresentation(shares, caller: caller, request: request)
        return RecordChangesResponse(
            records: page.changes.map { RecordResult($0, desiredKeys: desiredKeys, shares: presentation) }, syncToken: syncToken,
            moreComing: page.moreComing, zoneDigest: page.digest, options: options)
    }

    // MARK: - Users

    @Sendable func discoverUsers(_ request: Request, context: DatabaseContext) async throws -> UsersResponse {
        let body = try await RequestBody.object(request, limits: limits)
        let lookup = try UserLookupRequest(wire: body)
        try checkCount(lookup.keys.count, path: "lookupInfos")
        let users = try await accounts.discover(
            caller: context.caller, scope: context.scope, request: lookup, logger: context.logger)
        return UsersResponse(
            users: users.map { UserIdentity(userRecordName: $0.userRecordName, emailAddress: $0.emailAddress, name: $0.name, emailAtTopLevel: true) })
    }

    /// `GET users/discover` and `users/lookup/contacts` match the caller's address book in CloudKit; Cumulus has no
    /// address book, so they answer CloudKit's shape with no users.
    @Sendable func discoverAll(_ request: Request, context: DatabaseContext) async throws -> UsersResponse {
        try accounts.checkMayDiscover(context.caller, scope: context.scope)
        return UsersResponse(users: [])
    }

    // MARK: - Users

    @Sendable func caller(_ request: Request, context: DatabaseContext) async throws -> CallerResponse {
        let caller = context.caller
        guard let name = caller.authorName else {
            throw CumulusError(.authenticationRequired, "request needs authorization: users/caller needs ckWebAuthToken")
        }
        return CallerResponse(identity: UserIdentity(userRecordName: name, emailAddress: caller.user?.email, name: caller.user?.name))
    }

    /// `users/export`: the signed-in user's own data, one document (a Cumulus extension, `docs/OPERATIONS.md`), streamed
    /// as it is read: a failure after the first piece (the database stopping) ends the response early, and the
    /// document does not parse.
    @Sendable func exportUser(_ request: Request, context: DatabaseContext) async throws -> Response {
        let caller = context.caller
        guard let user = caller.user else { throw CumulusError(.authenticationRequired, "users/export: sign in; a user exports their own data") }
        let place = try exports.admit(user.userRecordName, now: clock.milliseconds())
        let (database, logger) = (database, context.logger)
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody { writer in
                // The place is held until the body is written, or dropped unwritten.
                defer { withExtendedLifetime(place) {} }
                try await database.exports.export(caller: caller, logger: logger) { piece in try await writer.write(ByteBuffer(bytes: piece)) }
                try await writer.finish(nil)
            })
    }

    // MARK: - Helpers

    private func checkCount(_ count: Int, path: String) throws(CumulusError) {
        if count > limits.maximumOperationsPerRequest {
            throw CumulusError(.badRequest, "\(path): \(count) items; the limit is \(limits.maximumOperationsPerRequest) per request")
        }
    }

}

/// Reading request bodies as JSON, whatever their content type (CloudKit clients send `text/plain` too).
enum RequestBody {
    static func object(_ request: Request, limits: Limits) async throws -> WireObject {
        try object(parsing: try await bytes(request, limit: limits.maximumRequestBodySize), limits: limits)
    }

    /// A `records/modify` body, scanned straight into its operations; a body the scan does not read is read as a tree,
    /// whose error names what is wrong.
    static func modifyRequest(_ request: Request, limits: Limits) async throws -> RecordsModifyRequest {
        let buffer = try await bytes(request, limit: limits.maximumRequestBodySize)
        if let scanned = RecordsModifyRequest(
            scanning: buffer.readableBytesView, maximumDepth: limits.maximumJSONDepth, maximumValues: limits.maximumJSONValues)
        {
            return scanned
        }
        return try RecordsModifyRequest(wire: try object(parsing: buffer, limits: limits))
    }

    static func object(parsing buffer: ByteBuffer, limits: Limits) throws -> WireObject {
        let bytes = buffer.readableBytesView
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            return try WireObject(.object([:]), path: "")
        }
        do {
            return try WireObject(
                try JSONValue(parsing: bytes, maximumDepth: limits.maximumJSONDepth, maximumValues: limits.maximumJSONValues), path: "")
        } catch let error as JSONParseError {
            throw CumulusError(.badRequest, "body: \(error.description)")
        }
    }

    /// The body, refused with `413 QUOTA_EXCEEDED` (and the connection closed) past `limit` bytes.
    static func bytes(_ request: Request, limit: Int) async throws -> ByteBuffer {
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit {
            throw CloudKitErrorResponse(code: .quotaExceeded, reason: "body: \(length) bytes; the limit is \(limit) bytes", closesConnection: true)
        }
        do {
            return try await request.body.collect(upTo: limit)
        } catch let error as any HTTPResponseError where error.status == .contentTooLarge {
            throw CloudKitErrorResponse(code: .quotaExceeded, reason: "body: larger than the limit of \(limit) bytes", closesConnection: true)
        } catch let error as HTTPParserError {
            throw CloudKitErrorResponse.malformedMessage(error)
        }
    }
}
