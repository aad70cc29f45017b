// swift-tools-version:6.1
import PackageDescription

// Same settings on every target (as Hummingbird does): explicit existentials, explicit imports.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "Cumulus",
    platforms: [.macOS(.v14), .iOS(.v17), .tvOS(.v17), .watchOS(.v10), .visionOS(.v1)],
    products: [
        .library(name: "CumulusModel", targets: ["CumulusModel"]),
        .library(name: "CumulusStore", targets: ["CumulusStore"]),
        .library(name: "CumulusStoreSQLite", targets: ["CumulusStoreSQLite"]),
        .library(name: "CumulusStorePostgres", targets: ["CumulusStorePostgres"]),
        .library(name: "CumulusStores", targets: ["CumulusStores"]),
        .library(name: "CumulusCore", targets: ["CumulusCore"]),
        .library(name: "CumulusServer", targets: ["CumulusServer"]),
        .library(name: "CumulusClient", targets: ["CumulusClient"]),
        .library(name: "CumulusSyncGRDB", targets: ["CumulusSyncGRDB"]),
        .library(name: "CumulusTesting", targets: ["CumulusTesting"]),
        .executable(name: "cumulus", targets: ["cumulus"]),
    ],
    traits: [
        .trait(
            name: "OpenTelemetry",
            description: "cumulus serve exports a span per request over OTLP (swift-otel), configured by OTEL_* variables")
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        // Already built for HummingbirdTesting; the tests use it to drive the real `cumulus serve` process.
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        // Already built for Hummingbird; the server's connection handlers speak its HTTPTypes parts.
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        // The PostgreSQL store, for deployments of many instances: the SSWG client on SwiftNIO, no ORM.
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // Already built for postgres-nio: TLS to PostgreSQL.
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // Already built for Hummingbird: the server's metrics, through the SSWG API.
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        // `/metrics` in Prometheus's text format; small (on swift-metrics and swift-atomics, both already built).
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // Already built for Hummingbird: a span per request, exported only when a tracer is bootstrapped.
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        // Only with the `OpenTelemetry` trait (`swift build --traits OpenTelemetry`): exports the spans over OTLP. Not
        // built by default: it brings gRPC and protobuf (about seven minutes of a first build on two cores).
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0"),
    ],
    targets: [
        // Value types and the CloudKit Web Services wire format. Foundation only.
        .target(name: "CumulusModel", swiftSettings: swiftSettings),
        // The storage protocol, its domain types and errors.
        .target(
            name: "CumulusStore",
            dependencies: [
                "CumulusModel",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // PostgreSQL store (postgres-nio): many stateless instances over one database.
        .target(
            name: "CumulusStorePostgres",
            dependencies: [
                "CumulusModel",
                "CumulusStore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // Embedded SQLite store (GRDB).
        .target(
            name: "CumulusStoreSQLite",
            dependencies: [
                "CumulusModel",
                "CumulusStore",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The one place a store is made from its location and settings: the command line, the benchmarks and the tests.
        .target(
            name: "CumulusStores",
            dependencies: [
                "CumulusStore",
                "CumulusStoreSQLite",
                "CumulusStorePostgres",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // The domain: accounts, validation, authorization policy, database operations.
        .target(
            name: "CumulusCore",
            dependencies: [
                "CumulusModel",
                "CumulusStore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The transport under the routes: Cumulus's HTTP/1 connection channel for Hummingbird, the connection guard
        // (limits, idle and body timeouts), lingering close of refused bodies, glibc's allocator tuning.
        .target(
            name: "CumulusServerHTTP",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The HTTP edge (Hummingbird 2): routes, middleware, the courier, the console, the application's assembly.
        .target(
            name: "CumulusServer",
            dependencies: [
                "CumulusModel",
                "CumulusStore",
                "CumulusCore",
                "CumulusServerHTTP",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        // The client: HTTP API over a transport protocol; no server or storage dependency.
        .target(name: "CumulusClient", dependencies: ["CumulusModel"], swiftSettings: swiftSettings),
        // Test helpers for apps and for Cumulus's own tests: a transport that injects network faults.
        .target(name: "CumulusTesting", dependencies: ["CumulusClient"], swiftSettings: swiftSettings),
        // The easy path for GRDB apps: sync state in the app's database, tables mapped to record types.
        .target(
            name: "CumulusSyncGRDB",
            dependencies: [
                "CumulusClient", "CumulusModel", .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The Ghost Car example (seed 000): a drives table synced with Cumulus; docs/SYNC.md walks through it.
        .target(
            name: "GhostCarExample",
            dependencies: ["CumulusClient", "CumulusModel", "CumulusSyncGRDB", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: swiftSettings
        ),
        // The cost-splitting app of seed 001: groups shared as hierarchies; docs/SYNC.md and docs/SHARING.md show it.
        .target(
            name: "SplitCostsExample",
            dependencies: ["CumulusClient", "CumulusModel", "CumulusSyncGRDB", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: swiftSettings
        ),
        // What the runnable examples share: a server of their own, in process.
        .target(
            name: "DemoServer",
            dependencies: [
                "CumulusClient", "CumulusCore", "CumulusModel", "CumulusServer", "CumulusStoreSQLite",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // `swift run GhostCarDemo`: the Ghost Car example on two devices through a server of its own.
        .executableTarget(
            name: "GhostCarDemo",
            dependencies: [
                "GhostCarExample", "DemoServer", "CumulusClient", "CumulusSyncGRDB", "CumulusModel", .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        // `swift run SplitCostsDemo`: seed 001's cost-splitting app, two people sharing a group.
        .executableTarget(
            name: "SplitCostsDemo",
            dependencies: ["SplitCostsExample", "DemoServer", "CumulusClient", "CumulusModel"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "cumulus",
            dependencies: [
                "CumulusCore",
                "CumulusServer",
                "CumulusServerHTTP",
                "CumulusStore",
                "CumulusStoreSQLite",
                "CumulusStorePostgres",
                "CumulusStores",
                "CumulusSyncGRDB",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "OTel", package: "swift-otel", condition: .when(traits: ["OpenTelemetry"])),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "CumulusBenchmarks",
            dependencies: [
                "CumulusClient",
                "CumulusSyncGRDB",
                "GhostCarExample",
                "CumulusModel",
                "CumulusCore",
                "CumulusServer",
                "CumulusServerHTTP",
                "CumulusStore",
                "CumulusStoreSQLite",
                "CumulusStorePostgres",
                "CumulusStores",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "CumulusModelTests", dependencies: ["CumulusModel"], swiftSettings: swiftSettings),
        .testTarget(
            name: "CumulusStoreTests",
            dependencies: [
                "CumulusModel", "CumulusStore", "CumulusStoreSQLite", "CumulusStorePostgres", "CumulusStores", "CumulusTesting",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CumulusStoreSQLiteTests",
            dependencies: [
                "CumulusModel", "CumulusStore", "CumulusStoreSQLite", .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's own C API, for counting the steps a statement runs.
                .product(name: "GRDBSQLite", package: "GRDB.swift"), .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CumulusServerHTTPTests",
            dependencies: ["CumulusServerHTTP"],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "CumulusCoreTests", dependencies: ["CumulusModel", "CumulusStore", "CumulusCore"], swiftSettings: swiftSettings),
        .testTarget(name: "CumulusClientTests", dependencies: ["CumulusModel", "CumulusClient"], swiftSettings: swiftSettings),
        .testTarget(
            name: "CumulusSyncGRDBTests",
            dependencies: ["CumulusModel", "CumulusSyncGRDB", "GhostCarExample", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CumulusServerTests",
            dependencies: [
                "CumulusClient",
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                "CumulusTesting",
                "CumulusSyncGRDB",
                "GhostCarExample",
                "SplitCostsExample",
                .product(name: "GRDB", package: "GRDB.swift"),
                "CumulusModel",
                "CumulusStore",
                "CumulusStoreSQLite",
                "CumulusStorePostgres",
                "CumulusCore",
                "CumulusServer",
                "CumulusServerHTTP",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
