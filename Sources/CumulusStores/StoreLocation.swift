public import CumulusStore
public import CumulusStorePostgres
import CumulusStoreSQLite
import Foundation
public import Logging
import PostgresNIO
public import ServiceLifecycle

/// Where a store lives: an SQLite data directory, or a PostgreSQL database (the directory of a sharded store when it
/// names shards).
///
/// This is the one place a store is made from settings: `cumulus serve`, the administration commands, the benchmarks
/// and the tests open their stores here, so a store is migrated, checked and pooled the same way everywhere.
///
/// ```swift
/// let opened = try await StoreLocation.sqlite(directory: "cumulus-data").open(logger: logger)
/// try await opened.run { store in try await store.createContainer("iCloud.com.example", createdAt: 0, logger: logger) }
/// ```
public enum StoreLocation: Sendable, Hashable {
    case sqlite(directory: String)
    /// With `shards`, the location is the directory of a sharded store.
    case postgres(PostgresLocation, connections: Int, shards: [PostgresLocation] = [])
}

/// How a store is opened, beyond where.
public struct StoreSettings: Sendable {
    /// PostgreSQL streaming replicas that serve reads while they keep up.
    public var replicas: [PostgresLocation] = []
    /// How other instances learn of changes (PostgreSQL).
    public var fanOut: ChangeFanOut = .notify
    /// Connections of each pool kept open while idle: a server's; a command's open on demand.
    public var keepingOpen = 0
    /// How long an idle connection above ``keepingOpen`` stays open; `nil` keeps postgres-nio's default.
    public var idleTimeout: Duration?
    /// How many field indexes development queries may make; `nil` keeps the store's default.
    public var maximumFieldIndexes: Int?
    /// How long an operation waits for a PostgreSQL connection; `nil` keeps the store's default (5 s).
    public var connectionWait: Duration?
    /// Whether PostgreSQL's location is checked with one connection first, so that a bad URL, wrong credentials or an
    /// unreachable server is one clear error at once.
    public var checksFirst = true
    /// Whether PostgreSQL's schema is migrated before the pool opens (once, however many instances start together).
    public var migrates = true

    public init() {}
}

/// A store opened at a ``StoreLocation``, and what must run while it is used: PostgreSQL's connection pools.
public struct OpenedStore: Sendable {
    public var store: any RecordStore
    /// Services to run for as long as ``store`` is used (a server adds them to its service group).
    public var services: [any Service]

    public init(store: any RecordStore, services: [any Service]) {
        self.store = store
        self.services = services
    }

    /// Runs the services until the task is cancelled: for a store that lives as long as the process (a test's, a
    /// benchmark's), started in a task of its own.
    public func runServices() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            for service in services { group.addTask { try await service.run() } }
        }
    }

    /// Runs `body` with the store while its services run, and stops them after.
    public func run<T: Sendable>(_ body: (any RecordStore) async throws -> T) async throws -> T {
        guard !services.isEmpty else { return try await body(store) }
        return try await withThrowingTaskGroup(of: Void.self) { group in
            for service in services { group.addTask { try await service.run() } }
            defer { group.cancelAll() }
            return try await body(store)
        }
    }
}

