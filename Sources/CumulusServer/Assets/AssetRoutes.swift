import Crypto
import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// CloudKit's asset wire: `assets/upload` answers an upload URL per token; the client POSTs the bytes there and gets
/// the `singleFile` dictionary to save as an `ASSETID` field; a fetched record's asset carries a `downloadURL`.
/// `assets/rereference` makes receipts for assets records already hold, to save in other records.
///
/// Bytes stream to and from ``AssetStorage``: an upload is hashed and counted as it arrives and never held whole in
/// memory; a download is read in chunks, with `Range`, `ETag` and `Content-Length`.
struct AssetRoutes {
    let database: DatabaseService
    let storage: any AssetStorage
    let links: AssetURLs
    let limits: Limits

    func registerOperations(on group: RouterGroup<DatabaseContext>) {
        group.post("assets/upload", use: requestUpload)
        group.post("assets/rereference", use: rereference)
    }

    func registerTransfers(on router: Router<CumulusRequestContext>) {
        router.post("assets/1/:container/:environment/upload/:receipt", use: upload)
        router.get("assets/1/:container/:environment/download/:file", use: download)
    }

    // MARK: - assets/upload and assets/rereference

    @Sendable func requestUpload(_ request: Request, context: DatabaseContext) async throws -> AssetUploadResponse {
        let body = try AssetUploadRequest(wire: try await RequestBody.object(request, limits: limits))
        let uploads = try await database.assets.issueReceipts(
            caller: context.caller, scope: context.scope, zoneID: body.zoneID,
            tokens: body.tokens.map {
                AssetUploadToken(recordName: $0.recordName, recordType: $0.recordType, fieldName: $0.fieldName)
            },
            maximumPending: links.limits.maximumPendingUploads, logger: context.logger)
        var tokens: [AssetUploadResponse.Token] = []
        for (recordName, upload) in uploads {
            tokens.append(
                .init(
                    recordName: recordName, fieldName: upload.fieldName ?? "",
                    url: try await links.uploadURL(upload, request: request, logger: context.logger)))
        }
        return AssetUploadResponse(tokens: tokens)
    }

    @Sendable func rereference(_ request: Request, context: DatabaseContext) async throws -> AssetRereferenceResponse {
        let body = try AssetRereferenceRequest(wire: try await RequestBody.object(request, limits: limits))
        let fields = body.assets.map { (recordName: $0.recordName, fieldName: $0.fieldName) }
        let made = try await database.assets.rereference(
            caller: context.caller, scope: context.scope, zoneID: body.zoneID, fields: fields, logger: context.logger)
        return AssetRereferenceResponse(
            assets: zip(fields, made).flatMap { field, uploads in
                uploads.map { .init(recordName: field.recordName, fieldName: field.fieldName, value: Self.uploadedAsset($0)) }
            })
    }

    /// The asset of an uploaded receipt: what a record's `ASSETID` field takes.
    static func uploadedAsset(_ upload: AssetUpload) -> UploadedAsset {
        // Cumulus does not encrypt assets per record: the reference checksum is the file's own.
        UploadedAsset(
            Asset(fileChecksum: upload.checksum ?? "", size: upload.size ?? 0, referenceChecksum: upload.checksum ?? "", receipt: upload.receipt))
    }

    // MARK: - Transfers

    private func target(_ context: CumulusRequestContext) throws -> (String, ContainerEnvironment) {
        guard let container = context.parameters.get("container"),
            let environment = context.parameters.get("environment").flatMap(ContainerEnvironment.init(rawValue:))
        else { throw CumulusError(.notFound, "path: expected /assets/1/{container}/{development|production}/…") }
        return (container, environment)
    }

    /// Counts and hashes an upload's bytes as they pass, refusing them past the size limit.
    final class UploadMeter: Sendable {
        private let state = Mutex((hasher: SHA256(), size: Int64(0)))
        let limit: Int64

        init(limit: Int64) { self.limit = limit }

        func pass(_ buffer: ByteBuffer) throws -> [UInt8] {
            let bytes = Array(buffer.readableBytesView)
            try state.withLock { state in
                state.size += Int64(bytes.count)
                guard state.size <= limit else {
                    throw CloudKitErrorResponse(
                        code: .quotaExceeded, reason: "asset: larger than the limit of \(limit) bytes", closesConnection: true)
                }
                state.hasher.update(data: bytes)
            }
            return bytes
        }

        var result: (size: Int64, checksum: String) {
            state.withLock { state in (state.size, Data(state.hasher.finalize()).base64EncodedString()) }
        }
    }

