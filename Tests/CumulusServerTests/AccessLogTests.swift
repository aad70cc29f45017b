import CumulusModel
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import InMemoryTracing
import Logging
import Synchronization
import Testing
import Tracing

@testable import CumulusServer

/// Lines a logger wrote, kept for a test to read.
final class CapturedLines: Sendable {
    private let lines = Mutex([String]())
    var all: [String] { lines.withLock { $0 } }
    func append(_ line: String) { lines.withLock { $0.append(line) } }
}

/// One structured access-log line per request, with the request ID the answer carries; never a credential.
@Suite("Access log and request IDs", .timeLimit(.minutes(10)))
struct AccessLogTests {
    /// A flood of refusals (made-up credentials, throttled requests) writes a few lines a second, and the next line
    /// written says how many were left out.
    @Test func refusalLinesAreSampledAndTheRestCounted() {
        let sampler = RefusalLogSampler(linesPerSecond: 3)
        let start = ContinuousClock.now
        #expect((0..<5).map { _ in sampler.admit(now: start) } == [0, 0, 0, nil, nil])
        #expect(sampler.admit(now: start + .milliseconds(999)) == nil)
        #expect(sampler.admit(now: start + .seconds(1)) == 3)
        #expect(sampler.admit(now: start + .seconds(1)) == 0)
    }

    func withServer(
        format: StructuredLogHandler.Format = .json, _ body: @Sendable (CloudKitTestClient, TestWorld, CapturedLines) async throws -> Void
    ) async throws {
        let world = try await TestWorld.make()
        let captured = CapturedLines()
        let logger = Logger(label: "cumulus") { StructuredLogHandler(label: $0, format: format, write: { captured.append($0) }) }
        let app = buildApplication(configuration: world.configuration, store: world.store, logger: logger, clock: world.clock)
        try await app.test(.live) { client in
            try await CloudKitTestClient.patient(client, apiToken: world.apiToken) { try await body($0, world, captured) }
        }
    }

    /// The access lines, parsed.
    func requests(_ captured: CapturedLines) throws -> [JSONValue] {
        try captured.all.map { try JSONValue(parsing: $0) }.filter { $0["message"]?.stringValue == "request" }
    }

