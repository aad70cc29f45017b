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
    let limits: Limits

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
            case .found(let zone):
                writer.zone(zone)
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
        for (result, desiredKeys) in response.results {
            writer.recordResult(result, desiredKeys: desiredKeys, options: options)
        }
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
