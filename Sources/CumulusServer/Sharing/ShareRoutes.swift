import CumulusCore
import CumulusModel
import CumulusStore
import HTTPTypes
import Hummingbird
import Logging

/// `GET /share/{shortGUID}`: the URL every live share hands out.
///
/// A browser gets ``SharePage``. A client asking for `application/json` (or `/share/{shortGUID}.json`) gets what
/// `records/resolve` answers: in full for a caller who sends `ckAPIToken` and `ckWebAuthToken` of the share's
/// container, and for anyone else only what opening the link needs (container, environment, owner, title).
struct ShareRoutes {
    let database: DatabaseService
    let accounts: AccountService
    let address: PublicAddress
    let appStoreID: String?

    func register(on router: Router<CumulusRequestContext>) {
        router.get("share/:shortGUID", use: share)
    }

    @Sendable func share(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let (shortGUID, wantsJSON) = PublicAddress.pageRequest(context.parameters.get("shortGUID") ?? "", request)
        let preview = try await database.shares.preview(shortGUID: shortGUID, logger: context.logger)
        guard wantsJSON else {
            guard let preview else { return .html(SharePage.notFound(), status: .notFound) }
            return .html(SharePage.share(preview, url: address.shareURL(shortGUID, for: request), appStoreID: appStoreID), status: .ok)
        }
        guard let preview else { throw CumulusError(.notFound, "no share has this link") }
        let query = request.uri.queryParameters
        if let apiToken = query["ckAPIToken"].map(String.init) {
            let caller = try await authenticate(
                apiToken: apiToken, webAuthToken: query["ckWebAuthToken"].map(String.init), share: preview.share, context)
            let results = try await database.shares.resolve(
                caller: caller, request: ShortGUIDRequest(entries: [.init(value: shortGUID)]), accept: false, logger: context.logger)
            return try ShareLinksResponse(results, viewer: caller.authorName) { address.shareURL($0, for: request) }
                .response(from: request, context: context)
        }
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("results")
        writer.beginArray()
        writer.beginObject()
        writer.key("containerIdentifier")
        writer.string(preview.share.database.container)
        writer.key("environment")
        writer.string(preview.share.database.environment.rawValue)
        writer.key("shortGUID")
        writer.string(shortGUID)
        writer.key("ownerIdentity")
        OwnerIdentity(userRecordName: nil, name: preview.ownerName).write(to: &writer)
        if let title = preview.title {
            writer.key("title")
            writer.string(title)
        }
        writer.key("publicPermission")
        writer.string(preview.share.publicPermission.rawValue)
        writer.key("webpageURL")
        writer.string(address.shareURL(shortGUID, for: request))
        writer.endObject()
        writer.endArray()
        writer.endObject()
        return .json(writer)
    }

    /// The caller of a JSON request for a share: its container's API token and the user's web auth token.
    private func authenticate(apiToken: String, webAuthToken: String?, share: ShareState, _ context: CumulusRequestContext) async throws -> Caller {
        let container = share.database.container
        let environment = share.database.environment
        try await accounts.authenticate(apiToken: apiToken, container: container, environment: environment, logger: context.logger)
        guard let webAuthToken, !webAuthToken.isEmpty else {
            throw CumulusError(.authenticationRequired, "request needs authorization: resolving a share needs ckWebAuthToken")
        }
        let user = try await accounts.authenticate(webAuthToken: webAuthToken, container: container, logger: context.logger)
        return Caller(container: container, environment: environment, user: user, credential: .apiToken, deviceID: "web")
    }
}
