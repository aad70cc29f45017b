public import CumulusStore
public import Logging

/// The services of the database routes, one per concept, each holding only the storage roles it uses, built from one
/// store: the value the edge, the console and the command line are built with.
///
/// Validation happens in each service before the store is touched, so a request that breaks a rule or a limit changes
/// nothing.
public struct DatabaseService: Sendable, WriteHealthReporting {
    /// The store's probe row, for ``probeWrite(logger:)``.
    let health: any StoreHealth
    let clock: WallClock
    /// Whether writes commit, for `/health`.
    public let writeHealth: WriteHealth
    /// How long replaced and deleted versions of records are kept for restores and undelete; zero keeps none.
    public let historyRetention: Duration
    /// A database's zones.
    public let zones: ZoneService
    /// A zone's records, read and written.
    public let records: RecordService
    /// `records/query`.
    public let queries: QueryService
    /// The change feeds.
    public let feeds: ChangeFeedService
    /// Live shares: resolving, accepting, previews, the shared database.
    public let shares: ShareService
    /// Container schemas, and the check of writes and queries against them.
    public let schemas: SchemaService
    /// A signed-in user's subscriptions.
    public let subscriptions: SubscriptionService
    /// `records/reconcile` and the digests' check.
    public let reconciliation: ReconciliationService
    /// What devices report of their verifications.
    public let verification: VerificationService
    /// `cumulus doctor`'s look at schemas, indexes and digests.
    public let doctor: DoctorService
    /// Restores, undeletes and the history's upkeep.
    public let history: HistoryService
    /// Asset receipts, their bytes' bookkeeping and cleanup.
    public let assets: AssetService
    /// A signed-in user's own export.
    public let exports: ExportService

    /// A week, CloudKit's "recently deleted" horizon for most apps' purposes and enough to notice a bad day.
    public static let defaultHistoryRetention = Duration.seconds(7 * 24 * 3600)

    public init(
        store: any RecordStore, policy: AuthorizationPolicy = .init(), limits: Limits = .init(), clock: WallClock = .system,
        changes: ChangeSignal? = nil, secrets: TokenSecrets? = nil, devices: DeviceTracker? = nil,
        historyRetention: Duration = DatabaseService.defaultHistoryRetention, writeHealth: WriteHealth = WriteHealth()
    ) {
        let secrets = secrets ?? TokenSecrets(store: store)
        let devices = devices ?? DeviceTracker(store: store)
        let access = ZoneAccess(shares: store, policy: policy)
        self.health = store
        self.clock = clock
        self.writeHealth = writeHealth
        self.historyRetention = historyRetention
        let schemas = SchemaService(store: store, limits: limits, clock: clock, writeHealth: writeHealth)
        let shares = ShareService(store: store, policy: policy, limits: limits, clock: clock, writeHealth: writeHealth, secrets: secrets)
        let history = HistoryService(
            store: store, limits: limits, clock: clock, changes: changes, writeHealth: writeHealth, historyRetention: historyRetention)
        let assets = AssetService(store: store, zones: access, limits: limits, clock: clock, writeHealth: writeHealth, history: history)
        self.schemas = schemas
        self.shares = shares
        self.history = history
        self.assets = assets
        self.zones = ZoneService(
            store: store, policy: policy, limits: limits, clock: clock, writeHealth: writeHealth, secrets: secrets, changes: changes, shares: shares)
        self.records = RecordService(
            store: store, policy: policy, limits: limits, clock: clock, writeHealth: writeHealth, changes: changes, devices: devices, zones: access,
            schemas: schemas, assets: assets, shares: shares, history: history)
        self.queries = QueryService(
            store: store, policy: policy, limits: limits, clock: clock, writeHealth: writeHealth, secrets: secrets, zones: access, schemas: schemas,
            shares: shares)
        self.feeds = ChangeFeedService(
            store: store, policy: policy, limits: limits, clock: clock, secrets: secrets, devices: devices, zones: access, shares: shares)
        self.subscriptions = SubscriptionService(
            store: store, policy: policy, limits: limits, clock: clock, changes: changes, writeHealth: writeHealth)
        self.doctor = DoctorService(store: store, schemas: schemas)
        self.exports = ExportService(store: store, clock: clock, writeHealth: writeHealth)
        self.reconciliation = ReconciliationService(store: store, zones: access, clock: clock, writeHealth: writeHealth)
        self.verification = VerificationService(store: store, policy: policy, devices: devices, clock: clock, writeHealth: writeHealth)
    }

    /// Commits a write of the store's probe row: clears ``writeHealth`` when it commits, marks it when it cannot.
    public func probeWrite(logger: Logger) async throws {
        try await mapStoreErrors(writing: true) { try await health.probeWrite(at: clock.milliseconds(), logger: logger) }
    }
}

/// Seconds a client is told to wait when the server's storage is full.
let storageFullRetryAfter = 30

/// Runs a store call, translating its ``StoreError``s into the domain's ``CumulusError``s.
///
/// - Parameter writing: The call writes. The store may have committed before it became unavailable (the connection
///   lost as the commit's answer came back), so the answer says that the outcome is unknown and that sending the write
///   again is safe, which change tags make it.
func mapStoreErrors<T>(writing: Bool = false, _ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as StoreError {
        switch error.code {
        case .zoneNotFound: throw CumulusError(.zoneNotFound, error.message)
        case .notFound: throw CumulusError(.notFound, error.message)
        case .duplicate: throw CumulusError(.exists, error.message)
        case .invalidValue: throw CumulusError(.badRequest, error.message)
        case .unavailable where writing:
            throw CumulusError(
                .unavailable,
                "the store did not answer; whether this write was applied is unknown: send it again (change tags make that safe)",
                retryAfter: 1, underlying: error)
        case .unavailable: throw CumulusError(.unavailable, "the store is busy; retry", retryAfter: 1, underlying: error)
        case .storageFull:
            // Nothing was written, and space comes back only when an operator acts: clients wait longer between tries.
            throw CumulusError(
                .unavailable, "the server's storage is full: nothing of this request was written; retry later",
                retryAfter: storageFullRetryAfter, underlying: error)
        case .cannotWrite:
            throw CumulusError(
                .unavailable, "the server's storage cannot be written: nothing of this request was written; retry later",
                retryAfter: storageFullRetryAfter, underlying: error)
        default: throw CumulusError(.internalError, "internal error", underlying: error)
        }
    }
}
