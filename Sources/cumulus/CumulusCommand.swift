public import ArgumentParser
import CoreMetrics
import CumulusCore
public import CumulusModel
import CumulusServer
import CumulusServerHTTP
import CumulusStore
import CumulusStorePostgres
import CumulusStoreSQLite
import CumulusStores
import Foundation
import Hummingbird
import Logging
import PostgresNIO
import Prometheus
import ServiceLifecycle
import Synchronization

@main
struct CumulusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cumulus",
        abstract: "A self-hostable server with CloudKit's data model and the CloudKit Web Services wire format.",
        version: CumulusVersion.current,
        subcommands: [
            Serve.self, Containers.self, Tokens.self, Users.self, Keys.self, SchemaCommand.self, Indexes.self, ConsoleCommand.self, Backup.self,
            Restore.self, Zones.self, Records.self, Doctor.self, Shards.self,
        ]
    )

    static func main() async {
        // Logs go to stderr: stdout carries only each command's result, so `TOKEN=$(cumulus tokens create …)` works.
        LoggingSystem.bootstrap { label in LogSettings.handler(label: label) }
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as CumulusError {
            FileHandle.standardError.write(Data("error: \(error.reason)\n".utf8))
            Foundation.exit(1)
        } catch let error as StoreError {
            FileHandle.standardError.write(Data("error: \(error.message)\n".utf8))
            Foundation.exit(1)
        } catch let error as NoStore {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            Foundation.exit(1)
        } catch {
            exit(withError: error)
        }
    }
}

/// Where the data lives, for every command: an SQLite data directory (the default) or a PostgreSQL database.
struct DataOptions: ParsableArguments {
    @Option(
        name: .long,
        help: """
            A PostgreSQL URL (postgres://user:password@host:port/database) or an SQLite data directory \
            (default: $CUMULUS_DATABASE, else $CUMULUS_DATA, else ./cumulus-data).
            """)
    var database: String?
    @Option(name: .long, help: "SQLite data directory; the same as --database DIRECTORY.")
    var data: String?
    @Option(
        name: .customLong("database-connections"),
        help: "PostgreSQL connections this instance may open (default: $CUMULUS_DATABASE_CONNECTIONS or 20).")
    var databaseConnections: Int?
    @Option(
        name: .customLong("shard"),
        help: """
            Another PostgreSQL database that holds users' data, the --database being the directory (docs/DEPLOY.md, \
            "Shards"); repeat for more (default: $CUMULUS_SHARD, comma-separated).
            """)
    var shards: [String] = []
    /// The store to open, from the options and the environment.
    func location() throws -> StoreLocation {
        let environment = ProcessInfo.processInfo.environment
        let value = database ?? data ?? environment["CUMULUS_DATABASE"] ?? environment["CUMULUS_DATA"] ?? "./cumulus-data"
        let shardURLs = shards.isEmpty ? ServeSettings.list(environment["CUMULUS_SHARD"]) : shards
        guard PostgresLocation.names(value) else {
            guard shardURLs.isEmpty else { throw ValidationError("--shard needs a PostgreSQL --database (the directory)") }
            return .sqlite(directory: value)
        }
        let connections = databaseConnections ?? Int(environment["CUMULUS_DATABASE_CONNECTIONS"] ?? "20")
        guard let connections, connections > 0 else { throw ValidationError("--database-connections must be a positive number") }
        let others = try shardURLs.map { url in
            do throws(StoreError) { return try PostgresLocation(url: url) } catch { throw ValidationError("--shard: \(error.message)") }
        }
        return .postgres(try PostgresLocation(url: value), connections: connections, shards: others)
    }

