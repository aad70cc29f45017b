import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird
import Logging

extension HTTPField.Name {
    static let cloudKitKeyID = Self("X-Apple-CloudKit-Request-KeyID")!
    static let cloudKitDate = Self("X-Apple-CloudKit-Request-ISO8601Date")!
    static let cloudKitSignature = Self("X-Apple-CloudKit-Request-SignatureV1")!
    /// The client's device identifier, recorded in `created.deviceID` and `modified.deviceID`.
    static let cumulusDevice = Self("X-Cumulus-Device")!
    /// The name the device gives itself, for the console.
    static let cumulusDeviceName = Self("X-Cumulus-Device-Name")!
}

/// Establishes the ``Caller`` of a `/database/1/{container}/{environment}/…` request, as CloudKit Web Services does:
/// either a server-to-server signature, or `ckAPIToken` (container and environment) plus an optional
/// `ckWebAuthToken` (the user). Tokens are never logged.
struct AuthenticationMiddleware: RouterMiddleware {
    typealias Context = CumulusRequestContext

    let accounts: AccountService
    let limits: Limits
    let clock: WallClock
    let signatureDateTolerance: TimeInterval
    /// Whether an empty body hash is accepted for bodies over 1 MiB (unsafe; see ``ServerConfiguration``).
    var acceptsUnhashedLargeServerToServerBodies = false

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var request = request
        var context = context
        guard let container = context.parameters.get("container") else {
            throw CumulusError(.badRequest, "path: container is missing")
        }
        guard let environmentName = context.parameters.get("environment"), let environment = ContainerEnvironment(rawValue: environmentName) else {
            throw CumulusError(.badRequest, "path: environment must be development or production")
        }
        let deviceID = request.headers[.cumulusDevice].map { String($0.prefix(64)) } ?? "web"
        // A name for people: printable characters only, as the console shows it.
        let deviceName = request.headers[.cumulusDeviceName].map {
            String($0.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.prefix(64))
        }
        context.logger[metadataKey: "cumulus.container"] = "\(container)"

        if let keyID = request.headers[.cloudKitKeyID] {
            let body = try await collectBody(&request)
            guard let date = request.headers[.cloudKitDate], let signature = request.headers[.cloudKitSignature] else {
                throw CumulusError(.authenticationFailed, "server-to-server requests need X-Apple-CloudKit-Request-ISO8601Date and -SignatureV1")
            }
            guard let signedAt = ServerToServerSignature.parseDate(date) else {
                throw CumulusError(.authenticationFailed, "X-Apple-CloudKit-Request-ISO8601Date is not an ISO 8601 date")
            }
            guard abs(signedAt.timeIntervalSince(clock.date())) <= signatureDateTolerance else {
                throw CumulusError(
                    .authenticationFailed, "X-Apple-CloudKit-Request-ISO8601Date is outside the accepted window of ±\(Int(signatureDateTolerance)) s")
            }
            guard let key = try await accounts.serverKey(id: keyID, logger: context.logger),
                key.container == container, key.environment == environment,
                let signatureR = ServerToServerSignature(keyID: keyID, date: date, signature: signature)
                    .verify(
                        publicKeyPEM: key.publicKeyPEM, body: body, path: request.uri.path, query: request.uri.query,
                        acceptsUnhashedLargeBodies: acceptsUnhashedLargeServerToServerBodies)
            else {
                throw CumulusError(.authenticationFailed, "server-to-server signature is not valid for this key, container and environment")
            }
            // A captured request sent again is refused: each signature is used once while its date is accepted.
            try await accounts.useServerToServerSignature(
                keyID: keyID, signatureR: signatureR, validUntil: signedAt.addingTimeInterval(signatureDateTolerance), logger: context.logger)
            context.caller = Caller(
                container: container, environment: environment, user: nil, credential: .serverKey(keyID: keyID), deviceID: deviceID)
            return try await next(request, context)
        }

        let query = request.uri.queryParameters
        try await accounts.authenticate(
            apiToken: query["ckAPIToken"].map(String.init), container: container, environment: environment, logger: context.logger
        )
        var user: UserAccount?
        if let webAuthToken = query["ckWebAuthToken"].map(String.init), !webAuthToken.isEmpty {
            user = try await accounts.authenticate(webAuthToken: webAuthToken, container: container, logger: context.logger)
        }
        context.caller = Caller(
            container: container, environment: environment, user: user, credential: .apiToken, deviceID: deviceID, deviceName: deviceName)
        return try await next(request, context)
    }

    private func collectBody(_ request: inout Request) async throws -> [UInt8] {
        let buffer = try await request.collectBody(upTo: limits.maximumRequestBodySize)
        return Array(buffer.readableBytesView)
    }
}
