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
        case .invalidResponse: false
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
        case .networkFailure, .invalidResponse: SyncFailure(code: .internalError, reason: reason)
        }
    }

    /// The error of one record of an answer, with the server's record on `CONFLICT`.
    init(_ error: ItemError, serverRecord: ResponseRecord? = nil) {
        self.init(code: .server(error.code), reason: error.reason, serverRecord: serverRecord.map(CloudRecord.init))
    }

    /// Reads an error dictionary (top level or per item).
    static func read(_ json: JSONValue, status: Int) -> CloudError {
        let code = json["serverErrorCode"]?.stringValue.flatMap(ServerErrorCode.init(rawValue:))
        let retryAfter = json["retryAfter"].flatMap { value -> Int? in if case .number(let text) = value { Int(text) } else { nil } }
        var serverRecord: CloudRecord?
        if let record = json["serverRecord"] { serverRecord = try? CloudRecord(wire: record) }
        return CloudError(
            code: code.map(Code.server) ?? .invalidResponse, reason: json["reason"]?.stringValue ?? "HTTP \(status)", retryAfter: retryAfter,
            serverRecord: serverRecord
        )
    }
}
