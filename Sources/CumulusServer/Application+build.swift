public import CumulusCore
import CumulusServerHTTP
public import CumulusStore
import Foundation
import HTTPTypes
public import Hummingbird
public import Logging
import NIOCore
public import ServiceLifecycle

/// Builds the Cumulus HTTP application. The `cumulus serve` command and the tests both call this.
///
/// ```swift
/// let store = try SQLiteRecordStore(path: "cumulus-data/cumulus.sqlite")
/// let app = buildApplication(configuration: .init(port: 8080), store: store, logger: logger)
/// try await app.runService()
/// ```
///
/// - Parameters:
///   - configuration: Address, limits and URLs.
///   - store: The record store.
///   - logger: The application logger.
///   - clock: The wall clock (tests inject their own).
///   - metrics: What the server counts, rendered at `/metrics`.
///   - eventLoopGroup: The event loops that serve connections and run requests' tasks: NIO's shared group by default;
///     tests give each server loops of its own, so that one test's load does not hold up another's connections.
///   - onServerRunning: Called with the URL the server listens on, once it accepts connections.
///   - onMetricsServerRunning: Called with the URL of the metrics port, when ``ServerConfiguration/metricsPort`` is set.
///   - storeServices: What the store needs running (PostgreSQL's connection pools): started before the server's own
///     work, which reads the store at once, and stopped after it.
public func buildApplication(
    configuration: ServerConfiguration, store: any RecordStore, storeServices: [any Service] = [], logger: Logger, clock: WallClock = .system,
    metrics: ServerMetrics = ServerMetrics(), eventLoopGroup: EventLoopGroupProvider = .singleton,
    onServerRunning: @escaping @Sendable (String) async -> Void = { _ in },
    onMetricsServerRunning: @escaping @Sendable (String) async -> Void = { _ in }
) -> Application<RouterResponder<CumulusRequestContext>> {
    let changes = changeSignal(for: store)
    metrics.observe(changes)
    let assetStorage = configuration.assetStorage ?? temporaryAssetStorage()
    var routed = configuration
    routed.assetStorage = assetStorage
    // One token secret for the records' tokens and the push tokens: read once at start.
    let secrets = TokenSecrets(store: store)
    let push = pushService(configuration: configuration, store: store, clock: clock, changes: changes, secrets: secrets)
    let writeHealth = WriteHealth()
    let router = buildRouter(
        configuration: routed, store: store, clock: clock, changes: changes, metrics: metrics, push: push, secrets: secrets,
        writeHealth: writeHealth)
    let serverName = "Cumulus"
    let courier = Courier(
        push: push, heartbeat: configuration.pushHeartbeatInterval, metrics: metrics, logger: logger, serverName: serverName,
        refusalDelay: configuration.requestLimits.refusalDelay)
    let host = configuration.host
    let linger = TimeAmount(configuration.refusedBodyLinger)
    let connections = ConnectionCounts(
        limits: configuration.connectionLimits, countsAddresses: !configuration.trustsForwardedFor, metrics: metrics)
    // Nothing else removes expired share-a-copy snapshots, receipts and files no record holds, or history past its window.
    let links = LinkService(store: store, clock: clock, limits: configuration.linkLimits)
    let upkeep = DatabaseService(store: store, clock: clock, historyRetention: configuration.historyRetention, writeHealth: writeHealth)
    let assets = AssetCleanup(database: upkeep, storage: assetStorage, clock: clock, limits: configuration.assetLimits)
    var services: [any Service] =
        storeServices + [
            PushPreparation(push: push, logger: logger),
            UpkeepService(name: "link cleanup", interval: configuration.linkCleanupInterval, logger: logger) {
                (try await links.deleteExpired(logger: $0), "expired link snapshots")
            },
            UpkeepService(name: "asset cleanup", interval: configuration.assetLimits.cleanupInterval, logger: logger) {
                (try await assets.run(logger: $0), "asset files no record holds")
            },
            UpkeepService(name: "history pruning", interval: configuration.historyPruneInterval, logger: logger) {
                (try await upkeep.history.prune(logger: $0), "record versions past the history's window")
            },
            // While writes fail, a probe's commit is what tells /health they work again, requests or not.
            UpkeepService(name: "write probe", interval: configuration.writeProbeInterval, logger: logger) { logger in
                guard writeHealth.failure != nil else { return (0, "") }
                try await upkeep.probeWrite(logger: logger)
                logger.notice("the store writes again")
                return (0, "")
            },
        ]
    if let broadcaster = store as? any ChangeBroadcasting { services.append(ChangeListener(store: broadcaster, changes: changes)) }
    // A store whose instances do not hear each other (SQLite) still hears commands (a restore from the command line).
    if let announcing = store as? any CommandAnnouncing, !(store is any ChangeBroadcasting) {
        services.append(CommandListener(store: announcing, changes: changes))
    }
    if let maintained = store as? any BackgroundMaintenance { services.append(StoreMaintenance(store: maintained, logger: logger)) }
    if let metricsPort = configuration.metricsPort {
        services.append(metricsApplication(metrics: metrics, host: host, port: metricsPort, logger: logger, onServerRunning: onMetricsServerRunning))
    }
    let responder = router.buildResponder()
    return Application(
        responder: responder,
        server: .http1Connections(responder: responder, serverName: serverName, logger: logger) {
            // ConnectionGuardHandler keeps the idle timeout: it sees the courier's answers.
            [ConnectionGuardHandler(counts: connections), LingeringCloseHandler(linger: linger), CourierChannelHandler(courier: courier)]
        },
        configuration: .init(address: .hostname(host, port: configuration.port), serverName: serverName),
        services: services,
        onServerRunning: { channel in
            let port = channel.localAddress?.port ?? configuration.port
            let urlHost = host.contains(":") ? "[\(host)]" : host
            await onServerRunning("http://\(urlHost):\(port)")
        },
        eventLoopGroupProvider: eventLoopGroup,
        logger: logger
    )
}

