import CumulusModel
import CumulusStore
import CumulusStores
import Foundation
import Logging
import PostgresNIO
import Testing

@testable import CumulusStorePostgres

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
            try await PostgresMigrations.migrate(client, logger: logger)
            let store = PostgresRecordStore(client: client, connectionWait: .seconds(30))
            try await store.createContainer("c", createdAt: 0, logger: logger)
            return try await body(store)
        }
    }

    /// A migrated store over a fresh database that lives as long as the test process; its client runs in a task of
    /// its own. Databases left by earlier test processes (named by their process ID) are dropped in the background.
    static func makeStore(maximumFieldIndexes: Int? = nil, server: PostgresLocation? = nil, connections: Int = 2, migrate: Bool = true) async throws
        -> PostgresRecordStore
    {
        let admin = try server ?? PostgresLocation(url: try #require(url))
        // Started once, not awaited: dropping hundreds of databases left by earlier runs takes minutes.
        _ = sweep
        var location = admin
        location.database = "cumulus_test_p\(getpid())_\(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16))"
        let fresh = location
        try await withClient(admin) { client in
            _ = try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(fresh.database)"), logger: logger)
        }
        // Opened as `cumulus serve` opens its store, but for tests that run side by side: few connections each, closed
        // soon when idle, so the server's connection limit is never reached, and a connection may take longer than a
        // server's 5 s to come free on two cores.
        var settings = StoreSettings()
        settings.idleTimeout = .seconds(2)
        settings.connectionWait = .seconds(30)
        settings.maximumFieldIndexes = maximumFieldIndexes
        settings.checksFirst = false
        settings.migrates = migrate
        let opened = try await StoreLocation.postgres(fresh, connections: connections).open(settings, logger: logger)
        // The store lives as long as the test process.
        Task { try? await opened.runServices() }
        return try #require(opened.store as? PostgresRecordStore)
    }

    /// A second server (`scripts/setup-postgres-second.sh`), for stores sharded over two servers.
    static let secondURL = ProcessInfo.processInfo.environment["CUMULUS_TEST_POSTGRES_SECOND"]

    /// A store sharded over three fresh databases, the third on the second server when there is one; eight logical
    /// shards dealt round them.
    static func makeShardedStore(maximumFieldIndexes: Int? = nil) async throws -> ShardedPostgresStore {
        let first = try PostgresLocation(url: try #require(url))
        let second = try secondURL.map { try PostgresLocation(url: $0) } ?? first
        var stores: [PostgresRecordStore] = []
        // The directory's pool holds a connection that listens for other instances' changes, and one for work.
        for (server, connections) in [(first, 2), (first, 1), (second, 1)] {
            stores.append(try await makeStore(maximumFieldIndexes: maximumFieldIndexes, server: server, connections: connections, migrate: false))
        }
        return try await ShardedPostgresStore.prepare(directory: stores[0], others: Array(stores.dropFirst()), logicalShards: 8, logger: logger)
    }

    /// Drops the databases of test processes that are gone.
    private static let sweep = Task {
        for url in [url, secondURL].compactMap({ $0 }) {
            guard let admin = try? PostgresLocation(url: url) else { continue }
            await sweep(admin)
        }
    }

    private static func sweep(_ admin: PostgresLocation) async {
        try? await withClient(admin) { client in
            var stale: [String] = []
            for try await name in try await client.query("SELECT datname FROM pg_database WHERE datname LIKE 'cumulus\\_test\\_p%'", logger: logger)
                .decode(String.self)
            {
                let pid = name.dropFirst("cumulus_test_p".count).prefix { $0.isNumber }
                if let pid = Int32(pid), pid != getpid(), kill(pid, 0) != 0 { stale.append(name) }
            }
            for name in stale {
                _ = try? await client.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
            }
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

@Suite("PostgreSQL locations", .timeLimit(.minutes(10)))
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

@Suite("PostgreSQL migrations", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped), .timeLimit(.minutes(10)))
struct PostgresMigrationsTests {
    @Test func instancesStartingTogetherMigrateAnEmptyDatabaseOnce() async throws {
        try await PostgresTestServer.withFreshDatabase { client, _ in
            // Eight instances start at the same moment.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<8 { group.addTask { try await PostgresMigrations.migrate(client, logger: PostgresTestServer.logger) } }
                try await group.waitForAll()
            }
            let versions = try await PostgresMigrations.appliedVersions(client, logger: PostgresTestServer.logger)
            #expect(versions == Array(1...PostgresMigrations.currentVersion))
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
            try await PostgresMigrations.migrate(client, logger: PostgresTestServer.logger)
            let future = PostgresMigrations.currentVersion + 1
            try await client.query("INSERT INTO cumulus_schema_migrations (version, name) VALUES (\(future), 'from the future')")
            await #expect {
                try await PostgresMigrations.migrate(client, logger: PostgresTestServer.logger)
            } throws: { error in
                guard let error = error as? StoreError else { return false }
                return error.code == .misconfigured && error.message.contains("version \(future), newer than this Cumulus knows")
            }
        }
    }
}

/// What only the PostgreSQL store has: connection failures named at once, concurrency across instances. Everything a
/// store must do is in the conformance suites, which run on PostgreSQL too.
@Suite("PostgreSQL store: accounts", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped), .timeLimit(.minutes(10)))
struct PostgresAccountsTests {
    let logger = PostgresTestServer.logger
    static let container = "c"

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
            var error = await #expect(throws: StoreError.self) { try await bad.check(logger: logger) }
            // A server that answers names the fault; on a machine the whole suite loads, its answer can miss the
            // 5-second connect timeout (seen in CI), which is "unreachable": asked again, as an operator would.
            for _ in 0..<5 where code != .unavailable && error?.code == .unavailable {
                error = await #expect(throws: StoreError.self) { try await bad.check(logger: logger) }
            }
            #expect(error?.code == code && error?.message.contains(words) == true, "\(String(describing: error))")
            #expect(error?.message.contains("not-the-password") == false)
        }
    }
}

