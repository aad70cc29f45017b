public import CumulusModel
public import Foundation
import Synchronization

/// A device's push registration (`tokens/create`): its token and the courier URL it long-polls.
public struct PushRegistration: Sendable, Hashable {
    public var apnsToken: String
    public var webcourierURL: URL
}

/// A notification from the courier: which subscription fired, where, and for query subscriptions which record.
public struct CloudNotification: Sendable, Hashable {
    /// What a query subscription's record went through.
    public enum QueryEvent: Int, Sendable, Hashable {
        case created = 1, updated = 2, deleted = 3
    }

    public var notificationID: String
    public var subscriptionID: String
    public var databaseScope: DatabaseScope?
    public var zoneID: ZoneID?
    /// Query subscriptions: the record and what happened to it.
    public var recordName: String?
    public var queryEvent: QueryEvent?
    /// The payload as CloudKit's courier sends it (`aps`, `ck`).
    public var payload: JSONValue

    /// Reads CloudKit's APNs-shaped payload; `nil` if it is not one.
    public init?(payload: JSONValue) {
        guard let ck = payload["ck"], let details = ck["qry"] ?? ck["met"], let subscriptionID = details["sid"]?.stringValue else { return nil }
        self.payload = payload
        self.notificationID = ck["nid"]?.stringValue ?? ""
        self.subscriptionID = subscriptionID
        switch details["dbs"] {
        case .number("1")?: databaseScope = .public
        case .number("2")?: databaseScope = .private
        case .number("3")?: databaseScope = .shared
        default: databaseScope = nil
        }
        zoneID = details["zid"]?.stringValue.map { ZoneID(zoneName: $0, ownerRecordName: details["zoid"]?.stringValue) }
        recordName = details["rid"]?.stringValue
        if case .number(let text)? = details["fo"], let raw = Int(text) { queryEvent = QueryEvent(rawValue: raw) }
    }
}

extension CloudContainer {
    /// Asks for a push token (`tokens/create`, under `/device/1/…` as CloudKit JS does), bound to the signed-in user.
    public func createPushToken() async throws(CloudError) -> PushRegistration {
        let bytes = try await postForBytes(path: "device/1/\(containerIdentifier)/\(environment.rawValue)/tokens/create", body: Array("{}".utf8))
        guard let answer = try? PushTokenResponse(wireBytes: bytes), let url = URL(string: answer.webcourierURL) else {
            throw CloudError(code: .invalidResponse, reason: "tokens/create answered without apnsToken and webcourierURL")
        }
        return PushRegistration(apnsToken: answer.apnsToken, webcourierURL: url)
    }

    /// One courier poll: the next notification, or `nil` when none came within `timeout` seconds.
    public func nextNotification(_ registration: PushRegistration, timeout: Int = 30) async throws(CloudError) -> CloudNotification? {
        var components = URLComponents(url: registration.webcourierURL, resolvingAgainstBaseURL: false)
        components?.queryItems = [URLQueryItem(name: "timeout", value: String(timeout))]
        guard let url = components?.url else { throw CloudError(code: .invalidResponse, reason: "webcourierURL is not a URL") }
        let response: TransportResponse
        do {
            response = try await transport.send(TransportRequest(method: "GET", url: url, headers: [:], body: nil))
        } catch {
            throw CloudError(code: .networkFailure, reason: "\(error)")
        }
        guard (200..<300).contains(response.status) else { throw CloudError.answer(response.body, status: response.status) }
        guard !response.body.isEmpty else { return nil }
        guard let json = try? JSONValue(parsing: Array(response.body)), let notification = CloudNotification(payload: json) else {
            throw CloudError(code: .invalidResponse, reason: "the courier answered something that is not a notification")
        }
        return notification
    }

