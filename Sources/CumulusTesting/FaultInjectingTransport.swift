public import CumulusClient
import Foundation

/// A ``Transport`` that forwards to another one and makes chosen requests fail the way networks fail, so every client
/// feature can be tested against lost answers, outages and retries with a real server behind it.
///
/// ```swift
/// let faults = FaultInjectingTransport(wrapping: URLSessionTransport())
/// // The server applies the next records/modify, but its answer never arrives.
/// faults.inject(.dropAnswer, times: 1) { $0.url.path.hasSuffix("records/modify") }
/// ```
public final class FaultInjectingTransport: Transport, @unchecked Sendable {
    /// A way for one request to fail.
    public enum Fault: Sendable, Hashable {
        /// The request reaches the server and is applied, but the answer is lost (a dropped connection, the app
        /// suspended at that moment): the client sees a network error.
        case dropAnswer
        /// The request never leaves the device (no network).
        case failBeforeSending
        /// The server answers this status with CloudKit's error envelope (`503` `TRY_AGAIN_LATER`, say), unapplied.
        case answer(status: Int, serverErrorCode: String, retryAfter: Int?)
        /// The request leaves late (a slow or congested network), then goes through as usual.
        case delay(Duration)
    }

    /// The error a faulty request throws, as a transport does when no answer arrives.
    public struct InjectedFailure: Error, Sendable, CustomStringConvertible {
        public var fault: Fault
        public var description: String { "injected fault: \(fault)" }
    }

    private struct Rule {
        var fault: Fault
        var remaining: Int
        var matches: @Sendable (TransportRequest) -> Bool
    }

    private let wrapped: any Transport
    // Guards `rules` and `sent`; requests may run concurrently.
    private let lock = NSLock()
    private var rules: [Rule] = []
    private var sent: [String] = []

    public init(wrapping transport: any Transport) {
        self.wrapped = transport
    }

    /// Makes the next `times` requests that `matches` accepts fail with `fault`.
    public func inject(_ fault: Fault, times: Int = 1, when matches: @escaping @Sendable (TransportRequest) -> Bool = { _ in true }) {
        lock.withLock { rules.append(Rule(fault: fault, remaining: times, matches: matches)) }
    }

    /// Removes every fault not yet used.
    public func heal() {
        lock.withLock { rules.removeAll() }
    }

    /// The paths of the requests sent so far, faulty ones included, in order.
    public var sentPaths: [String] { lock.withLock { sent } }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        let fault: Fault? = lock.withLock {
            sent.append(request.url.path)
            guard let index = rules.firstIndex(where: { $0.remaining > 0 && $0.matches(request) }) else { return nil }
            rules[index].remaining -= 1
            return rules[index].fault
        }
        switch fault {
        case nil:
            return try await wrapped.send(request)
        case .dropAnswer:
            _ = try await wrapped.send(request)
            throw InjectedFailure(fault: .dropAnswer)
        case .failBeforeSending:
            throw InjectedFailure(fault: .failBeforeSending)
        case .answer(let status, let code, let retryAfter):
            let retry = retryAfter.map { #","retryAfter":\#($0)"# } ?? ""
            let body = #"{"uuid":"injected","serverErrorCode":"\#(code)","reason":"injected fault"\#(retry)}"#
            return TransportResponse(status: status, headers: ["content-type": "application/json"], body: Data(body.utf8))
        case .delay(let duration):
            try await Task.sleep(for: duration)
            return try await wrapped.send(request)
        }
    }
}
