/// A domain error, mapped to CloudKit's `serverErrorCode` at the HTTP edge.
public struct CumulusError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: Sendable, Hashable {
            case badRequest, authenticationRequired, authenticationFailed, accessDenied, notFound, zoneNotFound
            case exists, conflict, quotaExceeded, throttled, unavailable, internalError, changeTokenExpired
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The request is malformed or breaks a rule; the reason names the field.
        public static var badRequest: Self { .init(.badRequest) }
        /// The operation needs a signed-in user and none was identified.
        public static var authenticationRequired: Self { .init(.authenticationRequired) }
        /// A token, key or signature was rejected.
        public static var authenticationFailed: Self { .init(.authenticationFailed) }
        /// The caller may not do this.
        public static var accessDenied: Self { .init(.accessDenied) }
        /// The thing asked for does not exist (or the caller may not know that it does).
        public static var notFound: Self { .init(.notFound) }
        /// The zone does not exist.
        public static var zoneNotFound: Self { .init(.zoneNotFound) }
        /// The thing to create exists.
        public static var exists: Self { .init(.exists) }
        /// The state changed under the caller.
        public static var conflict: Self { .init(.conflict) }
        /// A size limit was exceeded.
        public static var quotaExceeded: Self { .init(.quotaExceeded) }
        /// Too many requests; retry later.
        public static var throttled: Self { .init(.throttled) }
        /// A transient failure; retry later.
        public static var unavailable: Self { .init(.unavailable) }
        /// A bug or an unexpected failure.
        public static var internalError: Self { .init(.internalError) }
        /// A change token cannot be resumed: the client fetches again without one. `BAD_REQUEST` on the wire, with
        /// the extension `ckErrorCode` `CHANGE_TOKEN_EXPIRED`.
        public static var changeTokenExpired: Self { .init(.changeTokenExpired) }

        public var description: String { String(describing: base) }
    }

    public var code: Code
    /// A reason safe to show to the client.
    public var reason: String
    /// Seconds after which a retry may succeed.
    public var retryAfter: Int?
    /// The error behind it, for logs only.
    public var underlying: (any Error)?

    public init(_ code: Code, _ reason: String, retryAfter: Int? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.reason = reason
        self.retryAfter = retryAfter
        self.underlying = underlying
    }

    public var description: String { "\(code): \(reason)" }
}
