public import CumulusCore
public import CumulusModel
import CumulusStore
public import Hummingbird

/// The request context of Cumulus routes: Hummingbird's core context plus the authenticated caller.
public struct CumulusRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Set by ``AuthenticationMiddleware`` on `/database` routes.
    public var caller: Caller?
    /// The client's IP address, for per-address limits.
    public var remoteAddress: String

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.caller = nil
        self.remoteAddress = source.channel.remoteAddress?.ipAddress ?? "unknown"
    }

}

/// A request context whose caller is known by its type. Routes behind ``AuthenticationMiddleware`` take one, so a
/// handler cannot forget to ask who calls, and none asks twice.
public protocol AuthenticatedRequestContext: RequestContext {
    /// Who is calling, as ``AuthenticationMiddleware`` identified them.
    var caller: Caller { get }
}

extension CumulusRequestContext {
    /// The caller, or the failure of a route group wired without ``AuthenticationMiddleware`` (a bug, not a request's
    /// fault).
    fileprivate func authenticatedCaller() throws(CumulusError) -> Caller {
        guard let caller else { throw CumulusError(.internalError, "request was not authenticated") }
        return caller
    }
}

/// The context of the routes behind ``AuthenticationMiddleware`` that name no database (push tokens, the schema):
/// made from ``CumulusRequestContext`` once, after authentication (Hummingbird's `ChildRequestContext`).
public struct AuthenticatedContext: ChildRequestContext, AuthenticatedRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let caller: Caller

    public init(context: CumulusRequestContext) throws {
        self.caller = try context.authenticatedCaller()
        self.coreContext = context.coreContext
    }
}

/// The context of `/database/1/{container}/{environment}/{database}/…`: the caller and the database the path names,
/// each resolved once. A path naming no database CloudKit has is refused here, before any handler runs.
public struct DatabaseContext: ChildRequestContext, AuthenticatedRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let caller: Caller
    /// The database the path names.
    public let scope: DatabaseScope

    public init(context: CumulusRequestContext) throws {
        self.caller = try context.authenticatedCaller()
        guard let name = context.parameters.get("database"), let scope = DatabaseScope(rawValue: name) else {
            throw CumulusError(.badRequest, "path: database must be public, private or shared")
        }
        self.scope = scope
        self.coreContext = context.coreContext
    }
}