@Suite("PostgreSQL store: lost connections", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped), .timeLimit(.minutes(10)))
struct PostgresLostConnectionTests {
    let logger = PostgresTestServer.logger

    /// The pool can lease a connection whose close it has not heard of yet (PostgreSQL restarting), and a statement
    /// written to a closed connection is never answered. The operation fails as unavailable at once, not after the
    /// operation timeout: a client told "try again later" retries, one left waiting gives up.
    @Test func anOperationOnAConnectionThatClosedIsAnsweredAtOnce() async throws {
        let location = try PostgresLocation(url: try #require(PostgresTestServer.url))
        let configuration = location.clientConfiguration(maximumConnections: 1)
        let client = PostgresClient(configuration: configuration)
        // The timeout stands far above the test's limit: only the watch can end the operation in time.
        let store = PostgresRecordStore(client: client, operationTimeout: .seconds(3_600))
        let connection = try await PostgresConnection.connect(
            configuration: .init(
                host: location.host, port: location.port, username: location.username, password: location.password,
                database: location.database, tls: .disable),
            id: 1, logger: logger)
        try await connection.close()
        let started = ContinuousClock.now
        let error = await #expect(throws: StoreError.self) {
            try await store.withConnectionWait { leased in
                leased(connection)
                try await connection.query("SELECT 1", logger: logger)
            }
        }
        #expect(error?.code == .unavailable && error?.message.contains("closed during the operation") == true, "\(String(describing: error))")
        #expect(ContinuousClock.now - started < .seconds(60))
    }
}

@Suite("PostgreSQL store: zones", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped), .timeLimit(.minutes(10)))
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

@Suite("PostgreSQL store: share-a-copy links", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped), .timeLimit(.minutes(10)))
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

