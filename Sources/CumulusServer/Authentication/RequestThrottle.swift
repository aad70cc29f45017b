import CumulusCore
import Hummingbird
import Synchronization

/// Limits on the database API per caller: a signed-in user's device (its web auth token), a server-to-server key, or
/// (for requests made with the API token alone) the client's address.
public struct RequestLimits: Sendable, Hashable {
    /// Requests per second a caller may make on average; 0 turns the rate limit off.
    public var requestsPerSecond: Double
    /// Requests a caller may make at once above the average (the bucket's size).
    public var burst: Int
    /// Requests of one caller this instance works on at once; more are refused rather than queued, so a caller that
    /// opens hundreds of connections gets no more of the server than one that opens a few. 0 turns it off.
    public var concurrentRequests: Int
    /// How long a refused request waits before its `429` is sent. A flooder's connections then each make one request
    /// in this time instead of hundreds, so refusing them costs the server little; a well-behaved client waits its
    /// `retryAfter` anyway.
    public var refusalDelay: Duration

    public init(requestsPerSecond: Double = 100, burst: Int = 300, concurrentRequests: Int = 8, refusalDelay: Duration = .seconds(1)) {
        self.requestsPerSecond = requestsPerSecond
        self.burst = burst
        self.concurrentRequests = concurrentRequests
        self.refusalDelay = refusalDelay
    }

    /// No limits.
    public static var unlimited: Self { .init(requestsPerSecond: 0, burst: 0, concurrentRequests: 0, refusalDelay: .zero) }
}

/// Token buckets and in-flight counts per caller, in this instance's memory.
///
/// Held per instance: behind a load balancer, a caller spread over `n` instances gets up to `n` times the rate (set
/// the rate per instance accordingly). Counting every request in the shared store would cost a write per request.
final class RequestThrottle: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
        var inFlight: Int
    }

    private final class Shard: Sendable {
        let buckets = Mutex<[String: Bucket]>([:])
        /// Credentials (web auth tokens, key IDs) this instance has seen authenticate: each has a bucket of its own.
        let verified = Mutex<Set<String>>([])
    }

    /// Buckets spread over shards by key, so concurrent requests of different callers rarely meet on one lock.
    private let shards: [Shard]
    let limits: RequestLimits
    /// Buckets a shard keeps before it forgets the full, idle ones.
    private let shardCapacity = 4_096

    init(limits: RequestLimits) {
        self.limits = limits
        self.shards = (0..<16).map { _ in Shard() }
    }

    enum Admission: Equatable {
        case admitted
        /// Refused; the caller may retry after this many seconds.
        case refused(retryAfter: Int, reason: String)
    }

    /// Takes a token and an in-flight place for `key`, or refuses.
    func admit(_ key: String, now: ContinuousClock.Instant = .now) -> Admission {
        let limits = self.limits
        return shard(key).buckets.withLock { buckets in
            var bucket = buckets[key] ?? Bucket(tokens: Double(limits.burst), updated: now, inFlight: 0)
            if limits.requestsPerSecond > 0 {
                let elapsed = Double((now - bucket.updated).components.attoseconds) / 1e18 + Double((now - bucket.updated).components.seconds)
                bucket.tokens = min(Double(limits.burst), bucket.tokens + elapsed * limits.requestsPerSecond)
                bucket.updated = now
                guard bucket.tokens >= 1 else {
                    buckets[key] = bucket
                    let wait = (1 - bucket.tokens) / limits.requestsPerSecond
                    return .refused(
                        retryAfter: max(1, Int(wait.rounded(.up))),
                        reason: "too many requests: at most \(Int(limits.requestsPerSecond)) per second on average")
                }
            }
            if limits.concurrentRequests > 0, bucket.inFlight >= limits.concurrentRequests {
                buckets[key] = bucket
                return .refused(retryAfter: 1, reason: "too many requests at once: at most \(limits.concurrentRequests)")
            }
            if limits.requestsPerSecond > 0 { bucket.tokens -= 1 }
            bucket.inFlight += 1
            if buckets.count >= shardCapacity, buckets[key] == nil { forgetIdle(&buckets, now: now) }
            buckets[key] = bucket
            return .admitted
        }
    }

    /// Whether a credential key (``RequestThrottleMiddleware/credentialKey(_:)``) has authenticated on this instance.
    func isVerified(_ credential: String) -> Bool {
        shard(credential).verified.withLock { $0.contains(credential) }
    }

    /// Notes that a credential authenticated. The set is bounded: past its size an arbitrary one is forgotten, which
    /// costs that caller one request counted against its address.
    func markVerified(_ credential: String) {
        shard(credential).verified.withLock { verified in
            if verified.count >= shardCapacity * 4, !verified.contains(credential) { verified.removeFirst() }
            verified.insert(credential)
        }
    }

    /// Gives back the in-flight place taken by ``admit(_:now:)``.
    func finish(_ key: String) {
        shard(key).buckets.withLock { buckets in buckets[key]?.inFlight -= 1 }
    }

    private func shard(_ key: String) -> Shard {
        shards[Int(UInt(bitPattern: key.hashValue) % UInt(shards.count))]
    }

    /// Forgets callers with nothing in flight whose buckets have refilled: they would start full anyway.
    private func forgetIdle(_ buckets: inout [String: Bucket], now: ContinuousClock.Instant) {
        let refill: Duration = limits.requestsPerSecond > 0 ? .seconds(Double(limits.burst) / limits.requestsPerSecond) : .zero
        buckets = buckets.filter { $0.value.inFlight > 0 || now - $0.value.updated < refill }
    }
}

/// Applies ``RequestLimits`` to each database request, answering 429 `THROTTLED` with `retryAfter`.
///
/// It runs before authentication, so a refused request costs no store read: a flood is turned away for the price of
/// parsing its head.
struct RequestThrottleMiddleware: RouterMiddleware {
    typealias Context = CumulusRequestContext

    let throttle: RequestThrottle
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let credential = Self.credentialKey(request)
        let key = credential.flatMap { throttle.isVerified($0) ? $0 : nil } ?? Self.addressKey(context)
        switch throttle.admit(key) {
        case .refused(let retryAfter, let reason):
            metrics.refused(limit: "requests")
            if throttle.limits.refusalDelay > .zero { try await Task.sleep(for: throttle.limits.refusalDelay) }
            throw CumulusError(.throttled, reason, retryAfter: retryAfter)
        case .admitted:
            defer { throttle.finish(key) }
            let response = try await next(request, context)
            // Answered, so authenticated: the credential has a bucket of its own from now on.
            if let credential, key != credential { throttle.markVerified(credential) }
            return response
        }
    }

    /// What a request counts against: a credential this instance has seen authenticate (the user's web auth token, one
    /// signed-in device; or a server-to-server key) has a bucket of its own; anything else, the API token alone or a
    /// credential not yet seen to work, counts against the client's address. So made-up tokens, however many, share
    /// their sender's one bucket, and cost no more than one caller's flood. Tokens are kept only as map keys, never
    /// logged.
    static func credentialKey(_ request: Request) -> String? {
        if let token = request.uri.queryParameters["ckWebAuthToken"], !token.isEmpty { return "token:" + String(token) }
        if let keyID = request.headers[.cloudKitKeyID] { return "key:" + keyID }
        return nil
    }

    static func addressKey(_ context: Context) -> String { "address:" + context.remoteAddress }
}
