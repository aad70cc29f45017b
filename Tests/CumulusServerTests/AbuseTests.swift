import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import GRDB
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOPosix
import Synchronization
import Testing

@testable import CumulusServer
@testable import CumulusServerHTTP
@testable import CumulusStoreSQLite

/// What one holder of the app's API token could do at scale, and the limits that stop it (`docs/SECURITY.md`).
@Suite("Abuse resistance", .timeLimit(.minutes(10)))
struct AbuseTests {
    // MARK: - Sign-in and sign-up

    @Test(arguments: TestStore.all)
    func signInIsThrottledPerAccountAndPerAddressAlikeForUnknownNames(_ store: TestStore) async throws {
        // 500 s into a 15-minute window: the minute windows counted meanwhile must not forget the longer one.
        let time = LockedTime(Date(timeIntervalSince1970: 1_800_000_500))
        var prepared = try await TestWorld.make(store: store, clock: WallClock { time.now })
        prepared.configuration.signInLimits = SignInLimits(
            attemptsPerAccount: 3, accountWindow: .seconds(900), attemptsPerAddress: 8, addressWindow: .seconds(60), signUpsPerAddress: 2,
            signUpWindow: .seconds(3600))
        let world = prepared
        try await world.test { client in
            let base = "/auth/1/\(TestWorld.container)/development"
            func signIn(_ name: String, _ password: String) async throws -> CloudKitResponse {
                try await client.raw("\(base)/signin?ckAPIToken=\(world.apiToken)", body: #"{"name":"\#(name)","password":"\#(password)"}"#)
            }
            for _ in 0..<3 { #expect(try await signIn("alice", "guess").status == 401) }
            // The fourth attempt is refused before the password is looked at, even the right one.
            let throttled = try await signIn("alice", "password-alice")
            #expect(throttled.status == 429)
            #expect(throttled.serverErrorCode == "THROTTLED")
            let retryAfter = try #require(throttled.json["retryAfter"].flatMap { if case .number(let text) = $0 { Int(text) } else { nil } })
            #expect(retryAfter == 400, "the rest of the 15-minute window")
            #expect(throttled.headers[.retryAfter] == String(retryAfter))
            #expect(throttled.reason?.hasPrefix("too many sign-in attempts") == true)

            // An unknown name meets the same throttle at the same count: it tells nothing about who has an account.
            for _ in 0..<3 { #expect(try await signIn("nobody", "guess").status == 401) }
            let unknown = try await signIn("nobody", "guess")
            #expect(unknown.status == 429)
            #expect(unknown.reason == throttled.reason)

            // Another account is served, until this address has made its eight attempts in the minute.
            #expect(try await signIn("bob", "password-bob").status == 200)
            #expect(try await signIn("carol", "guess").status == 401)
            let address = try await signIn("dave", "guess")
            #expect(address.status == 429)
            #expect(address.reason?.contains("at most 8 per 60 s") == true)

            // When the windows end, Alice signs in.
            time.advance(by: 400)
            #expect(try await signIn("alice", "password-alice").status == 200)

            // Sign-ups from one address: two an hour here.
            for name in ["erin", "frank"] {
                #expect(
                    try await client.raw("\(base)/signup?ckAPIToken=\(world.apiToken)", body: #"{"name":"\#(name)","password":"correct horse"}"#)
                        .status == 201)
            }
            let third = try await client.raw("\(base)/signup?ckAPIToken=\(world.apiToken)", body: #"{"name":"gina","password":"correct horse"}"#)
            #expect(third.status == 429)
            #expect(third.serverErrorCode == "THROTTLED")
            #expect(try await world.store.user(container: TestWorld.container, name: "gina", logger: .init(label: "test")) == nil)
        }
    }

    /// Ten wrong passwords from ten addresses once locked the owner out. Failures count per name and address, and per
    /// name across addresses with a higher limit: a stranger's failures lock the name out at their own address only.
    @Test(arguments: TestStore.all)
    func aStrangerFailingOnPurposeDoesNotLockTheOwnerOut(_ store: TestStore) async throws {
        var prepared = try await TestWorld.make(store: store)
        prepared.configuration.signInLimits = SignInLimits(attemptsPerAccount: 6, attemptsPerAccountAndAddress: 2)
        let world = prepared
        try await world.test { client in
            let port = try #require(client.client.port)
            func signIn(_ password: String, from address: String) async throws -> Int? {
                let body = #"{"name":"alice","password":"\#(password)"}"#
                let head =
                    "POST /auth/1/\(TestWorld.container)/development/signin?ckAPIToken=\(world.apiToken) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    + "Connection: close\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
                // A loaded two-core machine may take long over scrypt: the answer is what is tested, not its speed.
                return try await RawHTTPClient.exchange(port: port, head: head, body: Array(body.utf8), readTimeout: 180, source: address).statusCode
            }
            // Each answer is compared as a value, so a failure shows what came instead (`nil`: none within the timeout).
            func expectSignIn(_ password: String, from address: String, answers expected: Int, _ step: String) async throws {
                let status = try await signIn(password, from: address)
                #expect(status == expected, "\(step)")
            }
            // A stranger at one address: two failures, then refused there.
            for (index, expected) in [401, 401, 429].enumerated() {
                try await expectSignIn("guess", from: "127.0.0.2", answers: expected, "the stranger's guess \(index + 1)")
            }
            // The owner, at hers, signs in.
            try await expectSignIn("password-alice", from: "127.0.0.1", answers: 200, "the owner after one stranger")
            // More strangers at more addresses raise the name's count across addresses...
            for (index, expected) in [401, 401].enumerated() {
                try await expectSignIn("guess", from: "127.0.0.3", answers: expected, "the second stranger's guess \(index + 1)")
            }
            try await expectSignIn("password-alice", from: "127.0.0.1", answers: 200, "the owner after two strangers")
            // ...up to its limit, the most guessing one name gets: then everyone waits for the window.
            try await expectSignIn("guess", from: "127.0.0.4", answers: 429, "a third stranger past the name's limit")
            try await expectSignIn("password-alice", from: "127.0.0.1", answers: 429, "the owner past the name's limit")
        }
    }

    /// A refused sign-in writes nothing (the instance remembers the limit is reached until its window ends) and is
    /// answered after the refusal delay: a flood of them from one address grew SQLite's log by 43 to 64 MB in 10 s.
    @Test func refusedSignInsWriteNothingAndWait() async throws {
        let store = try SQLiteRecordStore(path: TestFiles.fresh("cumulus.sqlite"))
        var prepared = try await TestWorld.make(store: TestStore(name: "SQLite, inspected") { _ in store })
        prepared.configuration.signInLimits = SignInLimits(attemptsPerAccountAndAddress: 2)
        prepared.configuration.requestLimits.refusalDelay = .milliseconds(250)
        let world = prepared
        @Sendable func counted() async throws -> Int {
            try await store.writer.read { db in try Int.fetchOne(db, sql: "SELECT COALESCE(SUM(count), 0) FROM attempt_counts") ?? 0 }
        }
        try await world.test { client in
            let base = "/auth/1/\(TestWorld.container)/development"
            @Sendable func signIn() async throws -> CloudKitResponse {
                try await client.raw("\(base)/signin?ckAPIToken=\(world.apiToken)", body: #"{"name":"alice","password":"guess"}"#)
            }
            for _ in 0..<2 { #expect(try await signIn().status == 401) }
            #expect(try await signIn().status == 429)
            let before = try await counted()
            let started = ContinuousClock.now
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<12 { group.addTask { try await signIn().status } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 429, count: 12))
            #expect(ContinuousClock.now - started >= .milliseconds(250), "refused before the delay")
            #expect(try await counted() == before, "a refused attempt counted in the store")
        }
    }

    // MARK: - Queries

    /// Anyone holds the API token, so an anonymous query never makes an index, even on a field records hold; a
    /// signed-in user's query may.
    @Test(arguments: TestStore.all)
    func anonymousQueriesMakeNoIndex(_ kind: TestStore) async throws {
        let store = try await kind.make()
        let world = try await TestWorld.make(store: TestStore(name: "\(kind.name), inspected") { _ in store })
        @Sendable func fieldIndexes() async throws -> [String] {
            try await store.fieldIndexes(logger: Logger(label: "test")).map { $0.field ?? $0.indexName }
        }
        try await world.test { client in
            let post = #"{"operationType":"create","record":{"recordName":"p","recordType":"Post","fields":{"title":{"value":"hello"}}}}"#
            #expect(
                try await client.send("records/modify", as: .user(world.alice), database: "public", body: #"{"operations":[\#(post)]}"#).status == 200
            )
            let query = #"{"query":{"recordType":"Post","filterBy":[{"fieldName":"title","comparator":"EQUALS","fieldValue":{"value":"hello"}}]}}"#
            let anonymous = try await client.send("records/query", as: .anonymous, database: "public", body: query)
            #expect(anonymous.records.count == 1)
            #expect(try await fieldIndexes().isEmpty)
            // A signed-in user's public-database query makes none either; their private-database query does.
            #expect(try await client.send("records/query", as: .user(world.alice), database: "public", body: query).records.count == 1)
            #expect(try await fieldIndexes().isEmpty)
            _ = try await client.send("records/modify", as: .user(world.alice), body: #"{"operations":[\#(post)]}"#)
            #expect(try await client.send("records/query", as: .user(world.alice), body: query).records.count == 1)
            #expect(try await fieldIndexes() == ["title"])
        }
    }

    // MARK: - Sharing

    /// Every write a read-write participant can make answers the same for a record outside the share as for a name
    /// that does not exist, except creating a record under a taken name (`EXISTS`, as any taken name answers).
    @Test(arguments: TestStore.all)
    func participantsCannotTellUnsharedRecordsFromMissingOnes(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify(
                [
                    operation("create", "list", type: "List"), operation("create", "secret", type: "Item", fields: #"{"text":{"value":"t0p"}}"#),
                ], zone: "Lists", as: .user(alice))
            let created = try await client.modify(
                [shareOperation(participants: [("bob@example.com", "READ_WRITE")])], zone: "Lists", as: .user(alice))
            let guid = try #require(created.records.first?["shortGUID"]?.stringValue)
            _ = try await client.resolve(guid, as: .user(bob), accept: true)
            let zone = client.ownerZone("Lists", owner: alice)

            /// Bob's answer to a batch that names `target`, with the name replaced so two answers compare.
            func probe(_ target: String, _ operations: (String) -> [String]) async throws -> [String] {
                let response = try await client.send(
                    "records/modify", as: .user(bob), database: "shared",
                    body: #"{\#(zone),"operations":[\#(operations(target).joined(separator: ","))]}"#)
                #expect(response.status == 200, "\(response.json)")
                return response.records.map { record in
                    let code = record["serverErrorCode"]?.stringValue ?? (record["deleted"] == .bool(true) ? "deleted" : "saved")
                    return code + " " + (record["reason"]?.stringValue ?? "").replacingOccurrences(of: target, with: "NAME")
                }
            }
            let parent = #","parent":{"recordName":"list"}"#
            let probes: [(String, (String) -> [String])] = [
                (
                    "a VALIDATE reference",
                    { name in
                        [
                            operation(
                                "create", "child-\(UUID().uuidString)", type: "Item",
                                fields: #"{"ref":{"value":{"recordName":"\#(name)","action":"VALIDATE"}}}"#, extra: parent)
                        ]
                    }
                ),
                ("an update", { name in [operation("update", name, type: "Item", tag: "abc", fields: #"{"text":{"value":"x"}}"#)] }),
                ("a replace", { name in [operation("replace", name, type: "Item", tag: "abc")] }),
                ("a forced update without a parent", { name in [operation("forceUpdate", name, type: "Item")] }),
                ("a creation without a parent", { name in [operation("create", name, type: "Item")] }),
                ("a delete", { name in [operation("delete", name, type: nil, tag: "abc")] }),
                ("a forced delete", { name in [operation("forceDelete", name, type: nil)] }),
                (
                    "a parent outside the share",
                    { name in [operation("create", "c-\(UUID().uuidString)", type: "Item", extra: #","parent":{"recordName":"\#(name)"}"#)] }
                ),
            ]
            for (what, operations) in probes {
                #expect(try await probe("secret", operations) == (try await probe("nosuch", operations)), "\(what)")
            }
            // The owner's record is untouched by all of it.
            let secret = try await client.lookup(["secret"], zone: "Lists", as: .user(alice))
            #expect(secret.records[0]["fields"]?["text"]?["value"] == .string("t0p"))

            // Creating in the share under a free name works; under a taken one, it fails as a taken name does.
            #expect(try await probe("fresh", { [operation("create", $0, type: "Item", extra: parent)] }) == ["saved "])
            #expect(try await probe("secret", { [operation("create", $0, type: "Item", extra: parent)] }) == ["EXISTS record NAME already exists"])
            #expect(try await probe("fresh", { [operation("create", $0, type: "Item", extra: parent)] }) == ["EXISTS record NAME already exists"])
            let after = try await client.lookup(["secret"], zone: "Lists", as: .user(alice))
            #expect(after.records[0]["fields"]?["text"]?["value"] == .string("t0p"))
            #expect(after.records[0]["parent"] == nil)
        }
    }

    // MARK: - Connections

    /// A loop held up (another connection's long request) runs the timers that fell due before it reads its sockets:
    /// the idle check must not take a connection whose bytes wait unread for an idle one. On a simulated loop, with the
    /// handler's clock run ahead of the loop's timers as a stalled loop's would be.
    @Test func aStalledEventLoopDoesNotTakeAnActiveConnectionForAnIdleOne() throws {
        let counts = ConnectionCounts(
            limits: ConnectionLimits(idleTimeout: .seconds(1), requestBodyTimeout: .seconds(4)), countsAddresses: false, metrics: ServerMetrics())
        /// A connection on a loop of its own whose handler reads the loop's time plus `stall`: a loop held up runs its
        /// timers late, that is, when the clock is past what the loop's timers say.
        func connection() throws -> (EmbeddedChannel, stall: ManualDuration) {
            let loop = EmbeddedEventLoop()
            let start = ContinuousClock.now
            let origin = loop.now
            let stall = ManualDuration()
            let handler = ConnectionGuardHandler(counts: counts) {
                start + Duration.nanoseconds((loop.now - origin).nanoseconds) + stall.value
            }
            let channel = EmbeddedChannel(handler: handler, loop: loop)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            return (channel, stall)
        }

        // A body trickling a byte every 0.2 s; the last one read at 0.4 s.
        let (trickling, stall) = try connection()
        let head = HTTPRequest(
            method: .post, scheme: "http", authority: "127.0.0.1", path: "/", headerFields: [.contentLength: "100000"])
        try trickling.writeInbound(HTTPRequestPart.head(head))
        for _ in 0..<2 {
            trickling.embeddedEventLoop.advanceTime(by: .milliseconds(200))
            try trickling.writeInbound(HTTPRequestPart.body(ByteBuffer(string: " ")))
        }
        trickling.embeddedEventLoop.advanceTime(by: .milliseconds(600))
        // The loop is held for 0.6 s: the idle check due at 1.4 s runs at 2 s, before the loop reads the bytes that came
        // meanwhile. It does not close the connection, but looks again soon.
        stall.value = .milliseconds(600)
        trickling.embeddedEventLoop.advanceTime(by: .milliseconds(400))
        #expect(trickling.isActive, "a late idle check took an active connection for an idle one")
        // The loop reads its sockets before it looks again: active.
        try trickling.writeInbound(HTTPRequestPart.body(ByteBuffer(string: " ")))
        trickling.embeddedEventLoop.advanceTime(by: .milliseconds(25))
        #expect(trickling.isActive)
        // The body trickles on; its own deadline (4 s after its head, by the loop's timers) ends it.
        for _ in 0..<12 {
            trickling.embeddedEventLoop.advanceTime(by: .milliseconds(200))
            try trickling.writeInbound(HTTPRequestPart.body(ByteBuffer(string: " ")))
        }
        trickling.embeddedEventLoop.advanceTime(by: .milliseconds(150))
        #expect(trickling.isActive)
        trickling.embeddedEventLoop.advanceTime(by: .milliseconds(25))
        #expect(!trickling.isActive, "the body deadline closes a body that never ends")

        // A connection truly idle, looked at on time, is closed at the idle timeout.
        let (idle, _) = try connection()
        idle.embeddedEventLoop.advanceTime(by: .milliseconds(990))
        #expect(idle.isActive)
        idle.embeddedEventLoop.advanceTime(by: .milliseconds(10))
        #expect(!idle.isActive, "an idle connection outlived the idle timeout")
    }

    @Test func silentAndSlowConnectionsAreClosedOnTime() async throws {
        var world = try await TestWorld.make()
        // Timeouts of seconds, not fractions: the suites run side by side on two cores, and a loop held up that long
        // would read a well-behaved connection's request only after a shorter one.
        world.configuration.connectionLimits = ConnectionLimits(idleTimeout: .seconds(3), requestBodyTimeout: .seconds(6))
        try await world.test { client in
            let port = try #require(client.client.port)
            // Silent: nothing at all after connecting.
            let silent = try await RawHTTPClient.secondsUntilClosed(port: port, head: "", trickle: [], every: 0.2, maximumSeconds: 20)
            #expect(silent != nil, "a silent connection was never closed")
            // A head sent a header line at a time, never finished.
            let slowHead = try await RawHTTPClient.secondsUntilClosed(
                port: port, head: "GET /health HTTP/1.1\r\nHost: x\r\n", trickle: Array("X-Slow: 1\r\n".utf8), every: 0.2, maximumSeconds: 20)
            #expect(slowHead != nil)
            // A body trickling a byte every 0.2 s (each byte keeps the idle timer from firing) meets the body deadline.
            let query = "/database/1/\(TestWorld.container)/development/public/records/query?ckAPIToken=\(client.apiToken)"
            let slowBody = try await RawHTTPClient.secondsUntilClosed(
                port: port, head: "POST \(query) HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{", trickle: [UInt8(ascii: " ")],
                every: 0.2, maximumSeconds: 20)
            // Closed in the end. Which timer closed it (the body deadline, not the idle check, however late a loop or
            // this test's own thread runs) is shown on a simulated loop by aStalledEventLoopDoesNotTakeAnActiveConnectionForAnIdleOne.
            #expect(slowBody != nil, "a body trickling forever was never cut off")
            // Meanwhile a well-behaved request is served.
            let served = try await RawHTTPClient.exchange(
                port: port, head: "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", body: [], readTimeout: 60)
            #expect(served.statusCode == 200, "\(served)")
        }
    }

    @Test func oneAddressHoldsAtMostItsShareOfConnections() async throws {
        var world = try await TestWorld.make()
        world.configuration.connectionLimits = ConnectionLimits(maximumConnectionsPerAddress: 3)
        try await world.test { client in
            let port = try #require(client.client.port)
            // Six connections from one address: the server accepts them on several threads, in no set order, and
            // closes all but three. (The test client may hold a connection of its own from this address too.)
            let held = try (0..<6).map { _ in try RawHTTPClient.openConnection(port: port) }
            let closed = try await RawHTTPClient.closedByServer(held, atLeast: 3, waiting: 20)
            #expect(closed.count >= 3 && closed.count < 6, "\(closed.count) of 6 closed")
            for socket in held { RawHTTPClient.closeConnection(socket) }
            var served: Int?
            for _ in 0..<50 where served != 200 {
                // The server notices the closed connections as it reads them.
                try await Task.sleep(for: .milliseconds(50))
                served = try await RawHTTPClient.exchange(
                    port: port, head: "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", body: [], readTimeout: 5
                ).statusCode
            }
            #expect(served == 200)
            // Each connection closed at once is a refusal in /metrics (asked again while a loaded server has not yet
            // noticed every closed connection, and refuses this one too).
            var metrics = ""
            for _ in 0..<50 where !metrics.hasPrefix("HTTP/1.1 200") {
                metrics = try await RawHTTPClient.exchange(
                    port: port, head: "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", body: [], readTimeout: 30
                ).response
                if !metrics.hasPrefix("HTTP/1.1 200") { try await Task.sleep(for: .milliseconds(50)) }
            }
            let refusals = metrics.split(separator: "\n").first { $0.hasPrefix(#"cumulus_limit_refusals_total{limit="connections"} "#) }
            #expect(refusals.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0 >= closed.count, "\(metrics)")
        }
    }

    // MARK: - The database API

    @Test func aCallerGetsItsRateAndAFewRequestsAtOnce() {
        let throttle = RequestThrottle(limits: RequestLimits(requestsPerSecond: 10, burst: 5, concurrentRequests: 3))
        let start = ContinuousClock.now
        // Three at once; the fourth is refused while they run, and admitted when one finishes.
        for _ in 0..<3 { #expect(throttle.admit("user:a", now: start) == .admitted) }
        #expect(throttle.admit("user:a", now: start) == .refused(retryAfter: 1, reason: "too many requests at once: at most 3"))
        #expect(throttle.admit("user:b", now: start) == .admitted, "another caller is not held back")
        throttle.finish("user:a")
        #expect(throttle.admit("user:a", now: start) == .admitted)
        for _ in 0..<4 { throttle.finish("user:a") }
        // The burst of five is spent (four admitted, one refused for concurrency took no token); one more, then none.
        #expect(throttle.admit("user:a", now: start) == .admitted)
        guard case .refused(let retryAfter, let reason) = throttle.admit("user:a", now: start) else {
            Issue.record("a sixth request in the same instant is refused")
            return
        }
        #expect(retryAfter == 1)
        #expect(reason == "too many requests: at most 10 per second on average")
        throttle.finish("user:a")
        // A tenth of a second gives back one request.
        #expect(throttle.admit("user:a", now: start + .milliseconds(100)) == .admitted)
        #expect(throttle.admit("user:a", now: start + .milliseconds(100)) != .admitted)
    }

    /// Made-up web auth tokens each had a bucket of their own, so a flood of them was never throttled. A credential now
    /// has its own bucket only once it has worked here; until then it counts against its sender's address.
    @Test func madeUpWebAuthTokensShareTheirSendersBucket() async throws {
        var prepared = try await TestWorld.make()
        prepared.configuration.requestLimits = RequestLimits(requestsPerSecond: 1, burst: 20, concurrentRequests: 8, refusalDelay: .zero)
        let world = prepared
        try await world.test { client in
            let port = try #require(client.client.port)
            // Alice's token has worked once: it has a bucket of its own.
            #expect(try await client.send("zones/list", as: .user(world.alice), method: .get).status == 200)
            let started = ContinuousClock.now
            let flood: String =
                (0..<50).map { _ -> String in
                    let token = (0..<43).map { _ in String("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".randomElement()!) }
                        .joined()
                    return
                        "GET /database/1/\(TestWorld.container)/development/private/zones/list?ckAPIToken=\(client.apiToken)&ckWebAuthToken=\(token) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                }.joined() + "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            async let answers = withThrowingTaskGroup(of: (refused: Int, failed: Int).self) { group in
                for _ in 0..<20 {
                    group.addTask {
                        let exchange = try await RawHTTPClient.exchange(port: port, head: flood, body: [], readTimeout: 120, source: "127.0.0.2")
                        return (
                            exchange.response.components(separatedBy: "HTTP/1.1 429").count - 1,
                            exchange.response.components(separatedBy: "HTTP/1.1 401").count - 1
                        )
                    }
                }
                var total = (refused: 0, failed: 0)
                for try await part in group { total = (total.refused + part.refused, total.failed + part.failed) }
                return total
            }
            // Alice is served all the while.
            for _ in 0..<10 { #expect(try await client.send("zones/list", as: .user(world.alice), method: .get).status == 200) }
            let (refused, failed) = try await answers
            let seconds = Double((ContinuousClock.now - started).components.seconds) + 1
            #expect(refused + failed == 1_000)
            // The address's bucket: its burst, and one a second after.
            #expect(Double(failed) <= 20 + seconds, "\(failed) made-up tokens were looked up in \(seconds) s")
        }
    }

    @Test func aFloodingUserIsThrottledWhileOthersAreServed() async throws {
        var prepared = try await TestWorld.make()
        // Half a request a second, after a burst of five: however slowly a loaded machine serves them, at most ten of
        // twenty requests sent at once within ten seconds get through.
        // The refusal delay is short: the twenty requests share the test client's one connection, and a loaded machine
        // must answer them all within its read timeout.
        prepared.configuration.requestLimits = RequestLimits(
            requestsPerSecond: 0.5, burst: 5, concurrentRequests: 4, refusalDelay: .milliseconds(50))
        let world = prepared
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let started = ContinuousClock.now
            let answers = try await withThrowingTaskGroup(of: CloudKitResponse.self) { group in
                for _ in 0..<20 { group.addTask { try await client.lookup(["r"], as: .user(world.alice)) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let throttled = answers.filter { $0.status == 429 }
            if ContinuousClock.now - started < .seconds(10) { #expect(throttled.count >= 10) }
            #expect(!throttled.isEmpty)
            #expect(answers.allSatisfy { $0.status == 200 || $0.status == 429 })
            for answer in throttled {
                #expect(answer.serverErrorCode == "THROTTLED")
                let retryAfter = answer.json["retryAfter"].flatMap { if case .number(let text) = $0 { Int(text) } else { nil } }
                #expect((retryAfter ?? 0) >= 1)
                #expect(answer.headers[.retryAfter] == retryAfter.map(String.init))
            }
            // Bob, and an anonymous caller, are served all the while.
            #expect(try await client.send("zones/list", as: .user(world.bob), method: .get).status == 200)
            #expect(try await client.send("zones/list", as: .anonymous, database: "public", method: .get).status == 200)
        }
    }

    @Test func passwordHashingRunsAFewAtATimeAndRefusesBeyondItsQueue() async throws {
        let queue = PasswordHashingQueue(maximumRunning: 2, maximumWaiting: 1)
        let hashes = BlockedHashes()
        let hash: @Sendable () throws -> Int = { hashes.hash() }
        let first = Task { try await queue.run(hash) }
        let second = Task { try await queue.run(hash) }
        while hashes.running < 2 { try await Task.sleep(for: .milliseconds(5)) }
        let third = Task { try await queue.run(hash) }
        // The third waits its turn; a fourth finds the queue full and is refused at once.
        while queue.waitingCount < 1 { try await Task.sleep(for: .milliseconds(5)) }
        let refused = await #expect(throws: CumulusError.self) { try await queue.run { 0 } }
        #expect(refused?.code == .throttled)
        #expect(refused?.retryAfter == 1)
        for _ in 0..<3 { hashes.gate.signal() }
        #expect(try await first.value + second.value + third.value == 3)
        #expect(hashes.most == 2)
    }
}

/// Hashes that wait at a gate, counting how many run at once.
final class BlockedHashes: Sendable {
    let gate = DispatchSemaphore(value: 0)
    private let counts = Mutex((now: 0, most: 0))

    var running: Int { counts.withLock { $0.now } }
    var most: Int { counts.withLock { $0.most } }

    func hash() -> Int {
        counts.withLock {
            $0.now += 1
            $0.most = max($0.most, $0.now)
        }
        gate.wait()
        counts.withLock { $0.now -= 1 }
        return 1
    }
}

/// A duration a test sets by hand.
private final class ManualDuration {
    var value = Duration.zero
}
