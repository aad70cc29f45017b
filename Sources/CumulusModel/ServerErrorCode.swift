/// The `serverErrorCode` values of CloudKit Web Services, each with its documented HTTP status.
///
/// This is a closed set on purpose: clients decode these codes, and some crash on codes they do not know.
public enum ServerErrorCode: String, Sendable, Hashable, CaseIterable {
    case accessDenied = "ACCESS_DENIED"
    case atomicError = "ATOMIC_ERROR"
    case authenticationFailed = "AUTHENTICATION_FAILED"
    case authenticationRequired = "AUTHENTICATION_REQUIRED"
    case badRequest = "BAD_REQUEST"
    case conflict = "CONFLICT"
    case exists = "EXISTS"
    case internalError = "INTERNAL_ERROR"
    case notFound = "NOT_FOUND"
    case quotaExceeded = "QUOTA_EXCEEDED"
    case throttled = "THROTTLED"
    case tryAgainLater = "TRY_AGAIN_LATER"
    case validatingReferenceError = "VALIDATING_REFERENCE_ERROR"
    case zoneNotFound = "ZONE_NOT_FOUND"
    /// Defined by CloudKit JS; its status is undocumented, 409 is the natural fit.
    case uniqueFieldError = "UNIQUE_FIELD_ERROR"

    /// The HTTP status CloudKit Web Services pairs with the code.
    public var httpStatus: Int {
        switch self {
        case .accessDenied: 403
        case .atomicError, .badRequest: 400
        case .authenticationFailed: 401
        case .authenticationRequired: 421
        case .conflict, .exists, .uniqueFieldError: 409
        case .internalError: 500
        case .notFound, .zoneNotFound: 404
        case .quotaExceeded: 413
        case .throttled: 429
        case .tryAgainLater: 503
        case .validatingReferenceError: 412
        }
    }
}

/// A finer code than `serverErrorCode`, for a case CloudKit's native API names and Web Services does not: sent as the
/// extension member `ckErrorCode` beside a documented `serverErrorCode`, so a client that knows only the documented
/// codes reads the answer as before.
///
/// CloudKit JS's own errors carry a `ckErrorCode` beside `serverErrorCode`; the value here is the native code's name in
/// that style (`CKError.Code.changeTokenExpired` is `CHANGE_TOKEN_EXPIRED`). A reader ignores a value it does not know.
public enum CKErrorCode: String, Sendable, Hashable, CaseIterable {
    /// The change token cannot be resumed (its zone was deleted and created again, or it was issued under another
    /// token secret): fetch again without a token. Sent with `BAD_REQUEST`.
    case changeTokenExpired = "CHANGE_TOKEN_EXPIRED"
}