/// Builds the router: the CloudKit Web Services routes, the sign-in routes, and error mapping.
public func buildRouter(
    configuration: ServerConfiguration, store: any RecordStore, clock: WallClock = .system, changes: ChangeSignal? = nil,
    metrics: ServerMetrics = ServerMetrics(), push: PushService? = nil, secrets: TokenSecrets? = nil, writeHealth: WriteHealth = WriteHealth()
) -> Router<CumulusRequestContext> {
    let changes = changes ?? changeSignal(for: store)
    let limits = configuration.limits
    let accounts = AccountService(
        store: store, signInLimits: configuration.signInLimits, webAuthTokenLifetime: configuration.webAuthTokenLifetime,
        credentialCacheLifetime: configuration.credentialCacheLifetime, clock: clock)
    let devices = DeviceTracker(
        store: store, observeBehind: { metrics.deviceFetched(behind: $0) }, observeVerification: { metrics.deviceVerified(inSync: $0) })
    metrics.observeDevices { devices.devicesSeen(since: clock.milliseconds() - 3_600_000) }
    let database = DatabaseService(
        store: store, limits: limits, clock: clock, changes: changes, secrets: secrets, devices: devices,
        historyRetention: configuration.historyRetention, writeHealth: writeHealth)
    let push = push ?? pushService(configuration: configuration, store: store, clock: clock, changes: changes, secrets: secrets)

    let address = PublicAddress(configured: configuration.publicBaseURL)
    let router = Router(context: CumulusRequestContext.self)
    if let tracer = configuration.requestTracer { router.add(middleware: RequestSpanMiddleware(tracer: tracer)) }
    router.add(middleware: AccessLogMiddleware(metrics: metrics))
    router.add(middleware: CloudKitErrorMiddleware(address: address))
    if configuration.trustsForwardedFor { router.add(middleware: ClientAddressMiddleware()) }
    let landing = LandingPage.Probe(accounts: accounts, clock: clock)
    router.get("/") { _, context in
        Response.html(LandingPage.html(metricsPort: configuration.metricsPort, state: await landing.state(logger: context.logger)), status: .ok)
    }
    // `X-Cumulus-Public-URL`: the base of the links this server hands out for the request, so `cumulus doctor --url`
    // can tell when a proxy in front hides the public scheme or host.
    // 503 while writes fail (`WriteHealth`): reads may still work, but an instance that cannot keep what devices send
    // is not healthy.
    router.get("health") { request, _ in
        let failure = writeHealth.failure
        return Response(
            status: failure == nil ? .ok : .serviceUnavailable,
            headers: [.contentType: "text/plain; charset=utf-8", HTTPField.Name("X-Cumulus-Public-URL")!: address.base(for: request)],
            body: .init(
                byteBuffer: ByteBuffer(
                    string: failure.map {
                        // A stranger may ask: the reason, which may name files, is in the log, not here.
                        "writes fail since \(Date(timeIntervalSince1970: Double($0.since) / 1000).formatted(.iso8601)); the server's log says why"
                    } ?? "ok")))
    }
    router.get("openapi.json") { _, _ in
        Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: OpenAPIDocument.json)))
    }
    if configuration.metricsPort == nil { router.get("metrics") { _, _ in metricsResponse(metrics) } }

    let authentication = AuthenticationMiddleware(
        accounts: accounts, limits: limits, clock: clock, signatureDateTolerance: configuration.signatureDateTolerance,
        acceptsUnhashedLargeServerToServerBodies: configuration.acceptsUnhashedLargeServerToServerBodies)
    let throttle = RequestThrottleMiddleware(throttle: RequestThrottle(limits: configuration.requestLimits), metrics: metrics)
    // Each authenticated group turns the request's context into one whose caller (and database) is known by type.
    let databaseGroup = router.group("database/1/:container/:environment/:database").add(middleware: throttle).add(middleware: authentication)
        .group(context: DatabaseContext.self)
    let assetURLs = AssetURLs(database: database, clock: clock, address: address, limits: configuration.assetLimits)
    DatabaseRoutes(
        database: database, accounts: accounts, limits: limits, address: address, metrics: metrics, assetURLs: assetURLs, clock: clock
    )
    .register(on: databaseGroup)
    let assets = AssetRoutes(
        database: database, storage: configuration.assetStorage ?? temporaryAssetStorage(), links: assetURLs, limits: limits)
    assets.registerOperations(on: databaseGroup)
    assets.registerTransfers(on: router)
    let pushRoutes = PushRoutes(push: push, limits: limits, address: address, heartbeat: configuration.pushHeartbeatInterval, metrics: metrics)
    pushRoutes.registerTokens(on: databaseGroup)
    // CloudKit JS's path, and the reference's (no database segment: the trie matches `tokens` before `:database`).
    for prefix in ["device/1/:container/:environment", "database/1/:container/:environment"] {
        pushRoutes.registerTokens(
            on: router.group(RouterPath(prefix)).add(middleware: throttle).add(middleware: authentication).group(context: AuthenticatedContext.self))
    }
    pushRoutes.registerCourier(on: router)
    SchemaRoutes(database: database, limits: limits)
        .register(
            on: router.group("schema/1/:container/:environment").add(middleware: throttle).add(middleware: authentication)
                .group(context: AuthenticatedContext.self))
    ShareRoutes(database: database, accounts: accounts, address: address, appStoreID: configuration.appStoreID)
        .register(on: router)
    AuthRoutes(accounts: accounts, limits: limits, metrics: metrics, refusalDelay: configuration.requestLimits.refusalDelay).register(
        on: router.group("auth/1/:container/:environment"))
    ConsoleRoutes(
        accounts: accounts, database: database, console: ConsoleService(store: store, clock: clock), recent: metrics.recent,
        secureCookies: configuration.publicBaseURL?.lowercased().hasPrefix("https:") == true
    ).register(on: router)
    LinkRoutes(
        links: LinkService(store: store, clock: clock, limits: configuration.linkLimits), accounts: accounts,
        address: address,
        appStoreID: configuration.appStoreID, appleAppSiteAssociation: configuration.appleAppSiteAssociation, metrics: metrics
    ).register(on: router)
    return router
}

