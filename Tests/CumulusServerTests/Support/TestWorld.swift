import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusStoreSQLite
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOPosix
import Testing

/// A signed-in test user.
struct TestUser: Sendable {
    var account: UserAccount
    var webAuthToken: String
    var userRecordName: String { account.userRecordName }
}

/// A server's world for one test: a fresh store, a container with tokens for both environments, a second container,
/// and two users.
struct TestWorld: Sendable {
    static let container = "iCloud.com.example.tests"
    static let otherContainer = "iCloud.com.example.other"

    let store: any RecordStore
    let accounts: AccountService
    let clock: WallClock
    var configuration: ServerConfiguration
    let apiToken: String
    let productionToken: String
    let otherContainerToken: String
    let alice: TestUser
    let bob: TestUser
    /// The world's own event loop: its server's connections and requests' tasks, and its client's.
    let eventLoop = TestEventLoop()

    static func make(store kind: TestStore = .sqlite, clock: WallClock = .system, limits: Limits = .init()) async throws -> TestWorld {
        let store = try await kind.make()
        let logger = Logger(label: "test")
        // A light scrypt cost keeps user creation fast in tests.
        let accounts = AccountService(store: store, passwordHasher: PasswordHasher(rounds: 1 << 10), clock: clock)
        try await accounts.createContainer(container, logger: logger)
        try await accounts.createContainer(otherContainer, logger: logger)
        func user(_ name: String) async throws -> TestUser {
            let account = try await accounts.createUser(
                container: container, name: name, password: "password-\(name)", email: "\(name)@example.com", logger: logger)
            return TestUser(account: account, webAuthToken: try await accounts.issueWebAuthToken(for: account, logger: logger))
        }
        return TestWorld(
            store: store, accounts: accounts, clock: clock, configuration: ServerConfiguration(port: 0, limits: limits),
            apiToken: try await accounts.createAPIToken(container: container, environment: .development, logger: logger),
            productionToken: try await accounts.createAPIToken(container: container, environment: .production, logger: logger),
            otherContainerToken: try await accounts.createAPIToken(container: otherContainer, environment: .development, logger: logger),
            alice: try await user("alice"), bob: try await user("bob")
        )
    }

    /// Another signed-in user of the container, with the email `{name}@example.com`.
    func user(_ name: String) async throws -> TestUser {
        let logger = Logger(label: "test")
        let account = try await accounts.createUser(
            container: Self.container, name: name, password: "password-\(name)", email: "\(name)@example.com", logger: logger)
        return TestUser(account: account, webAuthToken: try await accounts.issueWebAuthToken(for: account, logger: logger))
    }

    func application() -> some ApplicationProtocol {
        buildApplication(
            configuration: configuration, store: store, logger: .testServer, clock: clock, eventLoopGroup: .shared(eventLoop.group))
    }

    /// Runs a test against the application over real HTTP on a loopback port, as clients reach it.
    func test<Value: Sendable>(_ body: @Sendable (CloudKitTestClient) async throws -> Value) async throws -> Value {
        try await application().test(.live) { client in
            try await CloudKitTestClient.patient(client, apiToken: apiToken, on: eventLoop.group, body)
        }
    }
}

/// An event loop of a test's own, shut down when the last world holding it is gone.
///
/// Test servers on NIO's shared group (two threads on these machines) would queue every test's work on the same two
/// loops: one test's flood of requests then holds up another's connections for as long as it lasts, which no
/// deployment sees (a server's loops are its own). A thread each lets the system share the cores among tests instead.
final class TestEventLoop: Sendable {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    deinit {
        group.shutdownGracefully(queue: .global()) { _ in }
    }
}

extension Logger {
    /// A test server's logger: warnings and errors only, so the access log (a line per request, at `info`) does not fill
    /// the test output; ``AccessLogTests`` reads those lines.
    static var testServer: Logger {
        var logger = Logger(label: "test-server")
        logger.logLevel = .warning
        return logger
    }
}

/// Who a request is sent as.
enum Identity: Sendable {
    case user(TestUser)
    /// The API token only: an anonymous caller.
    case anonymous
    case apiToken(String)
    case apiTokenAndUser(String, TestUser)
    case none
}

/// A response: status and parsed JSON body.
struct CloudKitResponse: Sendable {
    var status: Int
    var headers: HTTPFields
    var json: JSONValue

    var serverErrorCode: String? { json["serverErrorCode"]?.stringValue }
    var reason: String? { json["reason"]?.stringValue }
    var records: AnswerList { AnswerList(json["records"]?.arrayValue ?? []) }
    var zones: AnswerList { AnswerList(json["zones"]?.arrayValue ?? []) }
}

/// The items of an answer: reading one past the end gives `.null`, so a test whose request failed (a `503` on a loaded
/// machine, say) records a failed expectation instead of crashing the whole test process.
struct AnswerList: RandomAccessCollection, Sendable {
    private let items: [JSONValue]

    init(_ items: [JSONValue]) {
        self.items = items
    }

    var startIndex: Int { items.startIndex }
    var endIndex: Int { items.endIndex }

    subscript(position: Int) -> JSONValue {
        items.indices.contains(position) ? items[position] : .null
    }
}

/// An HTTP/1.1 client of a live test server whose reads wait up to two minutes: HummingbirdTesting's live client gives
/// up after 20 s, which a request to PostgreSQL on a machine the whole suite loads has taken.
struct PatientClient: Sendable {
    /// An answer: status, headers and the whole body.
    struct Answer: Sendable {
        var status: HTTPResponse.Status
        var headers: HTTPFields
        var body: ByteBuffer
    }

