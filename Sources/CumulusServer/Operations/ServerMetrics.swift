import CoreMetrics
import CumulusCore
import CumulusServerHTTP
public import Prometheus
import Synchronization

/// What a server counts, in Prometheus's text format at `/metrics`: requests by route, method and status with their
/// latency, records written and read, change-feed pages, push connections and notifications, link uploads, and
/// requests refused by a limit.
///
/// Metrics are made through swift-metrics with an explicit factory over this server's own registry, so two
/// applications in one process (tests) never share counts; `cumulus serve` also routes the libraries' own metrics
/// (through `MetricsSystem`) into the same registry.
///
/// Labels never carry a container, a user or a record: their number must stay bounded (one series per route and
/// status), and `/metrics` must not reveal who uses the server.
public final class ServerMetrics: Sendable {
    /// The registry `/metrics` renders.
    public let registry: PrometheusCollectorRegistry
    /// Makes metrics in ``registry``, with histogram buckets fine enough for operations of a millisecond or less.
    public let factory: PrometheusMetricsFactory

    private struct RequestKey: Hashable {
        var route: String
        var method: String
        var status: Int
    }

    private let requestCounters = Mutex([RequestKey: CoreMetrics.Counter]())
    private let requestTimers = Mutex([String: CoreMetrics.Timer]())
    private let recordsRead = Mutex([String: CoreMetrics.Counter]())
    private let refusals = Mutex([String: CoreMetrics.Counter]())
    private let verifications = Mutex([String: CoreMetrics.Counter]())
    private let recordsWritten: CoreMetrics.Counter
    private let feedPages: CoreMetrics.Counter
    private let pushConnections: CoreMetrics.Meter
    private let idlePushConnections: CoreMetrics.Meter
    /// The application's change signal, read when the metrics are rendered.
    private let changes = Mutex<ChangeSignal?>(nil)
    private let openConnections: CoreMetrics.Meter
    private let pushNotifications: CoreMetrics.Counter
    private let pushLooks: CoreMetrics.Counter
    private let linkUploads: CoreMetrics.Counter
    private let devicesBehind: ValueHistogram
    private let activeDevices: CoreMetrics.Meter
    /// Devices' sightings, read when the metrics are rendered.
    private let devices = Mutex<(@Sendable () -> Int)?>(nil)
    /// The last hour, minute by minute, for the console's charts.
    public let recent: RecentActivity
    /// How many access-log lines of refused credentials and throttled requests are written; the rest are counted.
    let refusalLines = RefusalLogSampler(linesPerSecond: 20)