/// Point 4 of the PostgreSQL store: two instances (two stores, each with its own connection pool) over one database.
@Suite(
    "PostgreSQL store: concurrency across instances", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped),
    .timeLimit(.minutes(10)))
struct PostgresConcurrencyTests {
    let logger = PostgresTestServer.logger
    static let alice = DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice")

    /// Runs `body` with two stores over one fresh, migrated database holding container `c` and zones `A` and `B`.
    func withTwoInstances(_ body: @Sendable (PostgresRecordStore, PostgresRecordStore, PostgresLocation) async throws -> Void)
        async throws
    {
        try await PostgresTestServer.withFreshDatabase { client, location in
            try await PostgresMigrations.migrate(client, logger: logger)
            let first = PostgresRecordStore(client: client, connectionWait: .seconds(30))
            try await first.createContainer("c", createdAt: 0, logger: logger)
            _ = try await first.modifyZones(
                ["A", "B"].map { ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: $0)) }, in: Self.alice, timestamp: 0, logger: logger)
            try await PostgresTestServer.withClient(location) { other in
                try await body(first, PostgresRecordStore(client: other, connectionWait: .seconds(30)), location)
            }
        }
    }

    /// Whether a backend of this database waits for a lock, as PostgreSQL says, within a generous deadline.
    static func someoneWaitsForALock(_ connection: PostgresConnection) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let rows = try await connection.query(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
                logger: PostgresTestServer.logger)
            for try await count in rows.decode(Int.self) where count > 0 { return true }
            try await Task.sleep(for: .milliseconds(10))
        }
        return false
    }

    static func batch(_ zone: String, _ operations: [RecordModification]) -> RecordBatch {
        RecordBatch(database: alice, zoneName: zone, atomic: true, operations: operations, author: "_alice", deviceID: "d", timestamp: 1)
    }

    @Test func concurrentCompareAndSetThroughTwoInstancesLosesNoUpdate() async throws {
        try await withTwoInstances { first, second, _ in
            let logger = PostgresTestServer.logger
            _ = try await first.modifyRecords(
                Self.batch("A", [RecordModification(operationType: .create, recordName: "counter", recordType: "T", fields: ["n": .int64(0)])]),
                logger: logger)
            // 8 writers, half through each instance, each adding 1 ten times by read, then update with the change tag.
            let tags = try await withThrowingTaskGroup(of: [String].self) { group in
                for writer in 0..<8 {
                    let store = writer.isMultiple(of: 2) ? first : second
                    group.addTask {
                        var saved: [String] = []
                        while saved.count < 10 {
                            let current = try #require(
                                try await store.records(named: ["counter"], zoneName: "A", in: Self.alice, access: nil, logger: logger)["counter"])
                            guard case .int64(let n)? = try current.fields()["n"] else { throw StoreError(.corrupt, "no counter") }
                            let result = try await store.modifyRecords(
                                Self.batch(
                                    "A",
                                    [
                                        RecordModification(
                                            operationType: .update, recordName: "counter", recordChangeTag: current.header.recordChangeTag,
                                            fields: ["n": .int64(n + 1)])
                                    ]), logger: logger)
                            if case .saved(let record) = result.first { saved.append(record.header.recordChangeTag) }
                        }
                        return saved
                    }
                }
                return try await group.reduce(into: [String]()) { $0 += $1 }
            }
            #expect(tags.count == 80 && Set(tags).count == 80, "every successful write has its own change tag")
            let final = try await second.records(named: ["counter"], zoneName: "A", in: Self.alice, access: nil, logger: logger)["counter"]
            #expect(try final?.fields()["n"] == .int64(80), "no update was lost")
        }
    }

    @Test func aFeedReaderPagingThroughConcurrentWritersNeverSkipsAChange() async throws {
        try await withTwoInstances { first, second, _ in
            let logger = PostgresTestServer.logger
            let written = try await withThrowingTaskGroup(of: [String].self) { group in
                for writer in 0..<6 {
                    let store = writer.isMultiple(of: 2) ? first : second
                    group.addTask {
                        var names: [String] = []
                        for step in 0..<15 {
                            let batch = (0..<3).map {
                                RecordModification(operationType: .create, recordName: "w\(writer)-\(step)-\($0)", recordType: "T")
                            }
                            _ = try await store.modifyRecords(Self.batch("A", batch), logger: logger)
                            names += batch.map(\.recordName)
                        }
                        return names
                    }
                }
                // A reader pages through the feed while the writers commit, through either instance in turn.
                group.addTask {
                    var seen: [String] = []
                    var position: Int64 = 0
                    for page in 0..<400 {
                        let store = page.isMultiple(of: 2) ? first : second
                        let changes = try await store.zoneChanges(
                            ZoneChangeRequest(database: Self.alice, zoneName: "A", incarnation: nil, after: position, limit: 7), logger: logger)
                        #expect(changes.sequence >= position)
                        position = changes.sequence
                        for case .changed(let record) in changes.changes { seen.append(record.header.recordName) }
                        if !changes.moreComing { try await Task.sleep(for: .milliseconds(2)) }
                    }
                    return seen.map { "seen:" + $0 }
                }
                return try await group.reduce(into: [String]()) { $0 += $1 }
            }
            let names = Set(written.filter { !$0.hasPrefix("seen:") })
            var seen = Set(written.filter { $0.hasPrefix("seen:") }.map { String($0.dropFirst(5)) })
            // Whatever the reader had not reached yet when it stopped, it finds after its last position.
            let page = try await first.zoneChanges(
                ZoneChangeRequest(database: Self.alice, zoneName: "A", incarnation: nil, after: 0, limit: 10_000), logger: logger)
            let all = Set(page.changes.compactMap { if case .changed(let record) = $0 { record.header.recordName } else { nil } })
            #expect(names.count == 270 && all == names)
            seen.formUnion(all.subtracting(seen))
            #expect(seen == names)
        }
    }

    @Test func writesToOneZoneWaitForItsLockWhileOtherZonesProceed() async throws {
        try await withTwoInstances { first, second, location in
            let logger = PostgresTestServer.logger
            let blocked: Task<[RecordModificationResult], any Error>
            // A third connection holds zone A's row lock, as a writer in the middle of its batch does.
            blocked = try await PostgresTestServer.withClient(location) { holder in
                try await holder.withTransaction(logger: logger) { connection in
                    try await connection.query("SELECT id FROM zones WHERE zone_name = 'A' FOR UPDATE", logger: logger)
                    let blocked = Task {
                        try await first.modifyRecords(
                            Self.batch("A", [RecordModification(operationType: .create, recordName: "a", recordType: "T")]), logger: logger)
                    }
                    // Zone B is written through the other instance while A is held.
                    let other = try await second.modifyRecords(
                        Self.batch("B", [RecordModification(operationType: .create, recordName: "b", recordType: "T")]), logger: logger)
                    guard case .saved = other.first else { Issue.record("zone B was not written: \(other)"); return blocked }
                    // The write to A is seen waiting for the lock (PostgreSQL says so), not guessed to be after a while.
                    let waiting = try await Self.someoneWaitsForALock(connection)
                    #expect(waiting, "the write to zone A never waited for the lock")
                    let heldRows = try await second.records(named: ["a"], zoneName: "A", in: Self.alice, access: nil, logger: logger)
                    #expect(heldRows.isEmpty, "the write to zone A waits for the lock")
                    return blocked
                }
            }
            // Once the lock is released, the waiting write completes.
            let results = try await blocked.value
            guard case .saved = results.first else {
                Issue.record("the write to zone A failed: \(results)")
                return
            }
            let written = try await second.records(named: ["a"], zoneName: "A", in: Self.alice, access: nil, logger: logger)
            #expect(written["a"]?.header.recordChangeTag == "1")
        }
    }
}

