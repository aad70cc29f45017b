import CumulusModel
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
            _ = try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(fresh.database)"), logger: logger)
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

    /// Runs `body` with a migrated store over a fresh database holding one container, `c`.
    static func withFreshStore<T: Sendable>(_ body: @Sendable (PostgresRecordStore) async throws -> T) async throws -> T {
        try await withFreshDatabase { client, _ in
            try await PostgresSchema.migrate(client, logger: logger)
            let store = PostgresRecordStore(client: client)
            try await store.createContainer("c", createdAt: 0, logger: logger)
            return try await body(store)
        }
    }

    private static func dropDatabase(_ name: String, admin: PostgresLocation) async throws {
        try await withClient(admin) { client in
            _ = try await client.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
        }
    }

    /// Runs a client for the duration of `body`.
    @discardableResult
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

/// The PostgreSQL store's parts that exist so far, held to what the conformance suite asks of every store. They join
/// ``StoreFactory/all`` once the store conforms to `RecordStore` whole.
@Suite("PostgreSQL store: accounts", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped))
struct PostgresAccountsTests {
    let logger = PostgresTestServer.logger
    static let container = "c"

    @Test func containersCredentialsUsersAndTheSecret() async throws {
        try await PostgresTestServer.withFreshStore { store in
            let logger = PostgresTestServer.logger
            let again = await #expect(throws: StoreError.self) { try await store.createContainer(Self.container, createdAt: 0, logger: logger) }
            #expect(again?.code == .duplicate)
            #expect(try await store.containerExists(Self.container, logger: logger))
            #expect(try await !store.containerExists("other", logger: logger))

            let token = APITokenRecord(tokenHash: [1, 2, 3], container: Self.container, environment: .production, createdAt: 5)
            try await store.saveAPIToken(token, logger: logger)
            #expect(try await store.apiToken(hash: [1, 2, 3], logger: logger) == token)
            try await store.revokeAPIToken(hash: [1, 2, 3], logger: logger)
            #expect(try await store.apiToken(hash: [1, 2, 3], logger: logger)?.revoked == true)
            #expect(try await store.apiToken(hash: [9], logger: logger) == nil)
            let missing = await #expect(throws: StoreError.self) { try await store.revokeAPIToken(hash: [9], logger: logger) }
            #expect(missing?.code == .notFound)

            let user = UserAccount(
                userRecordName: "_u1", container: Self.container, name: "Alice", email: "a@example.com", passwordHash: "h", createdAt: 1)
            try await store.createUser(user, logger: logger)
            #expect(try await store.user(container: Self.container, name: "alice", logger: logger) == user)
            #expect(try await store.user(userRecordName: "_u1", logger: logger) == user)
            let duplicate = UserAccount(userRecordName: "_u2", container: Self.container, name: "ALICE", createdAt: 1)
            let error = await #expect(throws: StoreError.self) { try await store.createUser(duplicate, logger: logger) }
            #expect(error?.code == .duplicate)
            let orphan = UserAccount(userRecordName: "_u3", container: "nowhere", name: "Bob", createdAt: 1)
            let noContainer = await #expect(throws: StoreError.self) { try await store.createUser(orphan, logger: logger) }
            #expect(noContainer?.code == .notFound)

            try await store.setDiscoverable(userRecordName: "_u1", true, logger: logger)
            let found = try await store.users(container: Self.container, emails: ["A@EXAMPLE.COM"], userRecordNames: [], logger: logger)
            #expect(found.map(\.userRecordName) == ["_u1"] && found.first?.discoverable == true)

            try await store.saveWebAuthToken(WebAuthTokenRecord(tokenHash: [7], userRecordName: "_u1", createdAt: 1, expiresAt: 99), logger: logger)
            let session = try await store.webAuthToken(hash: [7], logger: logger)
            #expect(session?.0.expiresAt == 99 && session?.1.userRecordName == "_u1")
            try await store.deleteWebAuthToken(hash: [7], logger: logger)
            #expect(try await store.webAuthToken(hash: [7], logger: logger) == nil)

            let key = ServerKeyRecord(keyID: "k", container: Self.container, environment: .development, publicKeyPEM: "pem", createdAt: 3)
            try await store.saveServerKey(key, logger: logger)
            #expect(try await store.serverKey(id: "k", logger: logger) == key)

            // Instances asking for the secret at the same moment all get the first writer's.
            let secrets = try await withThrowingTaskGroup(of: [UInt8].self) { group in
                for _ in 0..<6 { group.addTask { try await store.serverSecret(logger: logger) } }
                return try await group.reduce(into: Set<[UInt8]>()) { $0.insert($1) }
            }
            #expect(secrets.count == 1 && secrets.first?.count == 32)
        }
    }