    @Sendable func upload(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let (container, environment) = try target(context)
        let receipt = context.parameters.get("receipt") ?? ""
        try await links.verify(request, .upload, container: container, environment: environment, id: receipt, logger: context.logger)
        let limit = links.limits.maximumSize
        if let length = request.headers[.contentLength].flatMap(Int64.init), length > limit {
            throw CloudKitErrorResponse(code: .quotaExceeded, reason: "asset: \(length) bytes; the limit is \(limit) bytes", closesConnection: true)
        }
        guard let upload = try await database.assets.uploads(receipts: [receipt], logger: context.logger).first,
            upload.database.container == container, upload.database.environment == environment
        else { throw CumulusError(.notFound, "receipt: no such upload") }
        guard upload.fileID == nil else { throw CumulusError(.conflict, "receipt: its bytes were uploaded already; ask assets/upload for another") }
        let usage = try await database.assets.usage(
            uploader: upload.uploader, container: container, pendingSince: links.clock.milliseconds() - 24 * 3600 * 1000, logger: context.logger)
        if usage.pendingBytes >= links.limits.maximumPendingBytes {
            throw CloudKitErrorResponse(
                code: .quotaExceeded,
                reason: "asset: \(usage.pendingBytes) bytes are uploaded and waiting to be saved in a record; save them or wait a day",
                closesConnection: true)
        }
        if usage.storedBytes >= links.limits.maximumStoredBytes {
            throw CloudKitErrorResponse(
                code: .quotaExceeded,
                reason: "asset: \(usage.storedBytes) bytes of assets are stored for this uploader, the quota is \(links.limits.maximumStoredBytes); "
                    + "delete records that hold assets to make room",
                closesConnection: true)
        }

        // Each upload writes a file of its own: two uploads racing on one receipt cannot mix their bytes.
        let fileID = TokenCodec.makeToken()
        let meter = UploadMeter(limit: limit)
        // A form (multipart) body is accepted too: its file part is taken out as it streams.
        let form = request.headers[.contentType].flatMap(MultipartFile.boundary(contentType:)).map(MultipartFileReader.init(boundary:))
        let received = Mutex(Int64(0))
        do {
            try await storage.write(
                fileID: fileID,
                chunks: request.body.map { buffer in
                    received.withLock { $0 += Int64(buffer.readableBytes) }
                    guard let form else { return try meter.pass(buffer) }
                    let file = try form.feed(Array(buffer.readableBytesView))
                    return try meter.pass(ByteBuffer(bytes: file))
                })
            try form?.finish()
        } catch let error as any HTTPResponseError where error.status == .contentTooLarge {
            try? await storage.delete(fileIDs: [fileID])
            throw CloudKitErrorResponse(code: .quotaExceeded, reason: "asset: larger than the limit of \(limit) bytes", closesConnection: true)
        } catch let error as MultipartFile.Failure {
            try? await storage.delete(fileIDs: [fileID])
            throw CumulusError(.badRequest, "\(error)")
        }
        let (size, checksum) = meter.result
        let arrived = received.withLock { $0 }
        if let expected = request.headers[.contentLength].flatMap(Int64.init), expected != arrived {
            try? await storage.delete(fileIDs: [fileID])
            throw CumulusError(.badRequest, "asset: \(arrived) bytes arrived of the \(expected) announced; upload again")
        }
        // A client may say what it sends; bytes that do not match are refused and nothing is kept.
        if let claimed = request.headers[HTTPField.Name("X-Cumulus-Checksum")!] ?? request.uri.queryParameters["checksum"].map(String.init),
            claimed != checksum
        {
            try? await storage.delete(fileIDs: [fileID])
            throw CumulusError(.badRequest, "asset: the bytes' SHA-256 is \(checksum), not the \(claimed) announced; upload again")
        }
        guard try await database.assets.completeUpload(receipt: receipt, fileID: fileID, size: size, checksum: checksum, logger: context.logger)
        else {
            try? await storage.delete(fileIDs: [fileID])
            throw CumulusError(.conflict, "receipt: its bytes were uploaded already; ask assets/upload for another")
        }
        var completed = upload
        completed.fileID = fileID
        completed.size = size
        completed.checksum = checksum
        return try AssetUploadedResponse(singleFile: Self.uploadedAsset(completed)).response(from: request, context: context)
    }

    @Sendable func download(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let (container, environment) = try target(context)
        let fileID = context.parameters.get("file") ?? ""
        try await links.verify(request, .download, container: container, environment: environment, id: fileID, logger: context.logger)
        guard let size = try await storage.size(fileID: fileID) else { throw CumulusError(.notFound, "asset: no such file") }
        // The file's name is random and its bytes never change: the ID is a strong validator.
        let etag = "\"\(fileID)\""
        var headers: HTTPFields = [
            .contentType: "application/octet-stream", .eTag: etag, .acceptRanges: "bytes", .cacheControl: "private, max-age=3600",
        ]
        if request.headers[.ifNoneMatch] == etag {
            return Response(status: .notModified, headers: headers)
        }
        var range: Range<Int64>? = nil
        var status = HTTPResponse.Status.ok
        if let header = request.headers[.range] {
            guard let parsed = Self.byteRange(header, size: size) else {
                headers[.contentRange] = "bytes */\(size)"
                return Response(status: .rangeNotSatisfiable, headers: headers)
            }
            range = parsed
            status = .partialContent
            headers[.contentRange] = "bytes \(parsed.lowerBound)-\(parsed.upperBound - 1)/\(size)"
        }
        let length = range.map { $0.upperBound - $0.lowerBound } ?? size
        headers[.contentLength] = String(length)
        if request.method == .head { return Response(status: status, headers: headers) }
        let chunks = try await storage.read(fileID: fileID, range: range)
        return Response(
            status: status, headers: headers,
            body: ResponseBody { writer in
                for try await chunk in chunks { try await writer.write(ByteBuffer(bytes: chunk)) }
                try await writer.finish(nil)
            })
    }

    /// One range of `bytes=a-b`, `bytes=a-` or `bytes=-n`; `nil` when it cannot be satisfied. Several ranges are
    /// answered as the first.
    static func byteRange(_ header: String, size: Int64) -> Range<Int64>? {
        guard header.hasPrefix("bytes="), let first = header.dropFirst(6).split(separator: ",").first else { return nil }
        let parts = first.trimmingCharacters(in: .whitespaces).split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        if parts[0].isEmpty {
            guard let suffix = Int64(parts[1]), suffix > 0, size > 0 else { return nil }
            return max(0, size - suffix)..<size
        }
        guard let start = Int64(parts[0]), start < size else { return nil }
        let end = parts[1].isEmpty ? size - 1 : min(Int64(parts[1]) ?? -1, size - 1)
        guard end >= start else { return nil }
        return start..<(end + 1)
    }
}