/// `/metrics` alone, on a port of its own.
func metricsApplication(
    metrics: ServerMetrics, host: String, port: Int, logger: Logger, onServerRunning: @escaping @Sendable (String) async -> Void
) -> some Service {
    let router = Router()
    router.get("metrics") { _, _ in metricsResponse(metrics) }
    return Application(
        router: router, configuration: .init(address: .hostname(host, port: port), serverName: "Cumulus"),
        onServerRunning: { channel in
            let urlHost = host.contains(":") ? "[\(host)]" : host
            await onServerRunning("http://\(urlHost):\(channel.localAddress?.port ?? port)")
        },
        logger: logger)
}

func metricsResponse(_ metrics: ServerMetrics) -> Response {
    Response(
        status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
        body: .init(byteBuffer: ByteBuffer(bytes: metrics.exposition())))
}

/// Push delivery: one per application, shared by the router's courier route and the courier channel handlers.
func pushService(
    configuration: ServerConfiguration, store: any RecordStore, clock: WallClock, changes: ChangeSignal, secrets: TokenSecrets? = nil
) -> PushService {
    PushService(
        store: store, signal: changes, clock: clock, limits: configuration.pushLimits,
        // One instance on its own store hears of every commit; over a shared store a wake-up can be missed.
        recheckInterval: store is any ChangeBroadcasting ? configuration.pushRecheckInterval : nil, secrets: secrets)
}

