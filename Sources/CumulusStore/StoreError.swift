/// An error from a ``RecordStore``.
///
/// Each store translates its database's errors into these codes, so nothing above the storage layer sees a GRDB or
/// PostgreSQL error type.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, as a stable code.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: Sendable, Hashable {
            case notFound
            case duplicate
            case zoneNotFound
            case invalidState
            case unavailable
            case storageFull
            case cannotWrite
            case corrupt
            case unexpected
            case misconfigured
            case invalidValue
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The thing asked for does not exist.
        public static var notFound: Self { .init(.notFound) }
        /// A unique thing already exists.
        public static var duplicate: Self { .init(.duplicate) }
        /// The zone does not exist (or was deleted).
        public static var zoneNotFound: Self { .init(.zoneNotFound) }
        /// The request conflicts with the stored state.
        public static var invalidState: Self { .init(.invalidState) }
        /// The store is busy or unreachable; the caller may retry.
        public static var unavailable: Self { .init(.unavailable) }
        /// The database's disk is full: nothing of the failed call was written, and writes succeed again once the operator
        /// frees space. Reads still work.
        public static var storageFull: Self { .init(.storageFull) }
        /// The store can be read and not written (a file the process may not write, a read-only disk or database, a
        /// write the disk refused): nothing of the failed call was written, and writes succeed again once the operator
        /// fixes it.
        public static var cannotWrite: Self { .init(.cannotWrite) }
        /// The store cannot be used as configured: a malformed URL, refused credentials, a schema newer than this
        /// program. Retrying does not help; the reason says what to change.
        public static var misconfigured: Self { .init(.misconfigured) }
        /// A value the request gave cannot be stored as it is (a text holding U+0000, which PostgreSQL cannot hold):
        /// the request is at fault, and nothing was written.
        public static var invalidValue: Self { .init(.invalidValue) }
        /// Stored data could not be read.
        public static var corrupt: Self { .init(.corrupt) }
        /// The database refused a statement for a reason a retry cannot fix (a bug, or a limit that should have been
        /// checked before): never reported as retryable.
        public static var unexpected: Self { .init(.unexpected) }

        public var description: String { String(describing: base) }
    }

    /// The error's code.
    public var code: Code
    /// A message for logs and, where safe, for clients.
    public var message: String
    /// The database error behind it, for logs only.
    public var underlying: (any Error)?

    /// Creates an error.
    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String {
        if let underlying { return "\(code): \(message) (\(underlying))" }
        return "\(code): \(message)"
    }
}