    let http: TestClient
    let port: Int?

    func execute(uri: String, method: HTTPRequest.Method, headers: HTTPFields = [:], body: ByteBuffer? = nil) async throws -> Answer {
        var headers = headers
        headers[.connection] = "keep-alive"
        let response = try await http.execute(TestClient.Request(uri, method: method, authority: "localhost", headers: headers, body: body))
        return Answer(status: response.status, headers: response.headers, body: response.body ?? ByteBuffer())
    }
}

/// Sends CloudKit Web Services requests to the application under test.
struct CloudKitTestClient: Sendable {
    let client: PatientClient
    /// The development API token of ``TestWorld/container``.
    let apiToken: String

    /// Runs `body` with a client of the live server `live` reaches (from `application().test(.live)`).
    static func patient<Value: Sendable>(
        _ live: any TestClientProtocol, apiToken: String, on group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        _ body: @Sendable (CloudKitTestClient) async throws -> Value
    ) async throws -> Value {
        let port = try #require(live.port)
        let http = TestClient(
            host: "localhost", port: port, configuration: .init(timeout: .seconds(120)), eventLoopGroupProvider: .shared(group))
        http.connect()
        do {
            let value = try await body(CloudKitTestClient(client: PatientClient(http: http, port: port), apiToken: apiToken))
            try? await http.shutdown()
            return value
        } catch {
            try? await http.shutdown()
            throw error
        }
    }

    func send(
        _ operation: String, as identity: Identity, database: String = "private", environment: String = "development",
        container: String = TestWorld.container, method: HTTPRequest.Method = .post, body: String? = nil, headers: HTTPFields = [:]
    ) async throws -> CloudKitResponse {
        var query: [String] = []
        switch identity {
        case .user(let user):
            query = ["ckAPIToken=\(apiToken)", "ckWebAuthToken=\(user.webAuthToken)"]
        case .anonymous:
            query = ["ckAPIToken=\(apiToken)"]
        case .apiToken(let token):
            query = ["ckAPIToken=\(token)"]
        case .apiTokenAndUser(let token, let user):
            query = ["ckAPIToken=\(token)", "ckWebAuthToken=\(user.webAuthToken)"]
        case .none:
            break
        }
        let path = "/database/1/\(container)/\(environment)/\(database)/\(operation)" + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
        return try await raw(path, method: method, body: body, headers: headers)
    }

    func raw(_ uri: String, method: HTTPRequest.Method = .post, body: String? = nil, headers: HTTPFields = [:]) async throws -> CloudKitResponse {
        let response = try await client.execute(uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) })
        let bytes = Array(response.body.readableBytesView)
        let json = bytes.isEmpty ? JSONValue.null : try JSONValue(parsing: bytes)
        return CloudKitResponse(status: Int(response.status.code), headers: response.headers, json: json)
    }

    // MARK: Conveniences

    /// Waits until `count` push connections have looked at the feeds and wait for a change (`/metrics`), so that what a
    /// test writes next can reach them only by waking them. Fails after a generous deadline.
    func waitForIdlePushConnections(_ count: Int, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        try await waitForMetric("cumulus_push_idle_connections", toBe: Double(count), sourceLocation: sourceLocation)
    }

    /// Waits until `/metrics` shows `series` at `value`; fails after a generous deadline.
    func waitForMetric(_ series: String, toBe value: Double, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let response = try await client.execute(uri: "/metrics", method: .get, headers: [:], body: nil)
            if metricSample(series, in: String(buffer: response.body)) == value { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("/metrics never showed \(series) at \(value)", sourceLocation: sourceLocation)
    }

    @discardableResult
    func createZone(_ name: String, as user: TestUser) async throws -> CloudKitResponse {
        try await send(
            "zones/modify", as: .user(user), body: #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"\#(name)"}}}]}"#)
    }

    func modify(_ operations: [String], zone: String? = "Z", as identity: Identity, database: String = "private", extra: String = "") async throws
        -> CloudKitResponse
    {
        let zoneID = zone.map { #""zoneID":{"zoneName":"\#($0)"},"# } ?? ""
        return try await send(
            "records/modify", as: identity, database: database, body: "{\(zoneID)\(extra)\"operations\":[\(operations.joined(separator: ","))]}")
    }

    func lookup(_ names: [String], zone: String? = "Z", as identity: Identity, database: String = "private", extra: String = "") async throws
        -> CloudKitResponse
    {
        let zoneID = zone.map { #""zoneID":{"zoneName":"\#($0)"},"# } ?? ""
        let records = names.map { #"{"recordName":"\#($0)"}"# }.joined(separator: ",")
        return try await send("records/lookup", as: identity, database: database, body: "{\(zoneID)\(extra)\"records\":[\(records)]}")
    }
}

/// One `records/modify` operation as JSON.
func operation(_ type: String, _ name: String, type recordType: String? = "Note", tag: String? = nil, fields: String = "{}", extra: String = "")
    -> String
{
    var record = #""recordName":"\#(name)","fields":\#(fields)"#
    if let recordType { record += #","recordType":"\#(recordType)""# }
    if let tag { record += #","recordChangeTag":"\#(tag)""# }
    return #"{"operationType":"\#(type)","record":{\#(record)\#(extra)}}"#
}

/// A series' value in Prometheus's text format; `nil` when absent.
func metricSample(_ series: String, in text: String) -> Double? {
    text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
}