    @Test func everyRequestIsOneLineWithItsRouteStatusAndIDButNoCredential() async throws {
        try await withServer { client, world, captured in
            let zone = try await client.send(
                "zones/modify", as: .user(world.alice),
                body: #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Secret Plans"}}}]}"#)
            #expect(zone.status == 200)
            let missing = try await client.send(
                "records/lookup", as: .user(world.alice), body: #"{"zoneID":{"zoneName":"Nope"},"records":[{"recordName":"diary-entry"}]}"#)
            #expect(missing.status == 404)

            let lines = try requests(captured)
            #expect(lines.count == 2)
            let created = try #require(lines.first)
            #expect(created["route"]?.stringValue == "/database/1/{container}/{environment}/{database}/zones/modify")
            #expect(created["status"]?.stringValue == "200")
            #expect(created["container"]?.stringValue == TestWorld.container)
            #expect(created["environment"]?.stringValue == "development")
            #expect(created["database"]?.stringValue == "private")
            #expect(created["method"]?.stringValue == "POST")
            #expect(created["level"]?.stringValue == "info")
            #expect(Double(created["duration_ms"]?.stringValue ?? "") != nil)
            #expect(Int(created["bytes_in"]?.stringValue ?? "") ?? 0 > 0)
            #expect(lines.last?["status"]?.stringValue == "404")

            // The answer names the request; the log line says the same ID; an error envelope's uuid is it too.
            #expect(zone.headers[HTTPField.Name("X-Request-ID")!] == created["request_id"]?.stringValue)
            #expect(missing.json["uuid"]?.stringValue == missing.headers[HTTPField.Name("X-Request-ID")!])
            #expect(missing.json["uuid"]?.stringValue == lines.last?["request_id"]?.stringValue)
            let id = try #require(created["request_id"]?.stringValue)
            #expect(UUID(uuidString: id) != nil, "shaped as CloudKit's uuid")
            #expect(created["request_id"]?.stringValue != lines.last?["request_id"]?.stringValue)

            // Nothing the client sent in its query, path or body reaches the log.
            let everything = captured.all.joined()
            for secret in [world.apiToken, world.alice.webAuthToken, "Secret Plans", "diary-entry"] {
                #expect(!everything.contains(secret), "the log holds \(secret)")
            }
        }
    }

    /// A client's W3C `traceparent` follows its request into the server's log lines; a malformed one is ignored.
    @Test func aClientsTraceIsCarriedIntoTheLogLinesOfItsRequest() async throws {
        try await withServer { client, world, captured in
            let traced = try await client.send(
                "zones/list", as: .user(world.alice), method: .get,
                headers: [HTTPField.Name("traceparent")!: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"])
            #expect(traced.status == 200)
            let forged = try await client.send(
                "zones/list", as: .user(world.alice), method: .get,
                headers: [HTTPField.Name("traceparent")!: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"])
            #expect(forged.status == 200)
            let lines = try requests(captured)
            #expect(lines.first?["trace_id"]?.stringValue == "4bf92f3577b34da6a3ce929d0e0e4736")
            #expect(lines.first?["parent_span_id"]?.stringValue == "00f067aa0ba902b7")
            #expect(lines.last?["trace_id"] == nil, "an all-zero trace ID is invalid and ignored")
        }
    }

    /// With a tracer (`cumulus serve` built with the `OpenTelemetry` trait gives swift-otel's), each request is a span
    /// named by its route template, a child of the client's trace, ended once the answer is written, and carrying no
    /// path, query or credential.
    @Test func eachRequestIsASpanNamedByItsRouteAndJoinedToTheClientsTrace() async throws {
        let world = try await TestWorld.make()
        let tracer = InMemoryTracer()
        var configuration = world.configuration
        configuration.requestTracer = tracer
        let app = buildApplication(configuration: configuration, store: world.store, logger: Logger(label: "test"), clock: world.clock)
        try await app.test(.live) { client in
            try await CloudKitTestClient.patient(client, apiToken: world.apiToken) { client in
                let created = try await client.send(
                    "zones/modify", as: .user(world.alice),
                    body: #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Secret Plans"}}}]}"#,
                    headers: [HTTPField.Name(InMemoryTracer.traceIDKey)!: "trace-1", HTTPField.Name(InMemoryTracer.spanIDKey)!: "client-span"])
                #expect(created.status == 200)
                let missing = try await client.send("no/such/thing", as: .anonymous)
                #expect(missing.status == 404)
            }
        }
        let spans = tracer.finishedSpans
        #expect(spans.count == 2, "\(spans.map(\.operationName))")
        let span = try #require(spans.first { $0.operationName.hasSuffix("zones/modify") })
        #expect(span.operationName == "POST /database/1/{container}/{environment}/{database}/zones/modify")
        #expect(span.traceID == "trace-1" && span.parentSpanID == "client-span", "a child of the client's span")
        #expect(span.attributes["http.response.status_code"]?.toSpanAttribute() == 200)
        #expect(spans.contains { $0.operationName == "POST NotFound" })
        let everything = spans.map { "\($0.operationName) \($0.attributes)" }.joined()
        for secret in [world.apiToken, world.alice.webAuthToken, "Secret Plans"] { #expect(!everything.contains(secret)) }
    }

    @Test func traceParentsAreReadAsTheSpecificationSays() {
        #expect(TraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")?.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(TraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra") != nil, "a later version may add parts")
        for bad in [
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-xyz92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "",
        ] {
            #expect(TraceParent(bad) == nil, "\(bad)")
        }
    }

    @Test func aRouteNoneMatchesIsLoggedAsNotFound() async throws {
        try await withServer { client, _, captured in
            let response = try await client.send("no/such/thing", as: .anonymous)
            #expect(response.status == 404)
            let line = try #require(try requests(captured).last)
            #expect(line["route"]?.stringValue == "NotFound")
            #expect(line["status"]?.stringValue == "404")
        }
    }

    @Test func logfmtQuotesWhatWouldBreakALine() throws {
        let captured = CapturedLines()
        let logger = Logger(label: "cumulus") { StructuredLogHandler(label: $0, format: .logfmt, write: { captured.append($0) }) }
        logger.warning("a \"quoted\"\nmessage", metadata: ["route": "/health", "empty": ""])
        let line = try #require(captured.all.first)
        #expect(line.hasPrefix("time=20"))
        #expect(line.contains(" level=warning label=cumulus "))
        #expect(line.contains(#"message="a \"quoted\"\nmessage""#))
        #expect(line.contains(#" empty="" "#))
        #expect(line.contains(" route=/health"))
        #expect(line.hasSuffix("\n"))
        #expect(line.dropLast().contains("\n") == false, "one line, whatever the message holds")
    }
}
