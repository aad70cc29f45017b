import CumulusClient
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusStorePostgres
import Foundation
import GhostCarExample
import Logging
import PostgresNIO
import Synchronization
import Testing

/// A store sharded over three PostgreSQL databases in two servers (`CUMULUS_TEST_POSTGRES` and
/// `CUMULUS_TEST_POSTGRES_SECOND`): users on different databases share zones both ways, and a logical shard moves while
/// a writer and a reader run. (Every other server suite also runs on the sharded store: ``TestStore/all``.)
@Suite(
    "PostgreSQL shards", .timeLimit(.minutes(10)),
    .enabled(if: TestStore.postgresURL != nil, "needs CUMULUS_TEST_POSTGRES (see README)"))
struct ShardTests {
    let logger = Logger(label: "shard-test")

    /// A world over a fresh sharded store, and an owner in another database than bob: alice, or a user made until one
    /// falls in another logical shard than bob's, whose shard is moved if the two fell in the same database.
    func world() async throws -> (TestWorld, ShardedPostgresStore, owner: TestUser) {
        let store = try await TestStore.makeShardedStore()
        let world = try await TestWorld.make(store: TestStore(name: "sharded") { _ in store })
        let bob = store.shard(of: world.bob.userRecordName)
        var owner = world.alice
        var made = 0
        while store.shard(of: owner.userRecordName) == bob {
            made += 1
            owner = try await world.user("owner\(made)")
        }
        let shard = store.shard(of: owner.userRecordName)
        if store.databaseNumber(holding: shard) == store.databaseNumber(holding: bob) {
            let other = store.databases.keys.sorted().first { $0 != store.databaseNumber(holding: bob) }!
            _ = try await store.moveShard(shard, to: other, logger: logger)
        }
        #expect(store.databaseNumber(holding: shard) != store.databaseNumber(holding: bob))
        return (world, store, owner)
    }