extension PostgresConcurrencyTests {
    /// A write reads its records with its zone's lock in one statement, from a snapshot taken before the lock: a writer
    /// that commits to the zone while it waits must not leave it a stale record. Here the waiting update names the tag
    /// the record had before the other writer changed it, and is refused, as it would be had it read after the lock.
    @Test func aWriteThatWaitedForItsZoneReadsWhatTheWriterBeforeItCommitted() async throws {
        try await withTwoInstances { first, _, location in
            let logger = PostgresTestServer.logger
            let created = try await first.modifyRecords(
                Self.batch("A", [RecordModification(operationType: .create, recordName: "a", recordType: "T")]), logger: logger)
            guard case .saved(let record) = created.first else {
                Issue.record("not created: \(created)")
                return
            }
            let blocked = try await PostgresTestServer.withClient(location) { holder in
                try await holder.withTransaction(logger: logger) { connection in
                    try await connection.query("SELECT id FROM zones WHERE zone_name = 'A' FOR UPDATE", logger: logger)
                    let blocked = Task {
                        try await first.modifyRecords(
                            Self.batch(
                                "A",
                                [
                                    RecordModification(
                                        operationType: .update, recordName: "a", recordType: "T", recordChangeTag: record.header.recordChangeTag,
                                        fields: ["v": .int64(2)])
                                ]), logger: logger)
                    }
                    let waiting = try await Self.someoneWaitsForALock(connection)
                    #expect(waiting, "the update never waited for the zone's lock")
                    // Another writer changes the record, as a batch does: a new sequence for it and for the zone.
                    try await connection.query(
                        """
                        UPDATE records SET change_seq = 50, fields = '{"v":{"value":1,"type":"INT64"}}'
                        WHERE record_name = 'a' AND zone_id = (SELECT id FROM zones WHERE zone_name = 'A')
                        """, logger: logger)
                    try await connection.query("UPDATE zones SET change_seq = 50 WHERE zone_name = 'A'", logger: logger)
                    return blocked
                }
            }
            let results = try await blocked.value
            guard case .failed(let failure) = results.first else {
                Issue.record("the stale update was saved: \(results)")
                return
            }
            #expect(failure.code == .conflict, "\(failure)")
        }
    }
}