    /// Where asset bytes live: `directory` when one is named (or `CUMULUS_ASSETS`); else beside the SQLite file, or in
    /// PostgreSQL itself, so every instance of a cluster serves every asset.
    func assetStorage(directory: String?, store: any RecordStore, logger: Logger) throws -> (any AssetStorage)? {
        if let directory = directory ?? ProcessInfo.processInfo.environment["CUMULUS_ASSETS"] {
            return try FileAssetStorage(directory: URL(fileURLWithPath: directory))
        }
        if case .sqlite(let directory) = try location() {
            return try FileAssetStorage(directory: URL(fileURLWithPath: (directory as NSString).appendingPathComponent("assets")))
        }
        if let postgres = store as? PostgresRecordStore { return PostgresAssetStorage(client: postgres.client, logger: logger) }
        if let sharded = store as? ShardedPostgresStore { return PostgresAssetStorage(client: sharded.directory.client, logger: logger) }
        return nil
    }

    /// Opens the store for the length of `body`, running its connection pool alongside.
    func withStore<T: Sendable>(_ body: (any RecordStore) async throws -> T) async throws -> T {
        try await withStore(location: try location(), body)
    }

    func withStore<T: Sendable>(location: StoreLocation, _ body: (any RecordStore) async throws -> T) async throws -> T {
        try await location.open(logger: Logger(label: "cumulus")).run(body)
    }
}

/// Where an administration command's data lives: ``DataOptions``, and `--create`. Such a command opens an SQLite store
/// only where one is (a mistyped `--data`, or another working directory, is an error, not an empty store that shows no
/// container); `serve` always makes its own.
struct StoreOptions: ParsableArguments {
    @OptionGroup var data: DataOptions
    @Flag(name: .long, help: "Make an empty SQLite store if the data directory has none.")
    var create = false

    func location() throws -> StoreLocation { try data.location() }

    /// Opens the store for the length of `body`; an SQLite data directory without a store is ``NoStore`` unless
    /// `--create`.
    func withStore<T: Sendable>(_ body: (any RecordStore) async throws -> T) async throws -> T {
        let location = try location()
        if case .sqlite(let directory) = location, !create {
            let absolute = URL(fileURLWithPath: directory).standardizedFileURL.path
            guard FileManager.default.fileExists(atPath: (absolute as NSString).appendingPathComponent("cumulus.sqlite")) else {
                throw NoStore(directory: absolute)
            }
        }
        return try await data.withStore(location: location, body)
    }

    func assetStorage(directory: String?, store: any RecordStore, logger: Logger) throws -> (any AssetStorage)? {
        try data.assetStorage(directory: directory, store: store, logger: logger)
    }

    func sqliteFile(for command: String) throws -> String { try data.sqliteFile(for: command) }
}

/// An administration command's SQLite data directory that holds no store.
struct NoStore: Error, CustomStringConvertible {
    var directory: String

    var description: String {
        let what = FileManager.default.fileExists(atPath: directory) ? "no store in \(directory)" : "no data directory at \(directory)"
        return "\(what): run the command where `cumulus serve` keeps its data, or give --data (or CUMULUS_DATA) that directory; "
            + "--create makes an empty store there"
    }
}

extension ContainerEnvironment: ExpressibleByArgument {}

/// How log lines look and which are written: `$CUMULUS_LOG_FORMAT` and `$CUMULUS_LOG_LEVEL` (`$LOG_LEVEL` too), or
/// `cumulus serve --log-format --log-level`, which set them before the server makes its loggers.
enum LogSettings {
    enum Format: String, CaseIterable, ExpressibleByArgument {
        /// Lines for people: time, level, label, fields and message.
        case text
        case logfmt
        case json
    }

    static let current: Mutex<(format: Format, level: Logger.Level)> = {
        let environment = ProcessInfo.processInfo.environment
        return Mutex(
            (
                environment["CUMULUS_LOG_FORMAT"].flatMap(Format.init(rawValue:)) ?? .text,
                (environment["CUMULUS_LOG_LEVEL"] ?? environment["LOG_LEVEL"]).flatMap(Logger.Level.init(rawValue:)) ?? .info
            ))
    }()