    @Test func usersOnDifferentDatabasesShareZonesBothWaysAndEveryDeviceSyncs() async throws {
        let (world, store, owner) = try await world()
        try await SyncEngineTests.live(world) { container in
            let (alice, bob) = (container(owner), container(world.bob))
            // Each owns a zone, synced by two devices of their own.
            try await alice.privateCloudDatabase.save(zones: [GhostCar.zone])
            try await bob.privateCloudDatabase.save(zones: [GhostCar.zone])
            let alicePhone = try Device.testing(path: try TestFiles.fresh("alice-phone.sqlite"), database: alice.privateCloudDatabase)
            let aliceTablet = try Device.testing(path: try TestFiles.fresh("alice-tablet.sqlite"), database: alice.privateCloudDatabase)
            let bobPhone = try Device.testing(path: try TestFiles.fresh("bob-phone.sqlite"), database: bob.privateCloudDatabase)
            let aliceDrive = try alicePhone.recordDrive(name: "Alice's run", distance: 5000, at: 1)
            let bobDrive = try bobPhone.recordDrive(name: "Bob's run", distance: 7000, at: 1)
            try await alicePhone.engine.sendChanges()
            try await bobPhone.engine.sendChanges()

            // Each shares their zone with the other, read-write; each accepts.
            for (sharer, participant, accepting) in [(alice, "bob@example.com", bob), (bob, "\(owner.account.name)@example.com", alice)] {
                var share = CloudShare(zoneID: GhostCar.zone)
                share.addParticipant(.emailAddress(participant), permission: .readWrite)
                share = try await sharer.privateCloudDatabase.save(share)
                #expect(try await accepting.sharedCloudDatabase.acceptShare(try #require(share.shortGUID)).participantStatus == .accepted)
            }
            let (aliceZone, bobZone) = (
                ZoneID(zoneName: GhostCar.zone.zoneName, ownerRecordName: owner.userRecordName),
                ZoneID(zoneName: GhostCar.zone.zoneName, ownerRecordName: world.bob.userRecordName)
            )
            // Each shared database lists the other's zone, though it lives in another database.
            #expect(try await bob.sharedCloudDatabase.databaseChanges(since: nil).changed == [aliceZone])
            #expect(try await alice.sharedCloudDatabase.databaseChanges(since: nil).changed == [bobZone])

            // Devices on the shared databases: each sees the other's drive, and writes into the other's zone.
            let bobOnAlices = try Device.testing(
                path: try TestFiles.fresh("bob-shared.sqlite"), database: bob.sharedCloudDatabase, scope: "shared", zone: aliceZone)
            let aliceOnBobs = try Device.testing(
                path: try TestFiles.fresh("alice-shared.sqlite"), database: alice.sharedCloudDatabase, scope: "shared", zone: bobZone)
            try await bobOnAlices.engine.fetchChanges()
            try await aliceOnBobs.engine.fetchChanges()
            #expect(try bobOnAlices.names() == [aliceDrive: "Alice's run"])
            #expect(try aliceOnBobs.names() == [bobDrive: "Bob's run"])
            let bobsWrite = try bobOnAlices.recordDrive(name: "Bob drove Alice's car", distance: 1, at: 2)
            let alicesWrite = try aliceOnBobs.recordDrive(name: "Alice drove Bob's car", distance: 2, at: 2)
            try await bobOnAlices.engine.sendChanges()
            try await aliceOnBobs.engine.sendChanges()

            // Every device of each owner syncs what the other wrote.
            for device in [alicePhone, aliceTablet] {
                try await device.engine.fetchChanges()
                #expect(try device.names() == [aliceDrive: "Alice's run", bobsWrite: "Bob drove Alice's car"])
            }
            try await bobPhone.engine.fetchChanges()
            #expect(try bobPhone.names() == [bobDrive: "Bob's run", alicesWrite: "Alice drove Bob's car"])

            // The owner stops sharing: the participant's device drops the zone, across databases too.
            var aliceShare = try #require(
                try await alice.privateCloudDatabase.share(RecordID(recordName: ShareRecord.zoneWideRecordName, zoneID: GhostCar.zone)))
            aliceShare.removeParticipant(.emailAddress("bob@example.com"))
            _ = try await alice.privateCloudDatabase.save(aliceShare)
            try await bobOnAlices.engine.fetchChanges()
            #expect(try bobOnAlices.count() == 0)
            #expect(try await bob.sharedCloudDatabase.databaseChanges(since: nil).changed.isEmpty)
            _ = store
        }
    }

    @Test func aShardMovesWhileAWriterAndAReaderRunAndNothingIsLostOrReadStale() async throws {
        let (world, store, alice) = try await world()
        let shard = store.shard(of: alice.userRecordName)
        try await world.test { client in
            try await client.createZone("Z", as: alice)
            // Bob takes part in alice's zone, and holds tokens from before the move.
            let shareAnswer = try await client.modify(
                [shareOperation(name: "cloudkit.zoneshare", root: nil, participants: [("bob@example.com", "READ_ONLY")])], as: .user(alice))
            #expect(shareAnswer.status == 200)
            let shortGUID = try #require(shareAnswer.records[0]["shortGUID"]?.stringValue)
            let accepted = try await client.resolve(shortGUID, as: .user(world.bob), accept: true)
            #expect(accepted.json["results"]?[0]?["participantStatus"]?.stringValue == "ACCEPTED")
            let bobsDatabaseToken = try #require(
                try await client.send("changes/database", as: .user(world.bob), database: "shared", body: "{}").json["syncToken"]?.stringValue)
            let zone = #"{"zoneName":"Z","ownerRecordName":"\#(alice.userRecordName)"}"#
            let bobsZoneToken = try #require(
                try await client.send("changes/zone", as: .user(world.bob), database: "shared", body: #"{"zones":[{"zoneID":\#(zone)}]}"#)
                    .json["zones"]?[0]?["syncToken"]?.stringValue)

            // The writer: numbered notes, each sent until it is acknowledged; the reader: the newest acknowledged
            // note must be there at once, each time it looks.
            let progress = MoveProgress()
            async let writer: Int = {
                var written = 0
                while !progress.stop.load(ordering: .relaxed) {
                    let answer = try await client.modify([operation("forceReplace", "n\(written + 1)")], as: .user(alice))
                    guard answer.status == 200, answer.records[0]["serverErrorCode"] == nil else {
                        #expect([503].contains(answer.status), "\(answer.json)")
                        continue
                    }
                    written += 1
                    progress.acknowledged.withLock { $0 = written }
                }
                return written
            }()
            async let reader: Int = {
                var reads = 0
                while !progress.stop.load(ordering: .relaxed) {
                    let newest = progress.acknowledged.withLock { $0 }
                    guard newest > 0 else {
                        try await Task.sleep(for: .milliseconds(5))
                        continue
                    }
                    let answer = try await client.lookup(["n\(newest)"], as: .user(alice))
                    guard answer.status == 200 else { continue }
                    if answer.records[0]["recordChangeTag"] == nil { progress.stale.withLock { $0.append("n\(newest): \(answer.json)") } }
                    reads += 1
                }
                return reads
            }()
            // Out and back: the shard leaves its database while both run, then returns to it.
            let home = store.databaseNumber(holding: shard)
            let away = store.databases.keys.sorted().first { $0 != home }!
            try await Task.sleep(for: .milliseconds(300))
            let out = try await store.moveShard(shard, to: away, logger: logger)
            try await Task.sleep(for: .milliseconds(300))
            let back = try await store.moveShard(shard, to: home, logger: logger)
            try await Task.sleep(for: .milliseconds(300))
            progress.stop.store(true, ordering: .relaxed)
            let (written, reads) = try await (writer, reader)
            #expect(out.from == home && out.to == away && back.to == home && (out.rows["records"] ?? 0) > 0)
            #expect(written > 0 && reads > 0)
            #expect(progress.stale.withLock { $0 }.isEmpty, "acknowledged writes read as missing")

            // Nothing lost: every acknowledged note is there, and the zone's feed from the start lists each once.
            let names = (1...written).map { "n\($0)" }
            let found = try await client.lookup(names, as: .user(alice))
            #expect(found.records.filter { $0["recordChangeTag"] != nil }.count == written)
            var feedNames = Set<String>()
            var token: String?
            repeat {
                let tokenField = token.map { #","syncToken":"\#($0)""# } ?? ""
                let page = try await client.send(
                    "changes/zone", as: .user(alice), body: #"{"zones":[{"zoneID":{"zoneName":"Z"}\#(tokenField)}]}"#)
                let entry = try #require(page.json["zones"]?[0])
                for record in entry["records"]?.arrayValue ?? [] { feedNames.insert(record["recordName"]?.stringValue ?? "") }
                token = entry["syncToken"]?.stringValue
                if entry["moreComing"] != .bool(true) { break }
            } while true
            #expect(feedNames.isSuperset(of: names))

            // The database the shard left holds none of its rows; and the one it came back to serves it.
            let left = try #require(store.databases[away])
            let aliceDatabase = DatabaseRef(
                container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: alice.userRecordName)
            #expect(try await left.zones(in: aliceDatabase, logger: logger).map(\.changeSequence) == [0], "only the unwritten default zone")

            // Bob's tokens from before the moves go on: his shared database lists alice's zone again, and his zone
            // token reads the notes written since, without starting over.
            let sharedChanges = try await client.send(
                "changes/database", as: .user(world.bob), database: "shared", body: #"{"syncToken":"\#(bobsDatabaseToken)"}"#)
            #expect(sharedChanges.status == 200)
            #expect(sharedChanges.zones.contains { $0["zoneID"]?["ownerRecordName"]?.stringValue == alice.userRecordName })
            let zoneChanges = try await client.send(
                "changes/zone", as: .user(world.bob), database: "shared",
                body: #"{"zones":[{"zoneID":\#(zone),"syncToken":"\#(bobsZoneToken)","resultsLimit":1}]}"#)
            #expect(zoneChanges.status == 200 && zoneChanges.json["zones"]?[0]?["serverErrorCode"] == nil, "\(zoneChanges.json)")
        }
    }

    @Test func anInterruptedMoveIsFinishedByRunningItAgain() async throws {
        let (world, store, alice) = try await world()
        let shard = store.shard(of: alice.userRecordName)
        try await world.test { client in
            try await client.createZone("Z", as: alice)
            #expect(try await client.modify([operation("create", "kept")], as: .user(alice)).status == 200)
        }
        // As a move stopped after the database it left let go: the shard is in no database.
        let home = store.databaseNumber(holding: shard)
        let away = store.databases.keys.sorted().first { $0 != home }!
        _ = try await store.moveShard(shard, to: away, logger: logger)
        try await store.databases[away]!.client.query("UPDATE shard_owners SET owned = false WHERE shard = \(shard)", logger: logger)
        try await store.directory.client.query("UPDATE shard_map SET database_number = \(home) WHERE shard = \(shard)", logger: logger)
        _ = try await store.currentMap(logger: logger)
        try await world.test { client in
            // Its requests wait, then are answered "try again later".
            let waiting = try await client.lookup(["kept"], as: .user(alice))
            #expect(waiting.status == 503 && waiting.serverErrorCode == "TRY_AGAIN_LATER")
        }
        // The same move again finishes it.
        let finished = try await store.moveShard(shard, to: away, logger: logger)
        #expect(finished.rows.isEmpty && store.databaseNumber(holding: shard) == away)
        let kept = try await world.test { client in try await client.lookup(["kept"], as: .user(alice)) }
        #expect(kept.records[0]["recordChangeTag"] != nil)

        // As a move stopped after the map named the destination, before the destination took the shard: the same
        // move again finishes it.
        try await store.databases[away]!.client.query("UPDATE shard_owners SET owned = false WHERE shard = \(shard)", logger: logger)
        #expect(try await store.moveShard(shard, to: away, logger: logger).rows.isEmpty)
        let keptAgain = try await world.test { client in try await client.lookup(["kept"], as: .user(alice)) }
        #expect(keptAgain.records[0]["recordChangeTag"] != nil)
    }
}

extension ShardTests {
    @Test func aDeploymentOnOneDatabaseKeepsItsDataWhenShardsAreAddedAndMovesItOut() async throws {
        // A deployment on one database, with a user who wrote.
        let directory = try await TestStore.makePostgresStore()
        let world = try await TestWorld.make(store: TestStore(name: "one database") { _ in directory })
        let alice = DatabaseRef(
            container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: world.alice.userRecordName)
        let batch = RecordBatch(
            database: alice, zoneName: ZoneID.defaultZoneName, atomic: false,
            operations: [RecordModification(operationType: .create, recordName: "before", recordType: "Note")], author: world.alice.userRecordName,
            deviceID: "d", timestamp: 1)
        _ = try await directory.modifyRecords(batch, logger: logger)

        // A second database, empty, given as a shard: every shard stays where the data is.
        let first = try PostgresLocation(url: try #require(TestStore.postgresURL))
        let second = try TestStore.postgresSecondURL.map { try PostgresLocation(url: $0) } ?? first
        let added = try await TestStore.makePostgresStore(location: try await TestStore.makePostgresDatabase(on: second), migrate: false)
        let store = try await ShardedPostgresStore.prepare(directory: directory, others: [added], logicalShards: 8, logger: logger)
        #expect(Set(try await store.currentMap(logger: logger)) == [0])
        #expect(try await store.records(named: ["before"], zoneName: ZoneID.defaultZoneName, in: alice, access: nil, logger: logger).count == 1)

        // The user's shard moves out: the new database gets the containers its rows refer to, and serves them.
        let shard = store.shard(of: world.alice.userRecordName)
        let move = try await store.moveShard(shard, to: 1, logger: logger)
        #expect(move.rows["records"] == 1 && move.rows["databases"] == 1)
        #expect(try await store.records(named: ["before"], zoneName: ZoneID.defaultZoneName, in: alice, access: nil, logger: logger).count == 1)
        #expect(try await added.records(named: ["before"], zoneName: ZoneID.defaultZoneName, in: alice, access: nil, logger: logger).count == 1)
        #expect(try await directory.records(named: ["before"], zoneName: ZoneID.defaultZoneName, in: alice, access: nil, logger: logger).isEmpty)

        // A database that already holds data is refused as a new shard.
        let stray = try await TestStore.makePostgresStore()
        let strayWorld = try await TestWorld.make(store: TestStore(name: "stray") { _ in stray })
        _ = try await stray.modifyRecords(
            RecordBatch(
                database: DatabaseRef(
                    container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: strayWorld.alice.userRecordName),
                zoneName: ZoneID.defaultZoneName, atomic: false,
                operations: [RecordModification(operationType: .create, recordName: "stray", recordType: "Note")],
                author: strayWorld.alice.userRecordName, deviceID: "d", timestamp: 1), logger: logger)
        await #expect(throws: StoreError.self) {
            _ = try await ShardedPostgresStore.prepare(directory: directory, others: [added, stray], logicalShards: 8, logger: logger)
        }
    }
}

extension ShardTests {
    /// As deployed: two `cumulus serve --shard` processes, and `cumulus shards move` run from a third while they serve;
    /// the instance that did not move anything follows the shard by itself.
    @Test func instancesFollowAShardTheCommandLineMoves() async throws {
        let first = try PostgresLocation(url: try #require(TestStore.postgresURL))
        let second = try TestStore.postgresSecondURL.map { try PostgresLocation(url: $0) } ?? first
        func url(_ location: PostgresLocation) -> String {
            "postgres://\(location.username):\(location.password ?? "")@\(location.host):\(location.port)/\(location.database)?sslmode=disable"
        }
        let store = [
            "--database", url(try await TestStore.makePostgresDatabase(on: first)), "--shard",
            url(try await TestStore.makePostgresDatabase(on: second)),
        ]
        func run(_ arguments: [String]) async throws -> String {
            let result = try await ServeProcessTests.run(arguments + store)
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let container = ServeClusterTests.container
        _ = try await run(["containers", "create", container])
        let apiToken = try await run(["tokens", "create", "--container", container])
        let alice = try await run(["users", "create", "alice", "--container", container])
        let query = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(try await run(["users", "token", "alice", "--container", container]))"
        let (one, two) = try await ServeClusterTests.startTwo(store)
        defer { ServeClusterTests.kill(one, two) }
        func post(_ server: ServeProcessTests.Server, _ operation: String, _ body: String) async throws -> (Int, JSONValue) {
            try await ServeClusterTests.post(server, "private", operation, query, body)
        }
        #expect(try await post(one, "records/modify", "{\"operations\":[\(ServeClusterTests.create("before"))]}").0 == 200)
        let token = try #require(try await post(two, "changes/database", "{}").1["syncToken"]?.stringValue)

        // The shard's map row, as `cumulus shards list` prints it; moved to the other database.
        let shard = ShardedPostgresStore.shard(of: alice, logicalShards: ShardLayout.defaultLogicalShards)
        let listed = try await run(["shards", "list"]).split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        let row = try #require(listed.first { $0.first == "\(shard)" })
        #expect(row.count == 3 && row[2] == "1", "\(row)")
        let destination = row[1] == "0" ? "1" : "0"
        let moved = try await run(["shards", "move", "\(shard)", "--to", destination])
        #expect(moved.hasPrefix("shard \(shard): database \(row[1]) -> \(destination);"), "\(moved)")

        // Both instances serve the shard where it is now: reads and writes, and a token from before the move.
        #expect(try await post(two, "records/modify", "{\"operations\":[\(ServeClusterTests.create("after"))]}").0 == 200)
        for server in [one, two] {
            let (status, json) = try await post(server, "records/lookup", #"{"records":[{"recordName":"before"},{"recordName":"after"}]}"#)
            #expect(status == 200 && ServeClusterTests.names(json) == ["before", "after"], "\(json)")
        }
        let (status, changes) = try await post(one, "changes/database", #"{"syncToken":"\#(token)"}"#)
        #expect(status == 200 && changes["zones"]?.arrayValue?.count == 1, "\(changes)")
        #expect(try await run(["shards", "list"]).contains("\(shard)\t\(destination)\t1"))
    }
}

extension ShardTests {
    /// One database of a sharded store stops (through a proxy): its users are answered "try again later", in bounded
    /// time; everyone else is served; when it comes back, so are they.
    @Test func oneDatabaseStoppingLeavesTheOthersServing() async throws {
        let first = try PostgresLocation(url: try #require(TestStore.postgresURL))
        let second = try TestStore.postgresSecondURL.map { try PostgresLocation(url: $0) } ?? first
        var proxied = try await TestStore.makePostgresDatabase(on: second)
        let proxy = try await TCPProxy(to: proxied.host, port: proxied.port)
        proxied.port = proxy.port
        var configuration = proxied.clientConfiguration(maximumConnections: 2)
        configuration.options.connectionIdleTimeout = .seconds(2)
        let client = PostgresClient(configuration: configuration)
        Task { await client.run() }
        // Waits long enough for a loaded machine to open a connection before the cut (2 seconds refused a write there),
        // and short enough that the cut's refusals come well within the test's bound.
        let stopping = PostgresRecordStore(client: client, connectionWait: .seconds(8), operationTimeout: .seconds(8))
        let directory = try await TestStore.makePostgresStore(location: try await TestStore.makePostgresDatabase(on: first), migrate: false)
        let store = try await ShardedPostgresStore.prepare(directory: directory, others: [stopping], logicalShards: 8, logger: logger)
        let world = try await TestWorld.make(store: TestStore(name: "sharded, one database behind a proxy") { _ in store })
        // A user in each database.
        var users: [Int: TestUser] = [:]
        for candidate in [world.alice, world.bob] { users[store.databaseNumber(holding: store.shard(of: candidate.userRecordName))] = candidate }
        var made = 0
        while users.count < 2 {
            made += 1
            let candidate = try await world.user("user\(made)")
            users[store.databaseNumber(holding: store.shard(of: candidate.userRecordName))] = candidate
        }
        let (served, stopped) = (try #require(users[0]), try #require(users[1]))
        try await world.test { client in
            for user in [served, stopped] {
                try await client.createZone("Z", as: user)
                #expect(try await client.modify([operation("create", "before")], as: .user(user)).status == 200)
            }
            proxy.cut()
            let started = ContinuousClock.now
            let refused = try await client.modify([operation("create", "during")], as: .user(stopped))
            #expect(refused.status == 503 && refused.serverErrorCode == "TRY_AGAIN_LATER", "\(refused.json)")
            #expect(ContinuousClock.now - started < .seconds(30), "answered within the store's bounds")
            #expect(try await client.lookup(["before"], as: .user(stopped)).status == 503)
            // The other database's users are served meanwhile, reads and writes.
            #expect(try await client.modify([operation("create", "during")], as: .user(served)).status == 200)
            #expect(ServeClusterTests.names(try await client.lookup(["before", "during"], as: .user(served)).json) == ["before", "during"])

            proxy.restore()
            var back = false
            for _ in 0..<120 where !back {
                back = try await client.lookup(["before"], as: .user(stopped)).status == 200
                if !back { try await Task.sleep(for: .milliseconds(250)) }
            }
            #expect(back, "the database's users are served again once it is back")
        }
        try await proxy.close()
    }
}

/// What the writer and the reader of a move share.
private final class MoveProgress: Sendable {
    /// The newest note acknowledged.
    let acknowledged = Mutex(0)
    /// Acknowledged notes a read did not find.
    let stale = Mutex<[String]>([])
    let stop = Atomic(false)
}