extension StoreLocation {
    /// Opens the store. SQLite: the file `cumulus.sqlite` in the data directory, both made if needed. PostgreSQL: checked
    /// with one connection (``StoreSettings/checksFirst``), migrated (``StoreSettings/migrates``), and its pool returned
    /// as a service to run; with replicas, those too.
    public func open(_ settings: StoreSettings = StoreSettings(), logger: Logger) async throws -> OpenedStore {
        switch self {
        case .sqlite(let directory):
            guard settings.replicas.isEmpty else { throw StoreError(.invalidValue, "read replicas need a PostgreSQL database") }
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            var configuration = SQLiteRecordStore.Configuration()
            if let maximum = settings.maximumFieldIndexes { configuration.maximumFieldIndexes = maximum }
            return OpenedStore(
                store: try SQLiteRecordStore(path: (directory as NSString).appendingPathComponent("cumulus.sqlite"), configuration: configuration),
                services: [])
        case .postgres(let location, let connections, let shards) where !shards.isEmpty:
            guard settings.replicas.isEmpty else { throw StoreError(.invalidValue, "read replicas and shards do not go together yet") }
            guard case .notify = settings.fanOut else { throw StoreError(.invalidValue, "the watch fan-out and shards do not go together yet") }
            return try await Self.openSharded(directory: location, shards: shards, connections: connections, settings: settings, logger: logger)
        case .postgres(let location, let connections, _):
            if settings.checksFirst { try await location.check(logger: logger) }
            if settings.migrates {
                let migrator = PostgresClient(configuration: location.clientConfiguration(maximumConnections: 1))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await migrator.run() }
                    defer { group.cancelAll() }
                    try await PostgresMigrations.migrate(migrator, logger: logger)
                }
            }
            let client = Self.client(location, connections: connections, settings: settings, logger: logger)
            guard !settings.replicas.isEmpty else {
                return OpenedStore(store: Self.store(client, connections: connections, settings: settings), services: [client])
            }
            for replica in settings.replicas {
                // A replica that is down only starts out of service (the primary serves its reads); one that is named
                // wrongly is an error now, as the primary's would be.
                do throws(StoreError) {
                    try await replica.check(logger: logger)
                } catch {
                    guard error.code == .unavailable else { throw error }
                    logger.warning("read replica unreachable; it serves reads once it answers", metadata: ["cumulus.replica": "\(replica.redacted)"])
                }
            }
            let readReplicas = PostgresReadReplicas(
                primary: client,
                replicas: settings.replicas.map { (Self.client($0, connections: connections, settings: settings, logger: logger), $0.redacted) },
                logger: logger)
            return OpenedStore(
                store: Self.store(client, connections: connections, settings: settings, replicas: readReplicas), services: [client, readReplicas])
        }
    }

    /// A store sharded over `directory` and `shards`: each checked with one connection, migrated, numbered and mapped
    /// (``ShardLayout/prepare(directory:others:logicalShards:logger:)``) before the pools open.
    static func openSharded(
        directory: PostgresLocation, shards: [PostgresLocation], connections: Int, settings: StoreSettings, logger: Logger
    ) async throws -> OpenedStore {
        let locations = [directory] + shards
        if settings.checksFirst {
            for location in locations { try await location.check(logger: logger) }
        }
        let preparers = locations.map { PostgresClient(configuration: $0.clientConfiguration(maximumConnections: 1)) }
        let layout = try await withThrowingTaskGroup(of: Void.self) { group in
            for preparer in preparers { group.addTask { await preparer.run() } }
            defer { group.cancelAll() }
            return try await ShardLayout.prepare(directory: preparers[0], others: Array(preparers.dropFirst()), logger: logger)
        }
        let clients = locations.map { client($0, connections: connections, settings: settings, logger: logger) }
        let stores = clients.map { Self.store($0, connections: connections, settings: settings) }
        let sharded = ShardedPostgresStore(
            directory: stores[0], others: Dictionary(uniqueKeysWithValues: zip(layout.numbers, stores.dropFirst())), layout: layout)
        return OpenedStore(store: sharded, services: clients)
    }

    private static func client(_ location: PostgresLocation, connections: Int, settings: StoreSettings, logger: Logger) -> PostgresClient {
        var configuration = location.clientConfiguration(maximumConnections: connections, keepingOpen: settings.keepingOpen)
        if let idle = settings.idleTimeout { configuration.options.connectionIdleTimeout = idle }
        return PostgresClient(configuration: configuration, backgroundLogger: logger)
    }

    private static func store(
        _ client: PostgresClient, connections: Int, settings: StoreSettings, replicas: PostgresReadReplicas? = nil
    ) -> PostgresRecordStore {
        PostgresRecordStore(
            client: client, maximumFieldIndexes: settings.maximumFieldIndexes ?? 64, connectionWait: settings.connectionWait ?? .seconds(5),
            metrics: StoreMetrics.postgres(poolSize: connections), replicas: replicas, fanOut: settings.fanOut)
    }
}
