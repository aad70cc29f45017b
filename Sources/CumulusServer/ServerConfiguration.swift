public import CumulusCore
import CumulusStore
public import Foundation

/// Settings of a Cumulus server.
public struct ServerConfiguration: Sendable {
    /// Address to bind.
    public var host: String
    /// Port to bind; 0 picks a free port.
    public var port: Int
    /// The URL clients reach this server at, used in `redirectURL` and share links. Defaults to `http://` and the request's `Host`.
    public var publicBaseURL: String?
    /// Request and record limits.
    public var limits: Limits
    /// How far a server-to-server request's date may be from the server's clock.
    public var signatureDateTolerance: TimeInterval
    /// Lifetime of web auth tokens issued by sign-in.
    public var webAuthTokenLifetime: Duration

    public init(
        host: String = "127.0.0.1", port: Int = 8080, publicBaseURL: String? = nil, limits: Limits = .init(),
        signatureDateTolerance: TimeInterval = 600, webAuthTokenLifetime: Duration = .seconds(14 * 24 * 3600)
    ) {
        self.host = host
        self.port = port
        self.publicBaseURL = publicBaseURL
        self.limits = limits
        self.signatureDateTolerance = signatureDateTolerance
        self.webAuthTokenLifetime = webAuthTokenLifetime
    }
}