    @Test func wrongCredentialsAMissingDatabaseAndAnUnreachableServerAreNamedAtOnce() async throws {
        let location = try PostgresLocation(url: try #require(PostgresTestServer.url))
        try await location.check(logger: logger)
        var wrong = location
        wrong.password = "not-the-password"
        var missing = location
        missing.database = "no_such_database_here"
        var nowhere = location
        nowhere.port = 9
        for (bad, code, words) in [
            (wrong, StoreError.Code.misconfigured, "credentials"), (missing, .misconfigured, "does not exist"),
            (nowhere, .unavailable, "unreachable"),
        ] {
            let error = await #expect(throws: StoreError.self) { try await bad.check(logger: logger) }
            #expect(error?.code == code && error?.message.contains(words) == true, "\(String(describing: error))")
            #expect(error?.message.contains("not-the-password") == false)
        }
    }
}

@Suite("PostgreSQL store: zones", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped))
struct PostgresZonesTests {
    @Test func zonesAreCreatedOnceListedDeletedAndCreatedAgainAsNewIncarnations() async throws {
        try await PostgresTestServer.withFreshStore { store in
            let logger = PostgresTestServer.logger
            let alice = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice")
            #expect(try await store.zones(in: alice, logger: logger).map(\.zoneID.zoneName) == [ZoneID.defaultZoneName])

            // Instances creating the same zone at the same moment get one zone.
            let created = try await withThrowingTaskGroup(of: [ZoneModificationResult].self) { group in
                for _ in 0..<6 {
                    group.addTask {
                        try await store.modifyZones(
                            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Lists"))], in: alice, timestamp: 1, logger: logger)
                    }
                }
                return try await group.reduce(into: Set<Int64>()) { incarnations, results in
                    if case .saved(let zone) = results.first { incarnations.insert(zone.incarnation) }
                }
            }
            #expect(created.count == 1)
            _ = try await store.modifyZones(
                [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Archive"))], in: alice, timestamp: 2, logger: logger)
            #expect(try await store.zones(in: alice, logger: logger).map(\.zoneID.zoneName) == [ZoneID.defaultZoneName, "Archive", "Lists"])
            let named = try await store.zones(named: ["Lists", "Nope"], in: alice, logger: logger)
            #expect(Set(named.keys) == ["Lists"] && named["Lists"]?.incarnation == created.first)

            let deleted = try await store.modifyZones(
                [
                    ZoneOperation(operationType: .delete, zoneID: ZoneID(zoneName: "Lists")),
                    ZoneOperation(operationType: .delete, zoneID: ZoneID(zoneName: "Nope")),
                ],
                in: alice, timestamp: 3, logger: logger)
            #expect(deleted.first == .deleted(alice.zoneID("Lists")))
            guard case .failed(_, .zoneNotFound, _)? = deleted.last else {
                Issue.record("deleting a missing zone: \(deleted)")
                return
            }
            let again = try await store.modifyZones(
                [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Lists"))], in: alice, timestamp: 4, logger: logger)
            guard case .saved(let recreated)? = again.first else {
                Issue.record("\(again)")
                return
            }
            #expect(recreated.incarnation != created.first && recreated.changeSequence == 0)

            // The database feed: every zone change once, in order, paged, deletions included.
            var position: Int64 = 0
            var seen: [DatabaseZoneChange] = []
            var pages = 0
            while true {
                let page = try await store.databaseChanges(in: alice, after: position, limit: 1, logger: logger)
                seen += page.zones
                position = page.sequence
                pages += 1
                if !page.moreComing { break }
            }
            let summary = seen.map { change in
                switch change {
                case .changed(let zone): zone.zoneID.zoneName
                case .deleted(let zoneID): "deleted " + zoneID.zoneName
                }
            }
            #expect(summary == ["Archive", "deleted Lists", "Lists"])
            #expect(seen.last == .changed(recreated))
            #expect(pages == 3)
            let nothingNew = try await store.databaseChanges(in: alice, after: position, limit: 10, logger: logger)
            #expect(nothingNew.zones.isEmpty && nothingNew.sequence == position && !nothingNew.moreComing)
        }
    }
}

@Suite("PostgreSQL store: share-a-copy links", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped))
struct PostgresLinksTests {
    @Test func concurrentUploadsNeverPassTheQuotaAndSnapshotsExpire() async throws {
        try await PostgresTestServer.withFreshStore { store in
            let logger = PostgresTestServer.logger
            let quota = LinkQuota(perDevicePerHour: 3, perDevicePerDay: 10, perAddressPerHour: 100)
            let uploader = LinkUploader(container: "c", deviceID: "phone", ipAddress: "203.0.113.7")
            let now: Int64 = 1_000_000_000
            // Ten uploads at once from one device, as through several instances: exactly three fit the hour.
            let decisions = try await withThrowingTaskGroup(of: LinkQuotaDecision.self) { group in
                for index in 0..<10 {
                    group.addTask {
                        let snapshot = LinkSnapshot(
                            id: "link-\(index)", container: "c", environment: .development, kind: "drive", payload: Array(#"{"n":\#(index)}"#.utf8),
                            createdAt: now, expiresAt: now + 86_400_000)
                        return try await store.createLinkSnapshots([snapshot], uploader: uploader, quota: quota, now: now, logger: logger)
                    }
                }
                return try await group.reduce(into: [LinkQuotaDecision]()) { $0.append($1) }
            }
            #expect(decisions.filter { $0 == .accepted }.count == 3)
            #expect(decisions.contains(.rejected(retryAfter: 3_600, reason: "3 links an hour from this device")))

            let accepted = try await (0..<10).asyncCompactMap { try await store.linkSnapshot(id: "link-\($0)", now: now, logger: logger) }
            #expect(accepted.count == 3 && accepted.allSatisfy { $0.kind == "drive" && $0.environment == .development })
            #expect(try await store.deleteExpiredLinkSnapshots(now: now + 1, logger: logger) == 0)
            #expect(try await store.deleteExpiredLinkSnapshots(now: now + 86_400_000, logger: logger) == 3)
            #expect(try await store.linkSnapshot(id: accepted[0].id, now: now, logger: logger) == nil)
        }
    }
}

extension Sequence where Element: Sendable {
    fileprivate func asyncCompactMap<T>(_ transform: (Element) async throws -> T?) async rethrows -> [T] {
        var results: [T] = []
        for element in self { if let value = try await transform(element) { results.append(value) } }
        return results
    }
}