/// The signal that wakes waiting push polls; over a store shared by instances it also tells the others.
func changeSignal(for store: any RecordStore) -> ChangeSignal {
    guard let broadcaster = store as? any ChangeBroadcasting else { return ChangeSignal() }
    return ChangeSignal(announce: { broadcaster.announceChange($0) })
}

/// Wakes this instance's push connections under the keys commands announce (``CommandAnnouncing``).
struct CommandListener: Service {
    let store: any CommandAnnouncing
    let changes: ChangeSignal

    func run() async throws {
        await cancelWhenGracefulShutdown { await store.listenForCommands { changes.wake($0) } }
        try? await gracefulShutdown()
    }
}

/// The store's own background work (SQLite's checkpoints) for the life of the server.
struct StoreMaintenance: Service {
    let store: any BackgroundMaintenance
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown { await store.maintainInBackground(logger: logger) }
        // A store with nothing to do (in memory) returns at once; a service that ends would end the server.
        try? await gracefulShutdown()
    }
}

/// Reads the token secret ahead of the first courier poll, once the store's services run.
struct PushPreparation: Service {
    let push: PushService
    let logger: Logger

    func run() async throws {
        await push.prepare(logger: logger)
        // A service that ends would end the server.
        try? await gracefulShutdown()
    }
}

/// Wakes this instance's waiting push polls when another instance commits.
struct ChangeListener: Service {
    let store: any ChangeBroadcasting
    let changes: ChangeSignal

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await store.listenForChanges(watching: { changes.watchedKeys }) { keys in
                if let keys { changes.wake(keys) } else { changes.wakeAll() }
            }
        }
    }
}

/// Asset files of a server given no storage (tests): a directory of its own under the temporary directory.
func temporaryAssetStorage() -> any AssetStorage {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-assets-\(UUID().uuidString)")
    // Creating a directory in the temporary directory fails only on a broken machine.
    return try! FileAssetStorage(directory: directory)
}
