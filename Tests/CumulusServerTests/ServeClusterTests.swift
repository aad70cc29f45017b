import AsyncHTTPClient
import CumulusModel
import CumulusStorePostgres
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// Two real `cumulus serve` processes over one PostgreSQL database, as a deployment behind a load balancer runs them.
@Suite(
    "Two cumulus instances over one PostgreSQL", .serialized,
    .enabled(if: TestStore.postgresURL != nil, "needs CUMULUS_TEST_POSTGRES (see README)"), .timeLimit(.minutes(10)))
struct ServeClusterTests {
    static let container = "iCloud.com.example.cluster"

    /// A fresh database's URL, and the container, users and tokens made with the command line against it.
    struct Cluster {
        var database: String
        var apiToken: String
        var alice: String
        var bob: String

        func query(_ webToken: String) -> String { "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)" }
    }

    static func makeCluster() async throws -> Cluster {
        let location = try await TestStore.makePostgresDatabase()
        let serverURL = try #require(TestStore.postgresURL)
        var components = try #require(URLComponents(string: serverURL))
        components.path = "/" + location.database
        let database = try #require(components.string)
        func run(_ arguments: [String]) async throws -> String {
            let result = try await ServeProcessTests.run(arguments + ["--database", database])
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        _ = try await run(["containers", "create", container])
        let apiToken = try await run(["tokens", "create", "--container", container])
        for name in ["alice", "bob"] { _ = try await run(["users", "create", name, "--container", container, "--email", "\(name)@example.com"]) }
        return Cluster(
            database: database, apiToken: apiToken, alice: try await run(["users", "token", "alice", "--container", container]),
            bob: try await run(["users", "token", "bob", "--container", container]))
    }

    static func post(_ server: ServeProcessTests.Server, _ database: String, _ operation: String, _ query: String, _ body: String) async throws
        -> (Int, JSONValue)
    {
        // A generous deadline: only a request that never answers should fail, on a machine the whole suite loads (30 s
        // was once too short for a fresh instance's first write in the suite's first minute).
        try await ServeProcessTests.post(
            "\(server.url)/database/1/\(container)/development/\(database)/\(operation)?\(query)", body, timeout: .seconds(120))
    }

    /// Two instances over the cluster's database, started with the same arguments.
    static func startTwo(_ arguments: [String]) async throws -> (ServeProcessTests.Server, ServeProcessTests.Server) {
        (try await ServeProcessTests.Server.start(arguments: arguments), try await ServeProcessTests.Server.start(arguments: arguments))
    }

    static func kill(_ servers: ServeProcessTests.Server...) {
        for server in servers { _ = server.stop(SIGKILL) }
    }

    static func create(_ name: String, type: String = "Item", fields: String = "{}", parent: String? = nil) -> String {
        let parentPart = parent.map { #","parent":{"recordName":"\#($0)"}"# } ?? ""
        return #"{"operationType":"create","record":{"recordName":"\#(name)","recordType":"\#(type)","fields":\#(fields)\#(parentPart)}}"#
    }

    static func names(_ json: JSONValue, key: String = "records") -> Set<String> {
        Set((json[key]?.arrayValue ?? []).compactMap { $0["serverErrorCode"] == nil ? $0["recordName"]?.stringValue : nil })
    }

    @Test func anyInstanceAnswersForEveryOtherAndOneCanBeKilled() async throws {
        let cluster = try await Self.makeCluster()
        let (first, second) = try await Self.startTwo(["--database", cluster.database])
        defer { Self.kill(first, second) }
        #expect(first.url.hasPrefix("http://") && second.url.hasPrefix("http://") && first.url != second.url)
        let alice = cluster.query(cluster.alice)
        let bob = cluster.query(cluster.bob)
        let lists = #""zoneID":{"zoneName":"Lists"}"#

        // Written through the first instance…
        let (zoneStatus, _) = try await Self.post(
            first, "private", "zones/modify", alice, #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Lists"}}}]}"#)
        #expect(zoneStatus == 200)
        let (saveStatus, saved) = try await Self.post(
            first, "private", "records/modify", alice,
            #"{\#(lists),"operations":[\#(Self.create("list", type: "List", fields: #"{"name":{"value":"Weekend"}}"#)),\#(Self.create("milk", parent: "list")),\#(Self.create("diary", type: "Note"))]}"#
        )
        #expect(saveStatus == 200 && Self.names(saved) == ["list", "milk", "diary"], "\(saved)")

        // …is read, queried and fed through the second, and a change token of one is good at the other.
        let (_, lookedUp) = try await Self.post(second, "private", "records/lookup", alice, #"{\#(lists),"records":[{"recordName":"list"}]}"#)
        #expect(lookedUp["records"]?[0]?["fields"]?["name"]?["value"] == .string("Weekend"))
        let (_, queried) = try await Self.post(second, "private", "records/query", alice, #"{\#(lists),"query":{"recordType":"List"}}"#)
        #expect(Self.names(queried) == ["list"])
        let (_, fed) = try await Self.post(first, "private", "changes/zone", alice, #"{"zones":[{\#(lists)}]}"#)
        #expect(Self.names(fed["zones"]?[0] ?? .null) == ["list", "milk", "diary"])
        let token = try #require(fed["zones"]?[0]?["syncToken"]?.stringValue)
        _ = try await Self.post(first, "private", "records/modify", alice, #"{\#(lists),"operations":[\#(Self.create("eggs", parent: "list"))]}"#)
        let (_, later) = try await Self.post(second, "private", "changes/zone", alice, #"{"zones":[{\#(lists),"syncToken":"\#(token)"}]}"#)
        #expect(Self.names(later["zones"]?[0] ?? .null) == ["eggs"])

        // Conflicting writers through both instances converge: every increment is kept (change tags compare-and-set).
        _ = try await Self.post(
            first, "private", "records/modify", alice,
            #"{\#(lists),"operations":[\#(Self.create("counter", type: "Counter", fields: #"{"n":{"value":0}}"#))]}"#)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                let server = writer.isMultiple(of: 2) ? first : second
                group.addTask {
                    var done = 0
                    while done < 8 {
                        let (_, current) = try await Self.post(
                            server, "private", "records/lookup", alice, #"{\#(lists),"records":[{"recordName":"counter"}]}"#)
                        let record = try #require(current["records"]?[0])
                        guard case .number(let n)? = record["fields"]?["n"]?["value"] else { throw CancellationError() }
                        let tag = record["recordChangeTag"]?.stringValue ?? ""
                        let (_, result) = try await Self.post(
                            server, "private", "records/modify", alice,
                            #"{\#(lists),"operations":[{"operationType":"update","record":{"recordName":"counter","recordType":"Counter","recordChangeTag":"\#(tag)","fields":{"n":{"value":\#((Int(n) ?? -1) + 1)}}}}]}"#
                        )
                        if result["records"]?[0]?["serverErrorCode"] == nil { done += 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        let (_, counter) = try await Self.post(first, "private", "records/lookup", alice, #"{\#(lists),"records":[{"recordName":"counter"}]}"#)
        #expect(counter["records"]?[0]?["fields"]?["n"]?["value"] == .number("32"))

        // A share saved and accepted through the first instance is enforced by the second.
        let share =
            #"{"operationType":"create","record":{"recordName":"share-1","recordType":"cloudkit.share","fields":{},"forRecord":{"recordName":"list"},"publicPermission":"NONE","participants":[{"type":"USER","permission":"READ_ONLY","acceptanceStatus":"INVITED","userIdentity":{"lookupInfo":{"emailAddress":"bob@example.com"}}}]}}"#
        let (_, shared) = try await Self.post(first, "private", "records/modify", alice, #"{\#(lists),"operations":[\#(share)]}"#)
        let guid = try #require(shared["records"]?[0]?["shortGUID"]?.stringValue, "\(shared)")
        let (acceptStatus, _) = try await Self.post(first, "public", "records/accept", bob, #"{"shortGUIDs":[{"value":"\#(guid)"}]}"#)
        #expect(acceptStatus == 200)
        let owner = try #require(fed["zones"]?[0]?["zoneID"]?["ownerRecordName"]?.stringValue)
        let ownerZone = #""zoneID":{"zoneName":"Lists","ownerRecordName":"\#(owner)"}"#
        let (_, bobSees) = try await Self.post(
            second, "shared", "records/lookup", bob, #"{\#(ownerZone),"records":[{"recordName":"milk"},{"recordName":"diary"}]}"#)
        #expect(Self.names(bobSees) == ["milk"], "\(bobSees)")
        let (_, bobWrites) = try await Self.post(
            second, "shared", "records/modify", bob,
            #"{\#(ownerZone),"operations":[{"operationType":"forceUpdate","record":{"recordName":"milk","recordType":"Item","fields":{"x":{"value":1}}}}]}"#
        )
        #expect(bobWrites["records"]?[0]?["serverErrorCode"] != nil, "a read-only participant cannot write: \(bobWrites)")

        // An asset: the upload URL one instance signs works on the other, whose bytes go to PostgreSQL; the record's
        // download URL, from either, serves the bytes from either.
        func on(_ server: ServeProcessTests.Server, _ url: String) throws -> String {
            guard let path = url.range(of: "/assets/1/") else { throw URLError(.badURL) }
            return server.url + url[path.lowerBound...]
        }
        let (_, tokens) = try await Self.post(
            first, "private", "assets/upload", alice, #"{\#(lists),"tokens":[{"recordName":"photo","fieldName":"image"}]}"#)
        let uploadURL = try #require(tokens["tokens"]?[0]?["url"]?.stringValue, "\(tokens)")
        let photo = String(repeating: "pixels ", count: 300_000)
        let (uploadStatus, uploaded) = try await ServeProcessTests.post(try on(second, uploadURL), photo, timeout: .seconds(30))
        #expect(uploadStatus == 200, "\(uploaded)")
        let singleFile = String(decoding: try #require(uploaded["singleFile"]).jsonBytes, as: UTF8.self)
        let (_, savedPhoto) = try await Self.post(
            second, "private", "records/modify", alice,
            #"{\#(lists),"operations":[\#(Self.create("photo", type: "Photo", fields: #"{"image":{"type":"ASSETID","value":\#(singleFile)}}"#))]}"#)
        #expect(savedPhoto["records"]?[0]?["serverErrorCode"] == nil, "\(savedPhoto)")
        let (_, fetchedPhoto) = try await Self.post(first, "private", "records/lookup", alice, #"{\#(lists),"records":[{"recordName":"photo"}]}"#)
        let downloadURL = try #require(fetchedPhoto["records"]?[0]?["fields"]?["image"]?["value"]?["downloadURL"]?.stringValue)
        let download = try await HTTPClient.shared.execute(HTTPClientRequest(url: try on(second, downloadURL)), timeout: .seconds(30))
        #expect(download.status == .ok)
        #expect(String(buffer: try await download.body.collect(upTo: 8 << 20)) == photo)

        // The first instance is killed while atomic batches go through it from six writers at once; the second keeps
        // serving, and each batch is there whole or not at all. A batch sent but never answered (not refused: the
        // instance was still there) was in flight at the kill, and the check proves something only if one was: when a
        // kill found none (a loaded machine can leave every writer between two requests), an instance is started and
        // killed again, up to five times.
        struct Attempt: Sendable {
            var names: [String]
            var answered: Bool
            var inFlight: Bool
        }
        var attempts: [Attempt] = []
        for trial in 0..<5 {
            let victim = trial == 0 ? first : try await ServeProcessTests.Server.start(arguments: ["--database", cluster.database])
            let answeredSoFar = PostgresOutageTests.Shared(0)
            let trialAttempts = await withTaskGroup(of: [Attempt].self) { group in
                for writer in 0..<6 {
                    group.addTask {
                        var attempts: [Attempt] = []
                        // Until the instance is gone: the last batch is the one the kill cut off.
                        for batch in 0..<100_000 {
                            let names = (0..<100).map { "k\(trial)-\(writer)-\(batch)-\($0)" }
                            let body = #"{\#(lists),"operations":[\#(names.map { Self.create($0) }.joined(separator: ","))]}"#
                            do {
                                let (status, _) = try await Self.post(victim, "private", "records/modify", alice, body)
                                attempts.append(Attempt(names: names, answered: status == 200, inFlight: false))
                                answeredSoFar.withLock { $0 += 1 }
                            } catch {
                                attempts.append(Attempt(names: names, answered: false, inFlight: !"\(error)".lowercased().contains("refused")))
                                break
                            }
                        }
                        return attempts
                    }
                }
                group.addTask {
                    // Killed once the writers are well under way, however long a loaded machine takes to get there.
                    while answeredSoFar.withLock({ $0 }) < 12 { try? await Task.sleep(for: .milliseconds(5)) }
                    _ = victim.stop(SIGKILL)
                    return []
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
            attempts += trialAttempts
            if trialAttempts.contains(where: { !$0.answered && $0.inFlight }) { break }
        }
        let (afterStatus, after) = try await Self.post(
            second, "private", "records/modify", alice, #"{\#(lists),"operations":[\#(Self.create("after-the-kill"))]}"#)
        #expect(afterStatus == 200 && Self.names(after) == ["after-the-kill"])
        #expect(attempts.contains { !$0.answered && $0.inFlight }, "the kill came while a batch was being written")
        for attempt in attempts {
            let body = #"{\#(lists),"records":[\#(attempt.names.map { #"{"recordName":"\#($0)"}"# }.joined(separator: ","))]}"#
            let (_, found) = try await Self.post(second, "private", "records/lookup", alice, body)
            let count = Self.names(found).count
            if attempt.answered {
                #expect(count == attempt.names.count, "an acknowledged batch was lost: \(count) of \(attempt.names.count)")
            } else {
                #expect(count == 0 || count == attempt.names.count, "a batch was half applied: \(count) of \(attempt.names.count)")
            }
        }
    }

    @Test func writersAddingTheSameFieldsThroughTwoInstancesAtOnceAllSucceed() async throws {
        // Each instance orders a record's fields as its own process hashes them; the schema's rows must still be taken
        // in one order, or two first writes of a type lock them in opposite orders and PostgreSQL aborts one.
        let cluster = try await Self.makeCluster()
        let (first, second) = try await Self.startTwo(["--database", cluster.database])
        defer { Self.kill(first, second) }
        let fields = "{" + (0..<40).map { #""field\#($0)":{"value":\#($0)}"# }.joined(separator: ",") + "}"
        for round in 0..<10 {
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for (server, user) in [(first, cluster.alice), (second, cluster.bob)] {
                    group.addTask {
                        let body = #"{"operations":[\#(Self.create("wide-\(round)", type: "Wide\(round)", fields: fields))]}"#
                        return try await Self.post(server, "private", "records/modify", cluster.query(user), body).0
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses == [200, 200], "round \(round): \(statuses)")
        }
    }

    @Test func aPostgreSQLOutageIsTryAgainLaterAndTheInstanceReconnectsByItself() async throws {
        // The instance reaches PostgreSQL through a proxy the test can cut, as a PostgreSQL restart would.
        let cluster = try await Self.makeCluster()
        var components = try #require(URLComponents(string: cluster.database))
        let proxy = try await TCPProxy(to: try #require(components.host), port: components.port ?? 5432)
        components.port = proxy.port
        let server = try await ServeProcessTests.Server.start(arguments: ["--database", try #require(components.string)])
        defer { _ = server.stop(SIGKILL) }
        let alice = cluster.query(cluster.alice)
        func write(_ name: String) async throws -> (Int, JSONValue) {
            try await Self.post(server, "private", "records/modify", alice, #"{"operations":[\#(Self.create(name))]}"#)
        }
        #expect(try await write("before").0 == 200)

        proxy.cut()
        // Every request during the outage is answered, quickly, with 503 TRY_AGAIN_LATER and a retryAfter: none hangs
        // until the pool gives up, none crashes the instance.
        for attempt in 0..<3 {
            let started = ContinuousClock.now
            let (status, json) = try await ServeProcessTests.post(
                "\(server.url)/database/1/\(Self.container)/development/private/records/modify?\(alice)",
                #"{"operations":[\#(Self.create("during-" + String(attempt)))]}"#, timeout: .seconds(60))
            #expect(status == 503, "\(json)")
            #expect(json["serverErrorCode"]?.stringValue == "TRY_AGAIN_LATER")
            #expect(json["retryAfter"] != nil)
            #expect(ContinuousClock.now - started < .seconds(15))
        }

        proxy.restore()
        // The instance reconnects by itself: a client retrying as told succeeds again.
        var recovered = false
        let deadline = ContinuousClock.now + .seconds(60)
        while !recovered, ContinuousClock.now < deadline {
            recovered = (try? await write("after"))?.0 == 200
            if !recovered { try await Task.sleep(for: .milliseconds(500)) }
        }
        #expect(recovered, "the instance did not reconnect within a minute")
        let (_, found) = try await Self.post(
            server, "private", "records/lookup", alice, #"{"records":[{"recordName":"before"},{"recordName":"after"},{"recordName":"during-0"}]}"#)
        #expect(Self.names(found) == ["before", "after"], "nothing answered 503 was written")
        try await proxy.close()
    }

    /// Both ways instances wake each other: `NOTIFY`, and each watching the databases its connections wait on.
    @Test(arguments: ["notify", "watch"])
    func aWriteThroughOneInstanceReachesACourierPollOnTheOther(fanOut: String) async throws {
        let cluster = try await Self.makeCluster()
        // Polls look at the feeds again only every minute, and this one waits up to 50 s: answered before the client
        // gives up (45 s), it was woken through the other instance (its NOTIFY, or this one's watch), not by a look of
        // its own.
        let arguments = ["--database", cluster.database, "--push-recheck-interval", "60", "--fan-out", fanOut]
        let (first, second) = try await Self.startTwo(arguments)
        defer { Self.kill(first, second) }
        let alice = cluster.query(cluster.alice)
        let (subscribed, _) = try await Self.post(
            first, "private", "subscriptions/modify", alice,
            #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"all","subscriptionType":"database"}}]}"#)
        #expect(subscribed == 200)
        let (created, token) = try await ServeProcessTests.post(
            "\(second.url)/device/1/\(Self.container)/development/tokens/create?\(alice)", "{}", timeout: .seconds(30))
        #expect(created == 200)
        let courier = try #require(token["webcourierURL"]?.stringValue)

        // The poll waits on the second instance; the write commits through the first, whose announcement wakes it.
        async let waiting = HTTPClient.shared.execute(HTTPClientRequest(url: courier + "?timeout=50"), timeout: .seconds(45))
        // Once the poll has looked at the feeds, only a wake-up through the other instance can answer it.
        try await second.waitForMetric("cumulus_push_idle_connections", toBe: 1)
        let (written, _) = try await Self.post(first, "private", "records/modify", alice, #"{"operations":[\#(Self.create("note"))]}"#)
        #expect(written == 200)
        let response = try await waiting
        let body = try await response.body.collect(upTo: 1 << 20)
        let notification = try JSONValue(parsing: Array(body.readableBytesView))
        #expect(notification["ck"]?["met"]?["sid"]?.stringValue == "all", "\(notification)")
    }
}