    /// - Parameters:
    ///   - registry: Where the metrics are kept; a new one by default.
    ///   - recent: The last hour's counts, minute by minute; on the wall clock by default.
    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry(), recent: RecentActivity = RecentActivity()) {
        self.registry = registry
        self.recent = recent
        var factory = PrometheusMetricsFactory(registry: registry)
        // Requests take milliseconds and store operations less: finer buckets at the low end than the factory's default
        // (5 ms and up).
        factory.defaultDurationHistogramBuckets = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
            .milliseconds(25),
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5),
        ]
        self.factory = factory
        recordsWritten = Counter(label: "cumulus_records_written_total", factory: factory)
        feedPages = Counter(label: "cumulus_change_feed_pages_total", factory: factory)
        pushConnections = Meter(label: "cumulus_push_connections", factory: factory)
        idlePushConnections = Meter(label: "cumulus_push_idle_connections", factory: factory)
        openConnections = Meter(label: "cumulus_open_connections", factory: factory)
        pushNotifications = Counter(label: "cumulus_push_notifications_total", factory: factory)
        pushLooks = Counter(label: "cumulus_push_looks_total", factory: factory)
        linkUploads = Counter(label: "cumulus_link_uploads_total", factory: factory)
        devicesBehind = registry.makeValueHistogram(
            descriptor: MetricNameDescriptor(
                metricName: "cumulus_device_changes_behind", unitName: "",
                helpText: "Changes of their private database identified devices had to fetch, at each fetch that reached the end of the feed."),
            buckets: [0, 1, 2, 5, 10, 50, 100, 1000, 10000])
        activeDevices = Meter(label: "cumulus_devices_active", factory: factory)
    }

    /// Reports, as `cumulus_devices_active`, how many identified devices this instance saw in the last hour.
    func observeDevices(_ count: @escaping @Sendable () -> Int) {
        devices.withLock { $0 = count }
    }

    /// A device fetched its private database's feed to the end, having been `changes` behind.
    public func deviceFetched(behind changes: Int64) {
        devicesBehind.record(Double(changes))
        recent.add(changes > 0 ? .fetchesBehind : .fetchesInStep)
    }

    /// A device reported a verification, in sync or not.
    public func deviceVerified(inSync: Bool) {
        let result = inSync ? "in_sync" : "out_of_sync"
        let counter = verifications.withLock { counters in
            if let counter = counters[result] { return counter }
            let counter = Counter(label: "cumulus_device_verifications_total", dimensions: [("result", result)], factory: factory)
            counters[result] = counter
            return counter
        }
        counter.increment()
        recent.add(inSync ? .verificationsInSync : .verificationsOutOfSync)
    }

    /// The text exposition format, version 0.0.4.
    public func exposition() -> [UInt8] {
        if let changes = changes.withLock({ $0 }) { idlePushConnections.set(changes.idle) }
        if let count = devices.withLock({ $0 }) { activeDevices.set(count()) }
        return registry.emitToBuffer()
    }

    /// Reports, as `cumulus_push_idle_connections`, how many push connections wait for a change of this signal's.
    func observe(_ signal: ChangeSignal) {
        changes.withLock { $0 = signal }
    }

    func request(route: String, method: String, status: Int, duration: Duration) {
        let key = RequestKey(route: route, method: method, status: status)
        let counter = requestCounters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Counter(
                label: "cumulus_requests_total", dimensions: [("route", route), ("method", method), ("status", String(status))],
                factory: factory)
            counters[key] = counter
            return counter
        }
        counter.increment()
        recent.add(.requests)
        let timer = requestTimers.withLock { timers in
            if let timer = timers[route] { return timer }
            let timer = Timer(label: "cumulus_request_duration_seconds", dimensions: [("route", route)], factory: factory)
            timers[route] = timer
            return timer
        }
        timer.recordNanoseconds(duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
    }

    /// Records saved or deleted by `records/modify`.
    func wrote(_ count: Int) {
        if count > 0 {
            recordsWritten.increment(by: count)
            recent.add(.recordsWritten, count)
        }
    }

    /// A change-feed page and the records it carries.
    func feedPage(records: Int) {
        feedPages.increment()
        read(records, operation: "changes")
    }

    /// A courier poll or stream opened (`true`) or closed.
    func pushConnection(opened: Bool) {
        if opened { pushConnections.increment() } else { pushConnections.decrement() }
        recent.pushConnections(opened ? 1 : -1)
    }

    func pushNotificationSent() {
        pushNotifications.increment()
        recent.add(.pushDeliveries)
    }

    /// A push connection looked at the feeds (a read of the store): about one a delivered notification when all is well.
    func pushLooked() { pushLooks.increment() }

    /// An HTTP connection was admitted or closed.
    func connection(opened: Bool) {
        if opened { openConnections.increment() } else { openConnections.decrement() }
    }

    func linksCreated(_ count: Int) {
        if count > 0 { linkUploads.increment(by: count) }
    }

    /// Records sent back by a read: `operation` is `lookup`, `query` or `changes`.
    func read(_ count: Int, operation: String) {
        guard count > 0 else { return }
        let counter = recordsRead.withLock { counters in
            if let counter = counters[operation] { return counter }
            let counter = Counter(label: "cumulus_records_read_total", dimensions: [("operation", operation)], factory: factory)
            counters[operation] = counter
            return counter
        }
        counter.increment(by: count)
    }

    /// A request refused by a limit: `limit` is `requests` (the per-caller rate), `connections` or `sign_in`.
    func refused(limit: String) {
        let counter = refusals.withLock { counters in
            if let counter = counters[limit] { return counter }
            let counter = Counter(label: "cumulus_limit_refusals_total", dimensions: [("limit", limit)], factory: factory)
            counters[limit] = counter
            return counter
        }
        counter.increment()
    }
}
extension ServerMetrics: ConnectionMetrics {}
