public import CumulusCore
import CumulusModel
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

    /// The authenticated caller; routes behind ``AuthenticationMiddleware`` always have one.
    public func requireCaller() throws(CumulusError) -> Caller {
        guard let caller else { throw CumulusError(.internalError, "request was not authenticated") }
        return caller
    }

    /// The database the path names (`…/{database}/…`).
    func databaseScope() throws(CumulusError) -> DatabaseScope {
        guard let name = parameters.get("database"), let scope = DatabaseScope(rawValue: name) else {
            throw CumulusError(.badRequest, "path: database must be public, private or shared")
        }
        return scope
    }
}