    static func handler(label: String) -> any LogHandler {
        let (format, level) = current.withLock { $0 }
        var handler: any LogHandler =
            switch format {
            case .text: StreamLogHandler.standardError(label: label)
            case .logfmt: StructuredLogHandler(label: label, format: .logfmt)
            case .json: StructuredLogHandler(label: label, format: .json)
            }
        handler.logLevel = level
        return handler
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

/// Writes a command's result to stdout, unbuffered, so a parent process reads it at once.
func printResult(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the server; prints the URL it listens on.")

    @Option(help: "Address to bind (default: $CUMULUS_HOST or 127.0.0.1).") var host: String?
    @Option(help: "Port to bind; 0 picks a free one (default: $CUMULUS_PORT or 8080).") var port: Int?
    @Option(name: .customLong("public-url"), help: "URL clients reach the server at (default: http://HOST:PORT).") var publicURL: String?
    @Option(name: .customLong("apple-app-site-association"), help: "JSON file served at /.well-known/apple-app-site-association.")
    var appSiteAssociation: String?
    @Option(name: .customLong("app-store-id"), help: "App Store ID for the smart banner on share-a-copy pages.") var appStoreID: String?
    @Flag(
        name: .customLong("trust-forwarded-for"),
        help: "Behind a load balancer: a client's address is the last X-Forwarded-For entry (default: $CUMULUS_TRUST_FORWARDED_FOR=1).")
    var trustForwardedFor = false
    @Option(
        name: .customLong("push-recheck-interval"),
        help: "Seconds between an open push connection's looks at the feeds, in case a wake-up was missed (default: 60).")
    var pushRecheckInterval: Int?
    @Option(
        name: .customLong("max-push-connections"),
        help: "Courier polls and streams this instance holds open at once (default: $CUMULUS_MAX_PUSH_CONNECTIONS or 10000).")
    var maxPushConnections: Int?
    @Flag(
        name: .customLong("accept-unhashed-large-bodies"),
        help: "Unsafe: accept server-to-server signatures over an empty body hash for bodies over 1 MiB, as MistKit sends them.")
    var acceptUnhashedLargeBodies = false
    @Option(
        name: .customLong("max-connections-per-address"),
        help: "Connections one client address may hold open at once (default: $CUMULUS_MAX_CONNECTIONS_PER_ADDRESS or 512).")
    var maxConnectionsPerAddress: Int?
    @Option(
        name: .customLong("requests-per-second"),
        help: "Database API requests per second per user, key or anonymous address; 0 turns it off (default: $CUMULUS_REQUESTS_PER_SECOND or 100).")
    var requestsPerSecond: Double?
    @Option(
        name: .customLong("metrics-port"),
        help: "Serve /metrics (Prometheus) on this port instead of the main one, so a firewall can keep it private (default: $CUMULUS_METRICS_PORT).")
    var metricsPort: Int?
    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (default: $CUMULUS_LOG_LEVEL or info).")
    var logLevel: Logger.Level?
    @Option(
        name: .customLong("log-format"),
        help: "text (for people), logfmt or json: one line per request and per event (default: $CUMULUS_LOG_FORMAT or text).")
    var logFormat: LogSettings.Format?
    @Option(
        name: .customLong("assets"),
        help: """
            Directory of asset files (default: $CUMULUS_ASSETS, else assets/ in the SQLite data directory; over PostgreSQL, \
            the database itself).
            """)
    var assets: String?
    @Option(
        name: .customLong("max-asset-size"),
        help: "The largest asset accepted, in MiB (default: $CUMULUS_MAX_ASSET_SIZE or 250).")
    var maxAssetSize: Int?
    @Option(
        name: .customLong("max-zones"),
        help: "Live zones one database may hold, its default zone among them (default: $CUMULUS_MAX_ZONES or 10000).")
    var maxZones: Int?
    @Option(
        name: .customLong("history-retention"),
        help: """
            How long replaced and deleted versions of records are kept, for zone restores and undelete: 7d, 36h, 90m; \
            0 keeps none (default: $CUMULUS_HISTORY_RETENTION or 7d).
            """)
    var historyRetention: String?
    @Option(
        name: .customLong("config"),
        help: """
            A JSON file of settings, keyed by these flags' names without -- ({"port": 8080, "public-url": "…"}); a flag, \
            then an environment variable, wins over it (default: $CUMULUS_CONFIG).
            """)
    var config: String?
    @Option(
        name: .customLong("read-replica"),
        help: """
            A streaming replica of the PostgreSQL --database that serves change feeds, lookups and queries while it keeps \
            up; repeat for more (default: $CUMULUS_READ_REPLICA, comma-separated).
            """)
    var readReplicas: [String] = []
    @Option(
        name: .customLong("fan-out"),
        help: """
            How instances over one PostgreSQL wake each other's push connections: notify (NOTIFY after each commit) or \
            watch (each instance reads the positions of the databases its connections wait on every 25 ms; works through \
            PgBouncer in transaction mode) (default: $CUMULUS_FAN_OUT or notify).
            """)
    var fanOutName: String?
    @OptionGroup var options: DataOptions

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let settings = try ServeSettings(file: config, environment: environment)
        var format = logFormat
        if format == nil, let text = settings.text("log-format") {
            guard let named = LogSettings.Format(rawValue: text) else { throw ValidationError("log-format must be text, logfmt or json") }
            format = named
        }
        var level = logLevel
        if level == nil, let text = settings.text("log-level") {
            guard let named = Logger.Level(rawValue: text) else {
                throw ValidationError("log-level must be trace, debug, info, notice, warning, error or critical")
            }
            level = named
        }
        LogSettings.current.withLock { current in current = (format ?? current.format, level ?? current.level) }
        MemoryAllocatorTuning.apply(environment: environment)
        let host = host ?? settings.text("host") ?? "127.0.0.1"
        guard let port = port ?? Int(settings.text("port") ?? "8080") else {
            throw ValidationError("port (CUMULUS_PORT) must be a number")
        }
        var options = self.options
        if options.database == nil, options.data == nil {
            // The environment's store, else the file's.
            options.database =
                settings.environmentText("database") ?? settings.environmentText("data") ?? settings.fileText("database") ?? settings.fileText("data")
        }
        options.databaseConnections = options.databaseConnections ?? settings.text("database-connections").flatMap { Int($0) }
        if options.shards.isEmpty { options.shards = ServeSettings.list(settings.text("shard")) }
        let logger = Logger(label: "cumulus")
        // The libraries' own metrics and the store's (through swift-metrics' global system) land in the same registry as
        // the server's: bootstrapped before the store opens and makes its metrics.
        let metrics = ServerMetrics()
        MetricsSystem.bootstrap(metrics.factory)
        let replicaURLs = readReplicas.isEmpty ? ServeSettings.list(settings.text("read-replica")) : readReplicas
        let replicas = try replicaURLs.map { url in
            do throws(StoreError) { return try PostgresLocation(url: url) } catch { throw ValidationError("--read-replica: \(error.message)") }
        }
        let fanOut: ChangeFanOut
        switch fanOutName ?? settings.text("fan-out") ?? "notify" {
        case "notify": fanOut = .notify
        case "watch": fanOut = .watch(interval: .milliseconds(25))
        default: throw ValidationError("--fan-out (CUMULUS_FAN_OUT) must be notify or watch")
        }
        let location = try options.location()
        if case .sqlite = location, !replicas.isEmpty { throw ValidationError("--read-replica needs a PostgreSQL --database") }
        if case .postgres(_, _, let shards) = location, !shards.isEmpty {
            guard replicas.isEmpty else { throw ValidationError("--read-replica and --shard do not go together yet") }
            guard case .notify = fanOut else { throw ValidationError("--fan-out watch and --shard do not go together yet") }
        }
        var storeSettings = StoreSettings()
        storeSettings.replicas = replicas
        storeSettings.fanOut = fanOut
        storeSettings.keepingOpen = 2
        let opened = try await location.open(storeSettings, logger: logger)
        guard let maxPushConnections = maxPushConnections ?? Int(settings.text("max-push-connections") ?? "10000"), maxPushConnections > 0
        else {
            throw ValidationError("--max-push-connections (CUMULUS_MAX_PUSH_CONNECTIONS) must be a positive number")
        }
        var association: String?
        if let path = appSiteAssociation ?? settings.text("apple-app-site-association") {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8), (try? JSONValue(parsing: text)) != nil else {
                throw ValidationError("--apple-app-site-association: \(path) is not a readable JSON file")
            }
            association = text
        }
        guard let recheck = pushRecheckInterval ?? Int(settings.text("push-recheck-interval") ?? "60") else {
            throw ValidationError("push-recheck-interval (CUMULUS_PUSH_RECHECK_INTERVAL) must be a number of seconds")
        }
        var configuration = ServerConfiguration(
            host: host, port: port, publicBaseURL: publicURL ?? settings.text("public-url"), appleAppSiteAssociation: association,
            appStoreID: appStoreID ?? settings.text("app-store-id"), trustsForwardedFor: trustForwardedFor || settings.flag("trust-forwarded-for"),
            pushRecheckInterval: .seconds(max(recheck, 1)), pushLimits: PushLimits(maximumConnections: maxPushConnections)
        )
        configuration.acceptsUnhashedLargeServerToServerBodies = acceptUnhashedLargeBodies || settings.flag("accept-unhashed-large-bodies")
        configuration.assetStorage = try options.assetStorage(directory: assets ?? settings.text("assets"), store: opened.store, logger: logger)
        guard let assetMiB = maxAssetSize ?? Int(settings.text("max-asset-size") ?? "250"), assetMiB > 0 else {
            throw ValidationError("--max-asset-size (CUMULUS_MAX_ASSET_SIZE) must be a positive number of MiB")
        }
        configuration.assetLimits.maximumSize = Int64(assetMiB) * 1024 * 1024
        guard let zones = maxZones ?? Int(settings.text("max-zones") ?? "10000"), zones > 0 else {
            throw ValidationError("--max-zones (CUMULUS_MAX_ZONES) must be a positive number")
        }
        configuration.limits.maximumZones = zones
        guard
            let perAddress = maxConnectionsPerAddress ?? Int(settings.text("max-connections-per-address") ?? "512"), perAddress > 0
        else {
            throw ValidationError("--max-connections-per-address (CUMULUS_MAX_CONNECTIONS_PER_ADDRESS) must be a positive number")
        }
        configuration.connectionLimits.maximumConnectionsPerAddress = perAddress
        guard let rate = requestsPerSecond ?? Double(settings.text("requests-per-second") ?? "100"), rate >= 0 else {
            throw ValidationError("--requests-per-second (CUMULUS_REQUESTS_PER_SECOND) must be a number, 0 or more")
        }
        configuration.requestLimits.requestsPerSecond = rate
        configuration.requestLimits.burst = max(1, Int(rate * 3))
        // Connections stay below the open-file limit (raised to its hard limit), with room for the store's files.
        let openFiles = OpenFileLimit.raiseToHardLimit()
        configuration.connectionLimits.maximumConnections = max(64, min(configuration.connectionLimits.maximumConnections, openFiles - 256))
        configuration.metricsPort = metricsPort ?? settings.text("metrics-port").flatMap { Int($0) }
        configuration.historyRetention = try HistoryWindow.retention(historyRetention ?? settings.text("history-retention"))
        let tracing = try RequestTracing.start(&configuration, logger: logger)
        var app = buildApplication(
            configuration: configuration,
            store: opened.store, storeServices: opened.services, logger: logger, metrics: metrics,
            onServerRunning: { url in printResult(url) },
            onMetricsServerRunning: { url in logger.info("metrics", metadata: ["cumulus.metrics.url": "\(url)/metrics"]) }
        )
        if let tracing { app.addServices(tracing) }
        if case .postgres(let location, let connections, let shards) = try options.location() {
            logger.info(
                "using PostgreSQL",
                metadata: [
                    "cumulus.database": "\(location.redacted)", "cumulus.connections": "\(connections)",
                    "cumulus.read_replicas": "\(replicas.map { $0.redacted }.joined(separator: ","))",
                    "cumulus.shards": "\(shards.map { $0.redacted }.joined(separator: ","))",
                ])
        }
        // SIGINT and SIGTERM start a graceful shutdown: in-flight requests finish before the process exits.
        try await app.runService()
        logger.info("stopped; every request in flight was answered")
    }
}

