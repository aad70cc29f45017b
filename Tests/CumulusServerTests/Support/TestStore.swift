import CumulusStore
import CumulusStorePostgres
import CumulusStoreSQLite
import Foundation
import Logging
import PostgresNIO
import Testing

/// The store a server test runs on: SQLite always, and PostgreSQL when `CUMULUS_TEST_POSTGRES` names a server (as the
/// store suites; see the README). The HTTP suites for records, zones, feeds, queries, sharing, links and every security
/// suite run on each.
///
/// SQLite is opened as `cumulus serve` opens it: a file in write-ahead-log mode behind a pool of readers and one writer,
/// checkpointed in the background while the application runs. (An in-memory SQLite database is the same SQL behind a
/// serial queue; no deployment runs it, so no suite does.)
struct TestStore: Sendable, CustomTestStringConvertible {
    var name: String
    /// Makes a store whose metrics go where given (`nil`: swift-metrics' global system, which tests leave unset).
    var makeMeasured: @Sendable (StoreMetrics?) async throws -> any RecordStore

    var testDescription: String { name }

    func make() async throws -> any RecordStore { try await makeMeasured(nil) }

    static let sqlite = TestStore(name: "SQLite file") { metrics in
        try SQLiteRecordStore(path: TestFiles.fresh("cumulus.sqlite"), configuration: .init(metrics: metrics))
    }
    static let postgresURL = ProcessInfo.processInfo.environment["CUMULUS_TEST_POSTGRES"]
    /// A streaming replica of that server (`scripts/setup-postgres-replica.sh`), for the read-replica suite.
    static let postgresReplicaURL = ProcessInfo.processInfo.environment["CUMULUS_TEST_POSTGRES_REPLICA"]
    /// A second PostgreSQL server (`scripts/setup-postgres-second.sh`), for stores sharded over two servers.
    static let postgresSecondURL = ProcessInfo.processInfo.environment["CUMULUS_TEST_POSTGRES_SECOND"]
    static let all: [TestStore] =
        [.sqlite] + (postgresURL == nil ? [] : [TestStore(name: "PostgreSQL") { try await makePostgresStore(metrics: $0) }])
    /// ``all`` and a store sharded over three databases, for the suites whose stories cross users (sharing, feeds,
    /// subscriptions, erasure, record operations); the store suites run every case on it too.
    static let allAndSharded: [TestStore] =
        all + (postgresURL == nil ? [] : [TestStore(name: "PostgreSQL sharded") { _ in try await makeShardedStore() }])

    /// A store sharded over three fresh databases: the directory and one more on the first server, the third on the
    /// second server when there is one; eight logical shards dealt round them, so users of a test land in all three.
    static func makeShardedStore(logicalShards: Int = 8) async throws -> ShardedPostgresStore {
        let first = try PostgresLocation(url: try #require(postgresURL))
        let second = try postgresSecondURL.map { try PostgresLocation(url: $0) } ?? first
        var stores: [PostgresRecordStore] = []
        // The directory's pool holds a connection that listens for other instances' changes, and one for work.
        for (server, connections) in [(first, 2), (first, 1), (second, 1)] {
            stores.append(
                try await makePostgresStore(location: try await makePostgresDatabase(on: server), connections: connections, migrate: false))
        }
        return try await ShardedPostgresStore.prepare(
            directory: stores[0], others: Array(stores.dropFirst()), logicalShards: logicalShards, logger: Logger(label: "postgres-test"))
    }

    /// A migrated store over a fresh database named after this process (the store suites drop those of finished
    /// processes); its client runs for the rest of the process.
    static func makePostgresStore(metrics: StoreMetrics? = nil) async throws -> PostgresRecordStore {
        try await makePostgresStore(location: try await makePostgresDatabase(), metrics: metrics)
    }

    static func makePostgresStore(location: PostgresLocation, metrics: StoreMetrics? = nil, connections: Int = 2, migrate: Bool = true) async throws
        -> PostgresRecordStore
    {
        let logger = Logger(label: "postgres-test")
        // Tests run side by side, each with a store that lives on: few connections each, closed soon when idle, so
        // the server's connection limit is never reached.
        var configuration = location.clientConfiguration(maximumConnections: connections)
        configuration.options.connectionIdleTimeout = .seconds(2)
        let client = PostgresClient(configuration: configuration)
        Task { await client.run() }
        if migrate { try await PostgresMigrations.migrate(client, logger: logger) }
        // Tests run side by side on two cores: a connection may take longer than a server's 5 s to come free.
        return PostgresRecordStore(client: client, connectionWait: .seconds(30), metrics: metrics)
    }

    /// A fresh, empty database named after this process, on the server `CUMULUS_TEST_POSTGRES` names.
    static func makePostgresDatabase(on server: PostgresLocation? = nil) async throws -> PostgresLocation {
        let admin = try server ?? PostgresLocation(url: try #require(postgresURL))
        var location = admin
        location.database = "cumulus_test_p\(getpid())_\(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16))"
        let adminClient = PostgresClient(configuration: admin.clientConfiguration(maximumConnections: 1))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await adminClient.run() }
            defer { group.cancelAll() }
            _ = try await adminClient.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(location.database)"), logger: Logger(label: "postgres-test"))
        }
        return location
    }
}

/// Files tests make: each in a directory of its own under one directory per test process, which is removed when the
/// process exits (and, should it crash, by the next process that starts).
enum TestFiles {
    private static let root: URL = {
        let temporary = FileManager.default.temporaryDirectory
        let prefix = "cumulus-tests-"
        // Directories of processes that no longer run.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? [] where name.hasPrefix(prefix) {
            if let pid = pid_t(name.dropFirst(prefix.count)), kill(pid, 0) != 0, errno == ESRCH {
                try? FileManager.default.removeItem(at: temporary.appendingPathComponent(name))
            }
        }
        let root = temporary.appendingPathComponent("\(prefix)\(getpid())")
        try? FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(atPath: "\(FileManager.default.temporaryDirectory.path)/cumulus-tests-\(getpid())") }
        return root
    }()

    /// A path named `name` in a new, empty directory.
    static func fresh(_ name: String) throws -> String {
        let directory = root.appendingPathComponent(UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory.appendingPathComponent(name).path
    }
}
