public import CumulusCore
import CumulusStore
public import Hummingbird

/// The request context of Cumulus routes: Hummingbird's core context plus the authenticated caller.
public struct CumulusRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Set by ``AuthenticationMiddleware`` on `/database` routes.
    public var caller: Caller?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.caller = nil
    }

    /// The authenticated caller; routes behind ``AuthenticationMiddleware`` always have one.
    public func requireCaller() throws(CumulusError) -> Caller {
        guard let caller else { throw CumulusError(.internalError, "request was not authenticated") }
        return caller
    }
}
