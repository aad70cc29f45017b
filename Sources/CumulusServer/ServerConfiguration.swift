public import CumulusCore
public import CumulusServerHTTP
public import CumulusStore
public import Foundation
public import Tracing

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
    /// Limits of the share-a-copy links.
    public var linkLimits: LinkLimits
    /// How often expired link snapshots are deleted.
    public var linkCleanupInterval: Duration
    /// The apple-app-site-association JSON served at `/.well-known/`, so the app opens share links.
    public var appleAppSiteAssociation: String?
    /// The App Store ID for the smart banner on link pages.
    public var appStoreID: String?
    /// How long the rest of a refused request body (over a size limit, or malformed) is read and discarded before the
    /// connection closes, so a client that sends its whole body before reading still reads the `413`.
    public var refusedBodyLinger: Duration
    /// Whether a client's address is the last entry of `X-Forwarded-For` (set it when every request comes through a
    /// load balancer that appends it, such as nginx's `$proxy_add_x_forwarded_for`), instead of the connection's peer.
    /// Per-address limits (link uploads) then count each client, not the load balancer. Never set it when clients can
    /// reach the server directly: they could claim any address.
    public var trustsForwardedFor: Bool
    /// How often an open push connection looks at the feeds again whatever it was told: a safety net for a missed
    /// wake-up (commits on this instance wake the connections they concern at once, and over PostgreSQL those of other
    /// instances too; a listener that reconnects wakes them all). Used over a store several instances share
    /// (PostgreSQL) only: on its own store, an instance hears of every commit.
    public var pushRecheckInterval: Duration
    /// How often an idle push stream sends a comment line, so that proxies and clients see it alive.
    public var pushHeartbeatInterval: Duration
    /// Push connections per instance and tokens per user.
    public var pushLimits: PushLimits
    /// Whether a server-to-server request whose body is over 1 MiB may be signed with an empty body hash, as MistKit
    /// does. **Unsafe**: such a signature does not cover the body, so whoever captures one request can send any other
    /// large body to the same path with it until the date leaves the window. Off by default; turn it on only for such
    /// clients, over TLS.
    public var acceptsUnhashedLargeServerToServerBodies = false
    /// Throttles of sign-in and sign-up.
    public var signInLimits = SignInLimits()
    /// Connections held at once, in total and per address, and their timeouts.
    public var connectionLimits = ConnectionLimits()
    /// Rate and concurrency limits of the database API per caller.
    public var requestLimits = RequestLimits()
    /// How long a verified API token or web auth token is trusted without a store read. Revoking a token or signing
    /// out through this instance takes effect at once; through another instance, or `cumulus tokens revoke`, within
    /// this time.
    public var credentialCacheLifetime: Duration = .seconds(5)
    /// Where `/metrics` is served: `nil` on the main port; a port number serves it there instead (on ``host``), so a
    /// firewall can keep it from the clients. 0 picks a free port.
    public var metricsPort: Int?
    /// The tracer each request gets a span from (`cumulus serve` built with the `OpenTelemetry` trait gives swift-otel's);
    /// `nil`, the request path pays nothing for tracing.
    public var requestTracer: (any Tracer)?
    /// How long replaced and deleted versions of records are kept, for zone restores and undelete (`cumulus serve
    /// --history-retention`); zero keeps none. Asset files a kept version names are kept as long.
    public var historyRetention: Duration = DatabaseService.defaultHistoryRetention
    /// How often versions older than ``historyRetention`` are pruned.
    public var historyPruneInterval: Duration = .seconds(600)
    /// How often, while writes fail, the server tries a write of its own to learn they work again (`/health`).
    public var writeProbeInterval: Duration = .seconds(5)
    /// Asset sizes, URL lifetimes and cleanup.
    public var assetLimits = AssetLimits()
    /// Where asset bytes live; `nil` keeps them in a temporary directory of this process (tests). `cumulus serve`
    /// gives the data directory's `assets/`.
    public var assetStorage: (any AssetStorage)?

    public init(
        host: String = "127.0.0.1", port: Int = 8080, publicBaseURL: String? = nil, limits: Limits = .init(),
        signatureDateTolerance: TimeInterval = 600, webAuthTokenLifetime: Duration = .seconds(14 * 24 * 3600), linkLimits: LinkLimits = .init(),
        linkCleanupInterval: Duration = .seconds(3600), appleAppSiteAssociation: String? = nil, appStoreID: String? = nil,
        refusedBodyLinger: Duration = .seconds(10), trustsForwardedFor: Bool = false, pushRecheckInterval: Duration = .seconds(60),
        pushHeartbeatInterval: Duration = .seconds(15), pushLimits: PushLimits = .init()
    ) {
        self.host = host
        self.port = port
        self.publicBaseURL = publicBaseURL
        self.limits = limits
        self.signatureDateTolerance = signatureDateTolerance
        self.webAuthTokenLifetime = webAuthTokenLifetime
        self.linkLimits = linkLimits
        self.linkCleanupInterval = linkCleanupInterval
        self.appleAppSiteAssociation = appleAppSiteAssociation
        self.appStoreID = appStoreID
        self.refusedBodyLinger = refusedBodyLinger
        self.trustsForwardedFor = trustsForwardedFor
        self.pushRecheckInterval = pushRecheckInterval
        self.pushHeartbeatInterval = pushHeartbeatInterval
        self.pushLimits = pushLimits
    }
}

/// Limits and lifetimes of assets.
public struct AssetLimits: Sendable {
    /// The largest asset accepted, in bytes; larger uploads are answered `413 QUOTA_EXCEEDED` and their connection closed.
    public var maximumSize: Int64
    /// How long an upload URL `assets/upload` answers works.
    public var uploadURLLifetime: Duration
    /// How long a `downloadURL` in a fetched record works, without credentials.
    public var downloadURLLifetime: Duration
    /// Receipts never saved in a record are forgotten, and their files deleted, after this long.
    public var unattachedLifetime: Duration
    /// A file no record holds any more is deleted once its receipt is this old (so a record saved again with it in
    /// the meantime keeps it).
    public var detachedGrace: Duration
    /// How often the cleanup runs.
    public var cleanupInterval: Duration
    /// Receipts one uploader may hold that no record holds yet (made within a day).
    public var maximumPendingUploads: Int = 1_000
    /// Bytes one uploader may have uploaded that no record holds yet (within a day): with the size limit, what one
    /// holder of the app's token can make the disk keep before anything is saved.
    public var maximumPendingBytes: Int64 = 5 * 1024 * 1024 * 1024
    /// Bytes of assets one uploader may keep in a container, saved or not (each file counted once): a user's asset
    /// quota, as CloudKit gives each user one. Past it, uploads are refused until records holding assets are deleted
    /// (their files go with the cleanup).
    public var maximumStoredBytes: Int64 = 20 * 1024 * 1024 * 1024

    public init(
        maximumSize: Int64 = 250 * 1024 * 1024, uploadURLLifetime: Duration = .seconds(15 * 60), downloadURLLifetime: Duration = .seconds(3600),
        unattachedLifetime: Duration = .seconds(24 * 3600), detachedGrace: Duration = .seconds(3600), cleanupInterval: Duration = .seconds(600)
    ) {
        self.maximumSize = maximumSize
        self.uploadURLLifetime = uploadURLLifetime
        self.downloadURLLifetime = downloadURLLifetime
        self.unattachedLifetime = unattachedLifetime
        self.detachedGrace = detachedGrace
        self.cleanupInterval = cleanupInterval
    }
}