struct Containers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Manage containers.", subcommands: [Create.self, List.self, Delete.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a container, such as iCloud.com.example.app.")
        @Argument(help: "Container identifier.") var id: String
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withStore { store in try await AccountService(store: store).createContainer(id, logger: Logger(label: "cumulus")) }
            printResult(id)
        }
    }
}

struct Tokens: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Manage API tokens.", subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create an API token (ckAPIToken); prints it.")
        @Option(help: "Container identifier.") var container: String
        @Option(help: "development or production.") var environment: ContainerEnvironment = .development
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let token = try await options.withStore { store in
                try await AccountService(store: store).createAPIToken(
                    container: container, environment: environment, logger: Logger(label: "cumulus"))
            }
            printResult(token)
        }
    }
}

struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage users.",
        subcommands: [Create.self, Token.self, List.self, Erase.self, SetPassword.self, SetEmail.self, Discoverable.self, Export.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a user; prints the userRecordName.")
        @Argument(help: "Sign-in name.") var name: String
        @Option(help: "Container identifier.") var container: String
        @Option(help: "Password, for signing in over HTTP.") var password: String?
        @Option(help: "Email address.") var email: String?
        @Flag(help: "Let other users find this user with users/discover.") var discoverable = false
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let logger = Logger(label: "cumulus")
            let user = try await options.withStore { store in
                let accounts = AccountService(store: store)
                let user = try await accounts.createUser(container: container, name: name, password: password, email: email, logger: logger)
                if discoverable { try await accounts.setDiscoverable(user, true, logger: logger) }
                return user
            }
            printResult(user.userRecordName)
        }
    }

    struct Token: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Issue a web auth token (ckWebAuthToken) for a user; prints it.")
        @Argument(help: "Sign-in name.") var name: String
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let token = try await options.withStore { store in
                try await AccountService(store: store).issueWebAuthToken(container: container, name: name, logger: Logger(label: "cumulus"))
            }
            printResult(token)
        }
    }
}

struct Keys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Manage server-to-server keys.", subcommands: [Add.self, List.self, Revoke.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Register an ECDSA P-256 public key; prints its key ID.")
        @Option(help: "Container identifier.") var container: String
        @Option(name: .customLong("public-key"), help: "PEM file of the public key (openssl ec -in eckey.pem -pubout).") var publicKey: String
        @Option(help: "development or production.") var environment: ContainerEnvironment = .development
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let pem: String
            do {
                pem = try String(contentsOfFile: publicKey, encoding: .utf8)
            } catch {
                throw CumulusError(.badRequest, "cannot read \(publicKey)")
            }
            let keyID = try await options.withStore { store in
                try await AccountService(store: store)
                    .addServerKey(container: container, environment: environment, publicKeyPEM: pem, logger: Logger(label: "cumulus"))
            }
            printResult(keyID)
        }
    }
}

/// The process's limit on open files, which bounds its connections.
enum OpenFileLimit {
    /// Raises the soft limit to the hard limit (Debian's default soft limit is 1,024) and answers the limit in force.
    static func raiseToHardLimit() -> Int {
        var limit = rlimit()
        #if canImport(Glibc)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return 1_024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        return Int(clamping: limit.rlim_cur)
    }
}