    /// The signed-in user's notifications, as they come: a push token is made, then the courier is long-polled in a
    /// loop. When the server cannot be reached the sequence waits and tries again (1 s, doubling up to 30 s) rather
    /// than ending; it ends when the task reading it is cancelled, or with an error the server gives for good (a
    /// refused user token).
    public func notifications(pollTimeout: Int = 30) -> AsyncThrowingStream<CloudNotification, any Error> {
        let events = courierEvents(pollTimeout: pollTimeout) { failures, error in
            guard let error = error as? CloudError, error.isTransient || error.code == .server(.notFound) else { return nil }
            return min(.seconds(1) * (1 << min(failures - 1, 5)), .seconds(30))
        }
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    for try await case .notification(let notification) in events { continuation.yield(notification) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The courier in a loop, as events: `live` when it is reached (the token made, or a poll answered after a
    /// failure), each notification, and each failure (`lost`). After a failure `retry` tells how long to wait before
    /// trying again, or `nil` to end the sequence with that error; a token the server no longer knows is made again.
    /// `setUp` runs once before the first token, retried as the rest (the sync engine saves its subscription there).
    public func courierEvents(
        pollTimeout: Int = 30, setUp: @escaping @Sendable () async throws -> Void = {},
        sleep: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) },
        retry: @escaping @Sendable (_ failures: Int, _ error: any Error) -> Duration?
    ) -> AsyncThrowingStream<CourierEvent, any Error> {
        let container = self
        return AsyncThrowingStream { continuation in
            let task = Task {
                var isSetUp = false
                var registration: PushRegistration?
                var live = false
                var failures = 0
                while !Task.isCancelled {
                    do {
                        if !isSetUp {
                            try await setUp()
                            isSetUp = true
                        }
                        let current: PushRegistration
                        if let registration {
                            current = registration
                        } else {
                            current = try await container.createPushToken()
                            registration = current
                        }
                        if !live {
                            live = true
                            continuation.yield(.live)
                        }
                        failures = 0
                        if let notification = try await abandoningOnCancel({ try await container.nextNotification(current, timeout: pollTimeout) }) {
                            continuation.yield(.notification(notification))
                        }
                    } catch is CancellationError {
                        break
                    } catch {
                        live = false
                        continuation.yield(.lost(error))
                        if (error as? CloudError)?.code == .server(.notFound) { registration = nil }
                        failures += 1
                        guard let delay = retry(failures, error) else {
                            continuation.finish(throwing: error)
                            return
                        }
                        do { try await sleep(delay) } catch { break }
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}

/// What ``CloudContainer/courierEvents(pollTimeout:setUp:sleep:retry:)`` tells.
public enum CourierEvent: Sendable {
    /// The courier is reached: from now on changes are told.
    case live
    case notification(CloudNotification)
    /// A step failed; nothing is told until the next `live`.
    case lost(any Error)
}

extension CloudDatabase {
    /// Saves subscriptions (a save of an existing ID replaces it) and deletes others, in one `subscriptions/modify`;
    /// answers the saved subscriptions. The first refused one throws.
    @discardableResult
    public func modifySubscriptions(saving: [Subscription], deleting: [String] = []) async throws(CloudError) -> [Subscription] {
        let request = SubscriptionsModifyRequest(
            operations: saving.map { .init(.create, $0) } + deleting.map { .init(.delete, Subscription(subscriptionID: $0, kind: .zone)) })
        let answer = try await send("subscriptions/modify", request, answer: SubscriptionsResponse.self)
        var saved: [Subscription] = []
        for result in answer.subscriptions {
            switch result {
            case .subscription(let subscription): saved.append(subscription)
            case .deleted: continue
            case .failed(_, let error): throw CloudError(code: .server(error.code), reason: error.reason)
            }
        }
        return saved
    }

    /// The signed-in user's subscriptions in this database.
    public func allSubscriptions() async throws(CloudError) -> [Subscription] {
        let bytes = try await postForBytes("subscriptions/list") { _ in }
        do {
            return try SubscriptionsResponse(wireBytes: bytes).subscriptions.compactMap { result in
                if case .subscription(let subscription) = result { subscription } else { nil }
            }
        } catch {
            throw CloudError(code: .invalidResponse, reason: "subscriptions/list: \(error.path): \(error.message)")
        }
    }
}

/// Awaits `operation` in a task of its own and stops waiting as soon as the caller is cancelled: a long poll on a
/// transport that does not honour cancellation (URLSession on Linux) then finishes in the background, unread, instead
/// of holding a cancelled sync engine for up to its timeout.
///
/// - Parameter cancelsOperation: Whether the caller's cancellation is passed on to `operation`'s task; `false` for an
///   operation that must never be cancelled (see ``URLSessionTransport``).
func abandoningOnCancel<T: Sendable>(cancelsOperation: Bool = true, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let task = Task { try await operation() }
    let outcome = FirstOutcome<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            outcome.wait(continuation)
            Task { outcome.deliver(await task.result) }
        }
    } onCancel: {
        if cancelsOperation { task.cancel() }
        outcome.deliver(.failure(CancellationError()))
    }
}

/// Resumes one continuation with the first of several outcomes, whichever order they and the continuation come in.
private final class FirstOutcome<T: Sendable>: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<T, any Error>?, result: Result<T, any Error>?, done: Bool)>((nil, nil, false))

    func wait(_ continuation: CheckedContinuation<T, any Error>) {
        let ready = state.withLock { state -> Result<T, any Error>? in
            if let result = state.result, !state.done {
                state.done = true
                return result
            }
            state.continuation = continuation
            return nil
        }
        if let ready { continuation.resume(with: ready) }
    }

    func deliver(_ result: Result<T, any Error>) {
        let waiting = state.withLock { state -> CheckedContinuation<T, any Error>? in
            guard !state.done else { return nil }
            guard let continuation = state.continuation else {
                if state.result == nil { state.result = result }
                return nil
            }
            state.done = true
            return continuation
        }
        waiting?.resume(with: result)
    }
}
