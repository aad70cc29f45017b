import CumulusCore
import CumulusModel
import CumulusServer
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import Synchronization
import Testing

/// Thousands of generated hostile requests over every endpoint: valid bodies mutated (values of the wrong kind, huge
/// and tiny numbers, long and odd strings, deep nesting, truncation, stray bytes), sent as several kinds of caller.
/// Nothing may answer 5xx, the server must stay up, and a bystander's data must come out exactly as it went in.
@Suite("Hostile input", .timeLimit(.minutes(10)))
struct HostileInputTests {
    /// A deterministic generator (SplitMix64), so a failure can be replayed from its seed.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Valid bodies of each database operation, the seeds the mutations start from.
    static let databaseBodies: [(operation: String, body: String)] = [
        ("zones/list", "{}"),
        ("zones/lookup", #"{"zones":[{"zoneName":"Z"},{"zoneName":"_defaultZone"}]}"#),
        ("zones/modify", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"F"}}}]}"#),
        (
            "records/modify",
            #"{"zoneID":{"zoneName":"Z"},"atomic":true,"operations":[{"operationType":"create","record":{"recordName":"n1","recordType":"Note","fields":{"title":{"value":"hi","type":"STRING"},"rank":{"value":3},"when":{"value":1700000000000,"type":"TIMESTAMP"},"tags":{"value":["a","b"],"type":"STRING_LIST"},"where":{"value":{"latitude":1.5,"longitude":2.5},"type":"LOCATION"},"ref":{"value":{"recordName":"n0","action":"NONE"},"type":"REFERENCE"},"blob":{"value":"aGVsbG8=","type":"BYTES"}}}},{"operationType":"forceUpdate","record":{"recordName":"n0","recordType":"Note","fields":{}}},{"operationType":"delete","record":{"recordName":"n2","recordChangeTag":"x"}}]}"#
        ),
        (
            "records/lookup",
            #"{"zoneID":{"zoneName":"Z"},"records":[{"recordName":"n0"},{"recordName":"n1"}],"desiredKeys":["title"],"numbersAsStrings":true}"#
        ),
        (
            "records/query",
            #"{"zoneID":{"zoneName":"Z"},"resultsLimit":10,"query":{"recordType":"Note","filterBy":[{"fieldName":"rank","comparator":"GREATER_THAN","fieldValue":{"value":1}},{"fieldName":"title","comparator":"BEGINS_WITH","fieldValue":{"value":"h"}}],"sortBy":[{"fieldName":"rank","ascending":false}]},"continuationMarker":"abc"}"#
        ),
        ("records/resolve", #"{"shortGUIDs":[{"value":"abcdef","shouldFetchRootRecord":true}]}"#),
        ("records/accept", #"{"shortGUIDs":[{"value":"abcdef"}]}"#),
        ("changes/database", #"{"syncToken":"AAAA","resultsLimit":5}"#),
        ("zones/changes", #"{"syncToken":"AAAA"}"#),
        ("changes/zone", #"{"zoneID":{"zoneName":"Z"},"syncToken":"AAAA","resultsLimit":5,"desiredKeys":["title"]}"#),
        ("records/changes", #"{"zoneID":{"zoneName":"Z"},"syncToken":"AAAA"}"#),
        ("users/caller", "{}"),
        ("users/current", "{}"),
        ("users/discover", #"{"users":[{"emailAddress":"carol@example.com"},{"userRecordName":"_x"}]}"#),
        ("users/lookup/email", #"{"users":[{"emailAddress":"carol@example.com"}]}"#),
        ("users/lookup/id", #"{"users":[{"userRecordName":"_x"}]}"#),
        ("users/lookup/contacts", "{}"),
        ("subscriptions/list", "{}"),
        ("subscriptions/lookup", #"{"subscriptions":[{"subscriptionID":"s"}]}"#),
        (
            "subscriptions/modify",
            #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"s","subscriptionType":"query","query":{"recordType":"Note","filterBy":[{"fieldName":"rank","comparator":"EQUALS","fieldValue":{"value":1}}]},"firesOn":["create"],"zoneID":{"zoneName":"Z"}}}]}"#
        ),
        ("tokens/create", #"{"apnsEnvironment":"development"}"#),
        ("tokens/register", #"{"apnsToken":"abc","apnsEnvironment":"development"}"#),
    ]

    /// Other endpoints: sign-in, links, pages, push.
    static let otherRequests: [(method: HTTPRequest.Method, path: String, body: String?)] = [
        (
            .post, "/auth/1/\(TestWorld.container)/development/signup?ckAPIToken=TOKEN",
            #"{"name":"x","password":"long enough","email":"x@example.com"}"#
        ),
        (.post, "/auth/1/\(TestWorld.container)/development/signin?ckAPIToken=TOKEN", #"{"name":"alice","password":"wrong one"}"#),
        (.post, "/auth/1/\(TestWorld.container)/development/signout?ckAPIToken=TOKEN", #"{"ckWebAuthToken":"nope"}"#),
        (.post, "/auth/1/\(TestWorld.container)/development/discoverability?ckAPIToken=TOKEN&ckWebAuthToken=ALICE", #"{"discoverable":true}"#),
        (
            .post, "/links/1/\(TestWorld.container)/development/drives?ckAPIToken=TOKEN",
            #"{"drives":[{"name":"d","points":[{"latitude":1,"longitude":2,"timestamp":3}]}]}"#
        ),
        (
            .post, "/links/1/\(TestWorld.container)/development/records?ckAPIToken=TOKEN",
            #"{"records":[{"recordType":"Note","fields":{"a":{"value":1}}}]}"#
        ),
        (.get, "/s/abcdef", nil),
        (.get, "/s/abcdef.json", nil),
        (.get, "/share/abcdef", nil),
        (.get, "/share/abcdef.json", nil),
        (.get, "/courier/1/\(TestWorld.container)/development/nosuchtoken?timeout=0", nil),
        (.post, "/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=TOKEN&ckWebAuthToken=ALICE", "{}"),
        (.get, "/.well-known/apple-app-site-association", nil),
        (.get, "/health", nil),
        (.get, "/schema/1/\(TestWorld.container)/development?ckAPIToken=TOKEN", nil),
        (.post, "/schema/1/\(TestWorld.container)/development/diff?ckAPIToken=TOKEN", "RECORD TYPE Note (rank INT64 QUERYABLE);"),
        (.post, "/schema/1/\(TestWorld.container)/production/deploy?ckAPIToken=TOKEN&ckWebAuthToken=ALICE", #"{"schema":"RECORD TYPE Note ();"}"#),
    ]

    // MARK: - Mutations

    static func randomString(_ generator: inout Generator) -> String {
        let pieces = [
            "", "a", "_defaultZone", "_private", "Z", "n0", "n1", "\u{0}", "\u{FFFF}", "é", "👩‍👩‍👧", "\u{202E}rtl", "<script>alert(1)</script>",
            "' OR 1=1 --", "%00", "../../etc/passwd", "\\", "\"", "cloudkit.share", "share-1", "TIMESTAMP", "REFERENCE", "NaN",
            String(repeating: "x", count: 300), String(repeating: "é", count: 5_000),
        ]
        return pieces.randomElement(using: &generator)!
    }

    static func randomNumber(_ generator: inout Generator) -> String {
        [
            "0", "-0", "1", "-1", "200", "201", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "1e308", "1e309",
            "-1e309", "0.5", "1.7976931348623157e308", "4.9e-324", "123456789012345678901234567890", "1E2", "-2147483649",
        ].randomElement(using: &generator)!
    }

    static func randomValue(_ generator: inout Generator, depth: Int = 0) -> JSONValue {
        switch Int.random(in: 0..<(depth > 3 ? 5 : 8), using: &generator) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &generator))
        case 2, 3: return .number(randomNumber(&generator))
        case 4: return .string(randomString(&generator))
        case 5: return .array((0..<Int.random(in: 0..<4, using: &generator)).map { _ in randomValue(&generator, depth: depth + 1) })
        case 6:
            var members: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0..<4, using: &generator) {
                members[["value", "type", "recordName", "zoneName", "fieldName", "x"].randomElement(using: &generator)!] = randomValue(
                    &generator, depth: depth + 1)
            }
            return .object(members)
        default: return .array(Array(repeating: .object([:]), count: Int.random(in: 0..<2_000, using: &generator)))
        }
    }

    /// Replaces one value somewhere in the tree (more often deep than at the top) with a random one.
    static func mutate(_ value: JSONValue, _ generator: inout Generator, depth: Int = 0) -> JSONValue {
        let replaceHere = depth > 0 && Int.random(in: 0..<4, using: &generator) == 0
        if replaceHere { return randomValue(&generator) }
        switch value {
        case .object(var members) where !members.isEmpty:
            let key = members.keys.sorted().randomElement(using: &generator)!
            switch Int.random(in: 0..<6, using: &generator) {
            case 0: members[key] = nil
            case 1: members[randomString(&generator)] = randomValue(&generator)
            default: members[key] = mutate(members[key]!, &generator, depth: depth + 1)
            }
            return .object(members)
        case .array(var elements) where !elements.isEmpty:
            let index = Int.random(in: 0..<elements.count, using: &generator)
            switch Int.random(in: 0..<5, using: &generator) {
            case 0: elements.append(contentsOf: Array(repeating: elements[index], count: Int.random(in: 1..<250, using: &generator)))
            case 1: elements.remove(at: index)
            default: elements[index] = mutate(elements[index], &generator, depth: depth + 1)
            }
            return .array(elements)
        default:
            return randomValue(&generator)
        }
    }

    /// A hostile body made from a valid one: a mutated tree, or bytes broken in some way.
    static func hostileBody(from body: String, _ generator: inout Generator) -> [UInt8] {
        let valid = Array(body.utf8)
        switch Int.random(in: 0..<10, using: &generator) {
        case 0: return Array(valid.prefix(Int.random(in: 0...valid.count, using: &generator)))
        case 1:
            var bytes = valid
            for _ in 0..<Int.random(in: 1..<6, using: &generator) {
                bytes.insert(UInt8.random(in: 0...255, using: &generator), at: Int.random(in: 0...bytes.count, using: &generator))
            }
            return bytes
        case 2: return Array(String(repeating: "[", count: Int.random(in: 60..<5_000, using: &generator)).utf8)
        case 3: return (0..<Int.random(in: 0..<512, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        default:
            guard let tree = try? JSONValue(parsing: valid) else { return valid }
            var mutated = tree
            for _ in 0..<Int.random(in: 1..<4, using: &generator) { mutated = mutate(mutated, &generator) }
            return mutated.jsonBytes
        }
    }

    // MARK: - The run

    @Test(arguments: TestStore.all)
    func generatedHostileRequestsNeverBreakTheServerOrItsData(_ store: TestStore) async throws {
        var prepared = try await TestWorld.make(store: store)
        // Every request should reach its handler: the request limits have tests of their own.
        prepared.configuration.requestLimits = .unlimited
        prepared.configuration.signInLimits = SignInLimits(
            attemptsPerAccount: 1_000_000, attemptsPerAccountAndAddress: 1_000_000, attemptsPerAddress: 1_000_000, signUpsPerAddress: 1_000_000)
        let world = prepared
        let carol = try await world.user("carol")
        let requestCount = 4_000
        try await world.test { client in
            // A bystander's data, which no generated request is made as.
            try await client.createZone("Z", as: carol)
            let seeded = try await client.modify(
                (0..<20).map { operation("create", "c\($0)", fields: #"{"title":{"value":"carol \#($0)"},"rank":{"value":\#($0)}}"#) },
                as: .user(carol))
            #expect(seeded.records.count == 20)
            let before = try await client.lookup((0..<20).map { "c\($0)" }, as: .user(carol))
            try await client.createZone("Z", as: world.alice)

            // Mostly signed-in users, so most requests reach their handlers.
            let identities: [(String, Identity)] = [
                ("alice", .user(world.alice)), ("alice", .user(world.alice)), ("alice", .user(world.alice)), ("bob", .user(world.bob)),
                ("bob", .user(world.bob)), ("anonymous", .anonymous), ("no token", .none),
                ("bad token", .apiToken("not-a-token")), ("other container", .apiTokenAndUser(world.otherContainerToken, world.alice)),
            ]
            let outcomes = Outcomes()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<8 {
                    group.addTask {
                        var generator = Generator(state: UInt64(worker) &* 7919 &+ 1)
                        for index in stride(from: worker, to: requestCount, by: 8) {
                            let (description, status) = try await Self.sendOne(
                                index: index, client: client, world: world, identities: identities, generator: &generator)
                            outcomes.record(status, description)
                        }
                    }
                }
                try await group.waitForAll()
            }
            let failed = outcomes.failures
            #expect(failed.isEmpty, "\(failed.prefix(10).joined(separator: "\n"))")
            let answered = outcomes.statuses
            #expect(answered.values.reduce(0, +) == requestCount)
            // Most requests are refused, but some get through: the generator keeps enough of the valid bodies.
            #expect(answered[200, default: 0] > requestCount / 20, "\(answered)")

            // The server is alive, and Carol's records are exactly as they were.
            #expect(try await client.send("zones/list", as: .user(carol), method: .get).status == 200)
            let after = try await client.lookup((0..<20).map { "c\($0)" }, as: .user(carol))
            #expect(after.json == before.json)
        }
    }

    /// Sends one generated request and answers what it was and its status.
    static func sendOne(
        index: Int, client: CloudKitTestClient, world: TestWorld, identities: [(String, Identity)], generator: inout Generator
    ) async throws -> (String, Int) {
        if index % 5 == 4 {
            let request = otherRequests[Int.random(in: 0..<otherRequests.count, using: &generator)]
            let path = request.path.replacingOccurrences(of: "TOKEN", with: world.apiToken).replacingOccurrences(
                of: "ALICE", with: world.alice.webAuthToken)
            let body = request.body.map { hostileBody(from: $0, &generator) }
            let response = try await client.client.execute(
                uri: path, method: request.method, headers: [.contentType: "application/json"],
                body: body.map { .init(bytes: $0) })
            return ("\(request.method) \(path) \(String(decoding: (body ?? []).prefix(300), as: UTF8.self))", Int(response.status.code))
        }
        let (operation, valid) = databaseBodies[Int.random(in: 0..<databaseBodies.count, using: &generator)]
        let (who, identity) = identities[Int.random(in: 0..<identities.count, using: &generator)]
        let database = ["private", "public", "shared", "nosuch"].randomElement(using: &generator)!
        let body = hostileBody(from: valid, &generator)
        let query: String =
            switch identity {
            case .user(let user): "?ckAPIToken=\(world.apiToken)&ckWebAuthToken=\(user.webAuthToken)"
            case .anonymous: "?ckAPIToken=\(world.apiToken)"
            case .apiToken(let token): "?ckAPIToken=\(token)"
            case .apiTokenAndUser(let token, let user): "?ckAPIToken=\(token)&ckWebAuthToken=\(user.webAuthToken)"
            case .none: ""
            }
        let path = "/database/1/\(TestWorld.container)/development/\(database)/\(operation)\(query)"
        let response = try await client.client.execute(uri: path, method: .post, headers: [:], body: ByteBuffer(bytes: body))
        let description = "\(who) \(database) \(operation) \(String(decoding: body.prefix(300), as: UTF8.self))"
        // Every answer of the database API is JSON; every refusal is CloudKit's error envelope.
        let answer = try? JSONValue(parsing: Array(response.body.readableBytesView))
        if response.status.code >= 400, answer?["serverErrorCode"]?.stringValue == nil || answer?["reason"]?.stringValue == nil {
            return ("not an error envelope: " + description, 599)
        }
        if response.status.code < 400, answer == nil { return ("not JSON: " + description, 599) }
        return (description, Int(response.status.code))
    }
}

/// Statuses seen, and the requests answered 5xx.
final class Outcomes: Sendable {
    private let state = Mutex((statuses: [Int: Int](), failures: [String]()))

    var statuses: [Int: Int] { state.withLock { $0.statuses } }
    var failures: [String] { state.withLock { $0.failures } }

    func record(_ status: Int, _ description: String) {
        state.withLock {
            $0.statuses[status, default: 0] += 1
            if status >= 500 { $0.failures.append("\(status): \(description)") }
        }
    }
}
