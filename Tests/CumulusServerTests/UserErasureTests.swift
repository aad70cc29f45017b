import CumulusClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusStorePostgres
import CumulusStoreSQLite
import Foundation
import GRDB
import HTTPTypes
import Logging
import PostgresNIO
import SplitCostsExample
import Testing

/// The right to be forgotten (issue 37): `cumulus users erase` on a user who owns a shared zone and takes part in
/// someone else's share. Real devices on loopback, over both stores; over SQLite, the data directory is searched byte
/// for byte afterwards.
@Suite("Erasing a user", .timeLimit(.minutes(10)))
struct UserErasureTests {
    /// Strings only the erased user's own data holds.
    static let hers = ["Trip-AliceUnique-7Q9", "Cost-AliceUnique-4X2", "Public-AliceUnique-Z8", "Asset-AliceUnique-K3", "alice@example.com"]

    /// Which of `strings` some file under `directory` holds, byte for byte.
    static func found(_ strings: [String], under directory: URL) throws -> [String: [String]] {
        var found: [String: [String]] = [:]
        let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey])
        while let file = files?.nextObject() as? URL {
            guard (try? file.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true else { continue }
            // A file a database removed since it was listed (a table's old file, unlinked at a checkpoint) holds nothing.
            guard let bytes = try? Data(contentsOf: file) else { continue }
            for string in strings where bytes.range(of: Data(string.utf8)) != nil { found[string, default: []].append(file.lastPathComponent) }
        }
        return found
    }

    @Test(arguments: TestStore.allAndSharded)
    func anErasedOwnerAndParticipantLeavesNoTraceAndTheOthersKeepTheirOwn(_ kind: TestStore) async throws {
        let directory = URL(fileURLWithPath: try TestFiles.fresh("data")).deletingLastPathComponent()
        let storeKind =
            kind.name == TestStore.sqlite.name
            ? TestStore(name: kind.name) { _ in try SQLiteRecordStore(path: directory.appendingPathComponent("cumulus.sqlite").path) } : kind
        var configured = try await TestWorld.make(store: storeKind)
        let assets = try FileAssetStorage(directory: directory.appendingPathComponent("assets"))
        configured.configuration.assetStorage = assets
        let world = configured
        let carol = try await world.user("carol")
        let (alice, bob) = (world.alice, world.bob)
        let logger = Logger(label: "test")
        try await SyncEngineTests.live(world) { container in
            let alicePhone = try SplitCostsTests.device(container(alice), "erase-alice")
            let bobPhone = try SplitCostsTests.device(container(bob), "erase-bob")
            let carolPhone = try SplitCostsTests.device(container(carol), "erase-carol")
            for device in [alicePhone, bobPhone, carolPhone] { try await device.prepare() }

            // Alice shares a trip with Bob; Carol shares her flat with Alice, who adds a cost under it.
            let trip = try alicePhone.createGroup(Self.hers[0])
            try alicePhone.addCost(Self.hers[1], amount: 80, paidBy: "A", to: trip)
            try await alicePhone.sync()
            let tripURL = try #require(try await alicePhone.share(group: trip, with: ["bob@example.com"]).url?.absoluteString)
            try bobPhone.addCost("Bob's own", amount: 3, paidBy: "B", to: try bobPhone.createGroup("Bob's group"))
            try await bobPhone.accept(tripURL)
            try await bobPhone.sync()
            #expect(try bobPhone.costs()[Self.hers[1]] == 80)
            let flat = try carolPhone.createGroup("Flat")
            try carolPhone.addCost("Rent", amount: 900, paidBy: "C", to: flat)
            try await carolPhone.sync()
            let flatURL = try #require(try await carolPhone.share(group: flat, with: ["alice@example.com"]).url?.absoluteString)
            try await alicePhone.accept(flatURL)
            try await alicePhone.sync()
            try alicePhone.addCost("Snacks", amount: 5, paidBy: "A", to: flat)
            try await alicePhone.sync()
            try await carolPhone.sync()
            #expect(try carolPhone.costs() == ["Rent": 900, "Snacks": 5])

            // A public record and a photo of hers.
            var note = CloudRecord(recordType: "Note", recordID: RecordID(recordName: "note", zoneID: ZoneID(zoneName: ZoneID.defaultZoneName)))
            note["text"] = .string(Self.hers[2])
            _ = try await container(alice).publicCloudDatabase.modifyRecords(
                saving: [note], deleting: [], zoneID: ZoneID(zoneName: ZoneID.defaultZoneName))
            let photos = ZoneID(zoneName: "Photos")
            try await container(alice).privateCloudDatabase.save(zones: [photos])
            let file = directory.appendingPathComponent("upload.bin")
            try Data(String(repeating: Self.hers[3], count: 100).utf8).write(to: file)
            var photo = CloudRecord(recordType: "Photo", recordID: RecordID(recordName: "photo", zoneID: photos))
            photo[asset: "image"] = CloudAsset(fileURL: file)
            let saved = try await container(alice).privateCloudDatabase.modifyRecords(saving: [photo], deleting: [], zoneID: photos)
            #expect(saved.failedSaves.isEmpty)
            try FileManager.default.removeItem(at: file)

            let receipt = try await world.accounts.eraseUser(container: TestWorld.container, name: "alice", assets: assets, logger: logger)
            #expect(receipt.publicRecords == 1 && receipt.participations == 1 && receipt.sharesStopped == 1, "\(receipt)")
            #expect(receipt.zones >= 2 && receipt.records >= 3 && receipt.assetFiles.count == 1 && receipt.webAuthTokens >= 1, "\(receipt)")
            #expect(receipt.recordsAnonymized >= 1, "her cost under Carol's flat stays, by no one")
            #expect(receipt.filesScrubbed == (kind.name == TestStore.sqlite.name))

            // Bob's device drops her trip and keeps his own group; Carol keeps her flat, with the cost Alice added in it.
            try await bobPhone.sync()
            #expect(try bobPhone.costs() == ["Bob's own": 3])
            #expect(try bobPhone.groups() == ["Bob's group": ""])
            try await carolPhone.sync()
            #expect(try carolPhone.costs() == ["Rent": 900, "Snacks": 5])
            let snacks = try await container(carol).privateCloudDatabase.records(
                named: try carolPhone.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM costs") }, in: SplitCosts.zone)
            #expect(snacks.values.allSatisfy { $0.created?.userRecordName != alice.userRecordName }, "her authorship is gone")
            // And the device she wrote from: `records/lookup` showed it to the zone's owner.
            let hersStayed = snacks.values.filter { $0.created?.userRecordName == UserErasure.erasedUserRecordName }
            #expect(!hersStayed.isEmpty && hersStayed.allSatisfy { $0.created?.deviceID == UserErasure.erasureDeviceID }, "\(hersStayed)")
            // Her credentials no longer open anything (a server that cached one forgets it within its cache lifetime).
            await #expect(throws: CumulusError.self) {
                try await world.accounts.authenticate(webAuthToken: alice.webAuthToken, container: TestWorld.container, logger: logger)
            }
            #expect(try await world.store.user(userRecordName: alice.userRecordName, logger: logger) == nil)
        }
        // Over SQLite: none of her strings is in the data directory's files (database, log, assets).
        if kind.name == TestStore.sqlite.name {
            #expect(try Self.found(Self.hers, under: directory).isEmpty)
            #expect(try Self.found(["Rent", "Bob's own"], under: directory).count == 2, "the search finds what stays")
        }
    }

    /// Runs a statement in a database as PostgreSQL's superuser, as an operator would with `psql`; `nil` when this
    /// process cannot (not root, or no local server), and the test that needs it has nothing to check.
    static func asPostgres(_ statement: String, database: String) throws -> String? {
        try asPostgresWithMessages(statement, database: database)?.output
    }

    /// ``asPostgres(_:database:)``, with what the server said besides its answer (`INFO` lines, on psql's standard
    /// error).
    static func asPostgresWithMessages(_ statement: String, database: String) throws -> (output: String, messages: String)? {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/psql") else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/su")
        process.arguments = ["postgres", "-c", "psql -X -q -t -A -v ON_ERROR_STOP=1 -d \(database)"]
        let (input, output) = (Pipe(), Pipe())
        // To a file: a second pipe, left unread while the answer is read, would fill, and psql would wait on it.
        let messagesFile = try TestFiles.fresh("psql-messages")
        _ = FileManager.default.createFile(atPath: messagesFile, contents: nil)
        let messages = try FileHandle(forWritingTo: URL(fileURLWithPath: messagesFile))
        defer { try? messages.close() }
        process.standardInput = input
        process.standardOutput = output
        process.standardError = messages
        try process.run()
        // On standard input, as an operator's script is given, so psql's own commands (`\gexec`) work.
        try input.fileHandleForWriting.write(contentsOf: Data((statement + "\n").utf8))
        try input.fileHandleForWriting.close()
        let bytes = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        return (
            String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines),
            try String(contentsOfFile: messagesFile, encoding: .utf8)
        )
    }

    /// The scrub OPERATIONS.md gives, as it gives it: statistics first, then every table of the database rewritten,
    /// except the catalogs all databases share (they hold no user's data, and rewriting them locks every new
    /// connection of the server out meanwhile), each saying how many dead row versions it had to keep.
    static let scrub = """
        ANALYZE;
        SELECT format('VACUUM (FULL, VERBOSE) %s', oid::regclass) FROM pg_class WHERE relkind IN ('r', 'm') AND NOT relisshared \\gexec
        """

    /// The tables whose rewrite kept dead row versions, by psql's `VERBOSE` messages: a transaction open somewhere
    /// could still read them (one in the database, or a connection still starting, which counts for every database).
    static func keptDead(_ messages: String) -> [String] {
        // INFO:  "public.records": found 3 removable, 12 nonremovable row versions in 1 pages
        // DETAIL:  2 dead row versions cannot be removed yet.
        var table = "", kept: [String] = []
        for line in messages.split(separator: "\n") {
            if line.hasPrefix("INFO:"), line.contains("nonremovable row versions"), let name = line.split(separator: "\"").dropFirst().first {
                table = String(name)
            } else if line.hasSuffix("dead row versions cannot be removed yet."),
                let count = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) }), count > 0
            {
                kept.append(table)
            }
        }
        return kept
    }

    /// `found`'s answer with each file named by its relation, for a failure that says where the bytes stayed.
    static func relations(of found: [String: [String]], database: String) throws -> [String: [String]] {
        try found.mapValues { files in
            try files.map { file in
                let node = file.split(separator: ".").first.map(String.init) ?? file
                let name = try asPostgres(
                    "SELECT coalesce((SELECT oid::regclass::text FROM pg_class WHERE pg_relation_filenode(oid) = \(Int(node) ?? 0)), 'none')",
                    database: database)
                return "\(file) (\(name ?? "?"))"
            }
        }
    }

    /// Waits (up to two minutes) until no other session of the database holds a snapshot: the documented scrub's
    /// condition.
    static func waitForNoOpenSnapshot(database: String) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline {
            let open = try asPostgres(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()",
                database: database)
            if open == "0" { return }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// Over PostgreSQL, `cumulus users erase` then the statements OPERATIONS.md gives (`ANALYZE`, then `VACUUM (FULL)` of every table
    /// but the shared catalogs, as a superuser, with no other transaction open in the database) leave none of the user's strings in the database's files: records, a public record,
    /// a zone name, a subscription, a device, and asset bytes (in `asset_chunks`' TOAST table), searched byte for byte
    /// as the SQLite test searches its directory; what stays (Bob's record) is found.
    @Test func onPostgreSQLTheDocumentedVacuumLeavesNoByteOfTheUser() async throws {
        guard let postgres = TestStore.all.first(where: { $0.name == "PostgreSQL" }) else { return }
        let setup = try await AssetTests.AssetWorld(postgres)
        let world = setup.world
        let store = try #require(world.store as? PostgresRecordStore)
        let database = try #require(
            try await { () async throws -> String? in
                for try await name in try await store.client.query("SELECT current_database()", logger: Logger(label: "test")).decode(String.self) {
                    return name
                }
                return nil
            }())
        guard let directory = try Self.asPostgres("SHOW data_directory", database: database),
            let oid = try Self.asPostgres("SELECT oid FROM pg_database WHERE datname = current_database()", database: database)
        else {
            Issue.record("this test runs as root beside a local PostgreSQL, as .ci/run does")
            return
        }
        let files = URL(fileURLWithPath: directory).appendingPathComponent("base").appendingPathComponent(oid)
        let marks = ["ZoneAliceMark91", "FieldAliceMark22", "PublicAliceMark35", "AssetAliceMark48", "SubAliceMark57", "DeviceAliceMark66"]
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await AssetTests.$port.withValue(client.client.port) {
                try await client.createZone(marks[0], as: alice)
                // Incompressible bytes around the mark, past TOAST's threshold: stored out of line, as they are.
                var random = SystemRandomNumberGenerator()
                let bytes = (0..<6_000).map { _ in UInt8.random(in: 0...255, using: &random) } + Array(marks[3].utf8)
                let uploaded = try await AssetTests.upload(bytes, record: "photo", zone: marks[0], as: alice, client: client)
                let singleFile = try #require(uploaded.singleFile)
                let device: HTTPFields = [HTTPField.Name("X-Cumulus-Device")!: marks[5]]
                let saved = try await client.send(
                    "records/modify", as: .user(alice),
                    body:
                        #"{"zoneID":{"zoneName":"\#(marks[0])"},"operations":[\#(operation("create", "photo", fields: AssetTests.assetField(singleFile))),\#(operation("create", "note", fields: #"{"text":{"value":"\#(marks[1])"}}"#))]}"#,
                    headers: device)
                #expect(saved.records.allSatisfy { $0["serverErrorCode"] == nil }, "\(saved.json)")
                // The post's name stays in its tombstone, as OPERATIONS.md says (devices that hold it learn it is gone); its
                // fields go.
                let posted = try await client.send(
                    "records/modify", as: .user(alice), database: "public",
                    body: #"{"operations":[\#(operation("create", "post", fields: #"{"text":{"value":"\#(marks[2])"}}"#))]}"#, headers: device)
                #expect(posted.status == 200, "\(posted.json)")
                let subscribed = try await client.send(
                    "subscriptions/modify", as: .user(alice),
                    body:
                        #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"\#(marks[4])","subscriptionType":"zone","zoneID":{"zoneName":"\#(marks[0])"}}}]}"#
                )
                #expect(subscribed.status == 200, "\(subscribed.json)")
                // What stays: Bob's own record.
                try await client.createZone("Bobs", as: bob)
                _ = try await client.modify(
                    [operation("create", "kept", fields: #"{"text":{"value":"BobKeepsMark77"}}"#)], zone: "Bobs", as: .user(bob))
            }
        }
        // Statistics sampled while her rows live, as autovacuum's ANALYZE takes them.
        #expect(try Self.asPostgres("ANALYZE", database: database) != nil)
        let receipt = try await world.accounts.eraseUser(
            container: TestWorld.container, name: "alice", assets: setup.storage, logger: Logger(label: "test"))
        #expect(receipt.zones >= 1 && receipt.assetFiles.count == 1 && receipt.publicRecords == 1 && receipt.devices >= 1, "\(receipt)")
        // The documented steps. ANALYZE first: the planner's statistics (pg_statistic) sample column values, and the
        // samples an automatic ANALYZE took while her rows lived are replaced by it, then rewritten away by the vacuum.
        // A vacuum keeps what a transaction still open might read: one in the database (under the loaded suite,
        // autovacuum's own ANALYZE), or a connection to any database still starting, whose snapshot counts for all of
        // them (the suites beside this one open connections all the time). So, as OPERATIONS.md says, it runs when
        // none is open in the database, and again while a table says it kept dead row versions. (Without these steps
        // every mark stays in the files; checked by hand, not here, as it needs a checkpoint before the erasure,
        // which slows the suites beside this one.)
        var (left, kept): ([String: [String]], [String]) = ([:], [])
        let deadline = ContinuousClock.now + .seconds(240)
        try await Self.waitForNoOpenSnapshot(database: database)
        let scrubbed = try #require(try Self.asPostgresWithMessages(Self.scrub, database: database))
        kept = Self.keptDead(scrubbed.messages)
        // Only the tables that kept some, again, as OPERATIONS.md says: a whole pass again would meet another starting
        // connection, under this suite's load, as likely as the first did.
        while !kept.isEmpty && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(200))
            try await Self.waitForNoOpenSnapshot(database: database)
            let again = kept.map { "VACUUM (FULL, VERBOSE) \($0);" }.joined(separator: "\n")
            kept = Self.keptDead(try #require(try Self.asPostgresWithMessages(again, database: database)).messages)
        }
        left = try Self.found(marks, under: files)
        #expect(kept.isEmpty, "tables whose rewrite kept dead row versions until the end: \(kept)")
        let named = try Self.relations(of: left, database: database)
        #expect(left.isEmpty, "left in the database's files: \(named)")
        #expect(try Self.found(["BobKeepsMark77"], under: files).count == 1, "the search finds what stays")
    }
}