@Suite("PostgreSQL store: change announcements", .enabled(if: PostgresTestServer.url != nil, PostgresTestServer.skipped), .timeLimit(.minutes(10)))
struct PostgresAnnouncementTests {
    /// An instance alone on its database sends no `NOTIFY`; once another listens, it is seen within seconds and told of
    /// every commit; when that one goes, the instance is alone again.
    @Test func anInstanceAnnouncesOnlyWhileAnotherListens() async throws {
        try await PostgresTestServer.withFreshDatabase { client, location in
            try await PostgresMigrations.migrate(client, logger: PostgresTestServer.logger)
            let store = PostgresRecordStore(client: client)
            let listening = Task { await store.listenForChanges(watching: { [] }) { _ in } }
            defer { listening.cancel() }
            /// Waits, generously, until the store's view of the other listeners is `expected`.
            @Sendable func waitUntil(announcing expected: Bool) async throws {
                let deadline = ContinuousClock.now + .seconds(60)
                while store.announcesChanges != expected, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
                #expect(store.announcesChanges == expected)
            }
            try await waitUntil(announcing: false)

            // Another instance: a connection of its own listening on the channel.
            let received = try await PostgresTestServer.withClient(location) { other in
                try await other.withConnection { connection in
                    try await connection.listen(on: "cumulus_changes") { notifications in
                        try await waitUntil(announcing: true)
                        store.announceChange(["db|c|development|private|_alice"])
                        for try await notification in notifications { return notification.payload }
                        return ""
                    }
                }
            }
            #expect(received.hasSuffix("\ndb|c|development|private|_alice"), "\(received)")
            try await waitUntil(announcing: false)
        }
    }
}
