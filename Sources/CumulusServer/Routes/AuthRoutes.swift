import CumulusCore
import CumulusModel
import CumulusStore
import HTTPTypes
import Hummingbird
import Logging

/// Sign-up, sign-in and sign-out over HTTP, so a client app needs no command line to get a `ckWebAuthToken`.
///
/// `POST /auth/1/{container}/{environment}/signup|signin|signout?ckAPIToken=…` with a JSON body
/// `{"name": …, "password": …, "email": …}`; sign-up and sign-in answer `{"ckWebAuthToken", "userRecordName"}`.
/// These routes are Cumulus's own: CloudKit signs users in through Apple's pages.
struct AuthRoutes {
    let accounts: AccountService
    let limits: Limits
    let metrics: ServerMetrics
    /// How long a refused sign-up or sign-in waits before its answer, so a flood of them from one connection comes at
    /// a request a delay (``RequestLimits/refusalDelay``).
    var refusalDelay: Duration = .zero

    func register(on group: RouterGroup<CumulusRequestContext>) {
        group.post("signup", use: signUp)
        group.post("signin", use: signIn)
        group.post("signout", use: signOut)
        group.post("discoverability", use: discoverability)
    }

    /// `POST …/discoverability?ckAPIToken=…&ckWebAuthToken=…` with `{"discoverable": true}`: whether other users can
    /// find the signed-in user with `users/discover` and `users/lookup/*`. Off by default.
    @Sendable func discoverability(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let container = try await checkAPIToken(request, context: context)
        guard let token = request.uri.queryParameters["ckWebAuthToken"].map(String.init), !token.isEmpty else {
            throw CumulusError(.authenticationRequired, "request needs authorization: ckWebAuthToken is required")
        }
        let user = try await accounts.authenticate(webAuthToken: token, container: container, logger: context.logger)
        let body = try await RequestBody.object(request, limits: limits)
        guard let discoverable = try body.bool("discoverable") else {
            throw CumulusError(.badRequest, "discoverable: is required")
        }
        try await accounts.setDiscoverable(user, discoverable, logger: context.logger)
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("userRecordName")
        writer.string(user.userRecordName)
        writer.key("discoverable")
        writer.bool(discoverable)
        writer.endObject()
        return .json(writer)
    }

    @Sendable func signUp(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let container = try await checkAPIToken(request, context: context)
        let body = try await RequestBody.object(request, limits: limits)
        let (user, token) = try await countingRefusals {
            try await accounts.signUp(
                container: container, name: try body.requiredString("name"), password: try body.requiredString("password"),
                email: try body.string("email"), address: context.remoteAddress, logger: context.logger
            )
        }
        if try body.bool("discoverable") == true {
            try await accounts.setDiscoverable(user, true, logger: context.logger)
        }
        return tokenResponse(user.userRecordName, token, status: .created)
    }

    @Sendable func signIn(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let container = try await checkAPIToken(request, context: context)
        let body = try await RequestBody.object(request, limits: limits)
        let (user, token) = try await countingRefusals {
            try await accounts.signIn(
                container: container, name: try body.requiredString("name"), password: try body.requiredString("password"),
                address: context.remoteAddress, logger: context.logger
            )
        }
        return tokenResponse(user.userRecordName, token, status: .ok)
    }

    @Sendable func signOut(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        _ = try await checkAPIToken(request, context: context)
        let body = try await RequestBody.object(request, limits: limits)
        guard let token = try body.string("ckWebAuthToken") ?? request.uri.queryParameters["ckWebAuthToken"].map(String.init) else {
            throw CumulusError(.badRequest, "ckWebAuthToken: is required")
        }
        try await accounts.signOut(webAuthToken: token, logger: context.logger)
        return Response(status: .noContent)
    }

    /// Runs a sign-up or sign-in, counting a refusal by the sign-in limits (attempts per account and address, hashing
    /// at once) in `cumulus_limit_refusals_total{limit="sign_in"}`, and answering it after the refusal delay.
    private func countingRefusals<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as CumulusError where error.code == .throttled {
            metrics.refused(limit: "sign_in")
            if refusalDelay > .zero { try await Task.sleep(for: refusalDelay) }
            throw error
        }
    }

    /// Sign-up and sign-in need the container's API token, like every other client call.
    private func checkAPIToken(_ request: Request, context: CumulusRequestContext) async throws -> String {
        guard let container = context.parameters.get("container"),
            let environment = context.parameters.get("environment").flatMap(ContainerEnvironment.init(rawValue:))
        else {
            throw CumulusError(.badRequest, "path: expected /auth/1/{container}/{development|production}/…")
        }
        try await accounts.authenticate(
            apiToken: request.uri.queryParameters["ckAPIToken"].map(String.init), container: container, environment: environment,
            logger: context.logger
        )
        return container
    }

    private func tokenResponse(_ userRecordName: String, _ token: String, status: HTTPResponse.Status) -> Response {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("ckWebAuthToken")
        writer.string(token)
        writer.key("userRecordName")
        writer.string(userRecordName)
        writer.endObject()
        return .json(writer, status: status)
    }
}
