public import CumulusModel
import Foundation

/// An error from a Cumulus (or CloudKit Web Services) call, with CloudKit's code, `retryAfter`, and the server's record
/// on conflicts.
public struct CloudError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong: a server code, or a client-side failure.
    public enum Code: Sendable, Hashable {
        case server(ServerErrorCode)
        /// No answer: the network or the server is down.
        case networkFailure
        /// An answer that could not be read.
        case invalidResponse
        /// The server no longer accepts a change token (CloudKit's `changeTokenExpired`): fetch again without one.
        /// On the wire, `BAD_REQUEST` with the extension `ckErrorCode` `CHANGE_TOKEN_EXPIRED`.
        case changeTokenExpired
    }

    public var code: Code
    public var reason: String
    /// Seconds after which a retry may succeed.
    public var retryAfter: Int?
    /// The server's current record, on `CONFLICT`.
    public var serverRecord: CloudRecord?

    public init(code: Code, reason: String, retryAfter: Int? = nil, serverRecord: CloudRecord? = nil) {
        self.code = code
        self.reason = reason
        self.retryAfter = retryAfter
        self.serverRecord = serverRecord
    }

    /// Whether retrying later, unchanged, may succeed: throttling, transient server errors, no network.
    public var isTransient: Bool {
        switch code {
        case .networkFailure: true
        case .server(let code): code == .throttled || code == .tryAgainLater || code == .internalError
        case .invalidResponse, .changeTokenExpired: false
        }
    }

    public var description: String { "\(code): \(reason)" }

    /// Whether the error is about who is asking (a missing, wrong or expired token), not about what was sent: no record
    /// is at fault, and the app must sign in again.
    var concernsTheAccount: Bool {
        code == .server(.authenticationFailed) || code == .server(.authenticationRequired) || code == .invalidResponse
    }

    /// Whether a request-level error applies to every record of the request alike (the zone is gone, or closed to
    /// the caller), so splitting the request cannot isolate a culprit.
    var concernsTheZone: Bool {
        code == .server(.zoneNotFound) || code == .server(.accessDenied) || code == .server(.notFound)
    }

    /// The failure a state store keeps for a refused pending change.
    var syncFailure: SyncFailure {
        switch code {
        case .server(let code): SyncFailure(code: code, reason: reason)
        case .changeTokenExpired: SyncFailure(code: .badRequest, reason: reason)
        case .networkFailure, .invalidResponse: SyncFailure(code: .internalError, reason: reason)
        }
    }

    /// The error of one record of an answer, with the server's record on `CONFLICT`.
    init(_ error: ItemError, serverRecord: ResponseRecord? = nil) {
        self.init(code: Self.code(error.code, error.ckErrorCode), reason: error.reason, serverRecord: serverRecord.map(CloudRecord.init))
    }

    /// The error an answer other than a success carries: CloudKit's envelope (``ErrorResponse``), with `retryAfter`
    /// from the body or else the `Retry-After` header. A body that is not the envelope, or holds a code this client
    /// does not know, is an invalid response, reported and never retried.
    static func answer(_ body: some Collection<UInt8>, status: Int, retryAfterHeader: String? = nil) -> CloudError {
        guard let envelope = try? ErrorResponse(wireBytes: body) else {
            let reason = (try? JSONValue(parsing: body))?["reason"]?.stringValue
            return CloudError(code: .invalidResponse, reason: reason ?? "HTTP \(status) without CloudKit's error envelope")
        }
        return CloudError(
            code: code(envelope.serverErrorCode, envelope.ckErrorCode), reason: envelope.reason,
            retryAfter: envelope.retryAfter ?? retryAfterHeader.flatMap { Int($0) })
    }

    /// The code a client goes by: the finer one where the server sent one it knows.
    private static func code(_ serverErrorCode: ServerErrorCode, _ ckErrorCode: CKErrorCode?) -> Code {
        switch ckErrorCode {
        case .changeTokenExpired?: .changeTokenExpired
        case nil: .server(serverErrorCode)
        }
    }
}
