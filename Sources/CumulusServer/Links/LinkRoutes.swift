import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Share a copy by link: uploads under `/links/1/{container}/{environment}/`, downloads at `/s/{id}`.
struct LinkRoutes {
    let links: LinkService
    let accounts: AccountService
    let address: PublicAddress
    let appStoreID: String?
    let appleAppSiteAssociation: String?
    let metrics: ServerMetrics

    func register(on router: Router<CumulusRequestContext>) {
        let uploads = router.group("links/1/:container/:environment")
        uploads.post("drives", use: uploadDrives)
        uploads.post("records", use: uploadRecords)
        router.get("s/:id", use: download)
        router.get(".well-known/apple-app-site-association", use: appSiteAssociation)
    }

    // MARK: - Uploads

    @Sendable func uploadDrives(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await upload(request, context: context) { container, environment, uploader, body in
            let drives = try DriveLinksRequest(
                wire: body, maximumDrives: links.limits.maximumDrivesPerRequest, maximumPoints: links.limits.maximumPointsPerDrive)
            return try await links.uploadDrives(
                container: container, environment: environment, uploader: uploader, request: drives, logger: context.logger)
        }
    }

    @Sendable func uploadRecords(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await upload(request, context: context) { container, environment, uploader, body in
            let records = try RecordsLinkRequest(wire: body, maximumRecords: links.limits.maximumRecordsPerSnapshot)
            return try await links.uploadRecords(
                container: container, environment: environment, uploader: uploader, request: records, logger: context.logger)
        }
    }

    /// The container's API token is the API key; the device identifier comes in `X-Cumulus-Device`.
    private func upload(
        _ request: Request, context: CumulusRequestContext,
        _ store: (String, ContainerEnvironment, LinkUploader, WireObject) async throws -> [CreatedLink]
    ) async throws -> Response {
        guard let container = context.parameters.get("container"),
            let environment = context.parameters.get("environment").flatMap(ContainerEnvironment.init(rawValue:))
        else {
            throw CumulusError(.badRequest, "path: expected /links/1/{container}/{development|production}/…")
        }
        // The container's API token is the API key.
        try await accounts.authenticate(
            apiToken: request.uri.queryParameters["ckAPIToken"].map(String.init), container: container, environment: environment,
            logger: context.logger
        )
        guard let device = request.headers[.cumulusDevice], !device.isEmpty, device.utf8.count <= 128 else {
            throw CumulusError(.badRequest, "X-Cumulus-Device: header with the app's device identifier is required")
        }
        let body = try await RequestBody.object(request, limits: Limits(maximumRequestBodySize: links.limits.maximumBodySize))
        let created: [CreatedLink]
        do {
            created = try await store(
                container, environment, LinkUploader(container: container, deviceID: device, ipAddress: context.remoteAddress), body)
        } catch let error as CumulusError where error.code == .throttled || error.code == .quotaExceeded {
            metrics.refused(limit: "link_uploads")
            throw error
        }
        metrics.linksCreated(created.count)
        let links = created.map { CreatedLinksResponse.Link(id: $0.id, url: "\(address.base(for: request))/s/\($0.id)", expiresAt: $0.expiresAt) }
        return try CreatedLinksResponse(links: links).response(from: request, context: context)
    }

    // MARK: - Downloads

    /// JSON for the app (`Accept: application/json`, or always at `/s/{id}.json`), an HTML page for a browser.
    @Sendable func download(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let (id, wantsJSON) = PublicAddress.pageRequest(context.parameters.get("id") ?? "", request)
        let url = "\(address.base(for: request))/s/\(id)"
        guard let snapshot = try await links.snapshot(id: id, logger: context.logger) else {
            if wantsJSON { throw CumulusError(.notFound, "This link has expired") }
            return .html(LinkPage.expired(), status: .notFound)
        }
        if wantsJSON {
            return try LinkSnapshotResponse(
                id: snapshot.id, expiresAt: snapshot.expiresAt, content: .stored(kind: snapshot.kind, json: snapshot.payload)
            ).response(from: request, context: context)
        }
        if snapshot.kind == "drive" {
            return .html(LinkPage.drive(try LinkService.readStoredDrive(snapshot.payload), url: url, appStoreID: appStoreID), status: .ok)
        }
        let records = (try? JSONValue(parsing: snapshot.payload))?.arrayValue ?? []
        return .html(LinkPage.records(records, url: url, appStoreID: appStoreID), status: .ok)
    }

    /// Serves the configured apple-app-site-association, so the installed app opens share links itself.
    @Sendable func appSiteAssociation(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        guard let appleAppSiteAssociation else { throw CumulusError(.notFound, "no apple-app-site-association is configured") }
        return Response(
            status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: appleAppSiteAssociation)))
    }
}

extension HTTPField.Name {
}
