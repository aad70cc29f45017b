import CumulusStore
import CumulusStorePostgres
import Foundation
import Logging
import PostgresNIO
import Testing

/// A real PostgreSQL server for the PostgreSQL suites, named by `CUMULUS_TEST_POSTGRES`
/// (`postgres://user:password@127.0.0.1:5432/database`, a role that may create databases). `.ci/run` starts one and sets
/// it; without it those suites are skipped, and say so.
enum PostgresTestServer {
    static let url = ProcessInfo.processInfo.environment["CUMULUS_TEST_POSTGRES"]
    static let skipped: Comment = "PostgreSQL suites need CUMULUS_TEST_POSTGRES=postgres://user:password@host:port/database (see README)"
    static let logger = Logger(label: "postgres-test")

    /// Runs `body` with a client of a fresh, empty database, dropped afterwards.
    static func withFreshDatabase<T: Sendable>(_ body: @Sendable (PostgresClient, PostgresLocation) async throws -> T) async throws -> T {
        let admin = try PostgresLocation(url: try #require(url))
        var location = admin
        location.database = "cumulus_test_\(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: ""))"
        let fresh = location
        try await withClient(admin) { client in
            try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(fresh.database)"), logger: logger)
        }
        do {
            let result = try await withClient(fresh) { client in try await body(client, fresh) }
            try await dropDatabase(fresh.database, admin: admin)
            return result
        } catch {
            try? await dropDatabase(fresh.database, admin: admin)
            throw error
        }
    }

    private static func dropDatabase(_ name: String, admin: PostgresLocation) async throws {
        try await withClient(admin) { client in
            try await client.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
        }
    }

    /// Runs a client for the duration of `body`.
    static func withClient<T: Sendable>(_ location: PostgresLocation, _ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        let client = PostgresClient(configuration: location.clientConfiguration(maximumConnections: 8))
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }
}

@Suite("PostgreSQL locations")
struct PostgresLocationTests {
    @Test func urlsReadAsLibpqWouldAndBadOnesSayWhatIsWrong() throws {
        let full = try PostgresLocation(url: "postgres://app:s%40cret@db.internal:6543/cumulus?sslmode=require")
        #expect(full.host == "db.internal" && full.port == 6543 && full.username == "app" && full.password == "s@cret")
        #expect(full.database == "cumulus" && full.tls == .require)
        #expect(full.redacted == "postgres://app:***@db.internal:6543/cumulus")
        let short = try PostgresLocation(url: "postgresql://app@localhost/cumulus")
        #expect(short.port == 5432 && short.password == nil && short.tls == .prefer)
        #expect(PostgresLocation.names("POSTGRES://x") && !PostgresLocation.names("/var/lib/cumulus"))

        for (url, complaint) in [
            ("postgres://localhost/cumulus", "no user"), ("postgres://app@/cumulus", "no host"), ("postgres://app@localhost", "no database"),
            ("postgres://app@localhost/cumulus?sslmode=sometimes", "sslmode"), ("mysql://app@localhost/cumulus", "not a PostgreSQL URL"),
        ] {
            #expect {
                try PostgresLocation(url: url)
            } throws: { error in
                guard let error = error as? StoreError else { return false }
                return error.code == .misconfigured && error.message.contains(complaint) && !error.message.contains("s@cret")
            }
        }
    }
}

@Suite("PostgreSQL schema", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped))
struct PostgresSchemaTests {
    @Test func instancesStartingTogetherMigrateAnEmptyDatabaseOnce() async throws {
        try await PostgresTestServer.withFreshDatabase { client, _ in
            // Eight instances start at the same moment.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<8 { group.addTask { try await PostgresSchema.migrate(client, logger: PostgresTestServer.logger) } }
                try await group.waitForAll()
            }
            let versions = try await PostgresSchema.appliedVersions(client, logger: PostgresTestServer.logger)
            #expect(versions == Array(1...PostgresSchema.currentVersion))
            var tables: [String] = []
            for try await name in try await client.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
                .decode(String.self)
            {
                tables.append(name)
            }
            #expect(tables.contains("records") && tables.contains("participant_changes") && tables.contains("link_uploads"), "\(tables)")
        }
    }

    @Test func anOlderInstanceRefusesANewerSchema() async throws {
        try await PostgresTestServer.withFreshDatabase { client, _ in
            try await PostgresSchema.migrate(client, logger: PostgresTestServer.logger)
            let future = PostgresSchema.currentVersion + 1
            try await client.query("INSERT INTO cumulus_schema_migrations (version, name) VALUES (\(future), 'from the future')")
            await #expect {
                try await PostgresSchema.migrate(client, logger: PostgresTestServer.logger)
            } throws: { error in
                guard let error = error as? StoreError else { return false }
                return error.code == .misconfigured && error.message.contains("version \(future), newer than this Cumulus knows")
            }
        }
    }
}
