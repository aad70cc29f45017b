import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO
import Synchronization

extension PostgresRecordStore: CommandAnnouncing {
    /// Sent whether or not another instance was seen listening, and awaited: the command exits next. Instances that
    /// watch the databases (`--fan-out watch`) see the positions move by themselves.
    public func announceFromCommand(_ keys: Set<String>, logger: Logger) async {
        guard case .notify = fanOut, !keys.isEmpty else { return }
        let payload = "@command\n" + Self.payload(keys)
        do {
            try await client.query("SELECT pg_notify(\(Self.changeChannel), \(payload))", logger: logger)
        } catch {
            logger.warning("could not tell the servers of the change", metadata: ["error": "\(error)"])
        }
    }

    /// The servers' own listeners (``listenForChanges(watching:_:)``) hear commands: nothing more to do.
    public func listenForCommands(_ changed: @escaping @Sendable (Set<String>) -> Void) async {}
}

extension PostgresRecordStore: ChangeBroadcasting {
    /// The channel instances announce commits on.
    static let changeChannel = "cumulus_changes"
    /// PostgreSQL refuses payloads of 8,000 bytes and more; past this, an announcement says "anything".
    static let largestPayload = 7_000
    /// The payload meaning "anything may have changed".
    static let anythingPayload = "*"

    /// Tells the other instances (this one's connections were woken at the commit). Sends `NOTIFY` on its own
    /// connection, never in a user's write transaction (a `NOTIFY` there would serialize every commit on PostgreSQL's
    /// notification queue), and at most one at a time: keys announced while one is in flight go together in the next.
    ///
    /// When no other instance listens (``listenForChanges(watching:_:)`` looks every second), nothing is sent: the `NOTIFY` is a
    /// round trip and a connection of its own at every write, about a tenth of a single write's CPU, for nobody.
    public func announceChange(_ keys: Set<String>) {
        // Watched, not announced: the other instances read the databases' positions themselves.
        guard case .notify = fanOut else { return }
        let start = announcements.withLock { state -> Bool in
            guard state.othersListening else { return false }
            state.pending.formUnion(keys)
            if state.inFlight { return false }
            state.inFlight = true
            return true
        }
        guard start else { return }
        Task {
            let logger = Logger(label: "cumulus.changes")
            while true {
                let keys = announcements.withLock { state -> Set<String>? in
                    guard !state.pending.isEmpty else {
                        state.inFlight = false
                        return nil
                    }
                    defer { state.pending = [] }
                    return state.pending
                }
                guard let keys else { return }
                let payload = self.instance + "\n" + Self.payload(keys)
                _ = try? await self.client.query("SELECT pg_notify(\(Self.changeChannel), \(payload))", logger: logger)
            }
        }
    }

    /// Keys one per line, or "anything" when they would not fit (or a key holds a line break).
    static func payload(_ keys: Set<String>) -> String {
        let joined = keys.sorted().joined(separator: "\n")
        if joined.utf8.count > largestPayload || keys.contains(where: { $0.contains("\n") || $0.isEmpty }) { return anythingPayload }
        return joined
    }

    public func listenForChanges(watching: @escaping @Sendable () -> Set<String>, _ changed: @escaping @Sendable (Set<String>?) -> Void) async {
        let logger = Logger(label: "cumulus.changes")
        if case .watch(let interval) = fanOut {
            await watchDatabases(every: interval, watching: watching, changed: changed, logger: logger)
            return
        }
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    var pid: Int32 = 0
                    for try await found in try await connection.query("SELECT pg_backend_pid()", logger: logger).decode(Int32.self) { pid = found }
                    let listener = pid
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            try await connection.listen(on: Self.changeChannel) { notifications in
                                // Changes made while no one listened (starting, reconnecting) may concern anyone.
                                changed(nil)
                                for try await notification in notifications {
                                    var lines = notification.payload.split(separator: "\n", omittingEmptySubsequences: false)
                                    // The sender's name first (an earlier version sent none): this instance's own are skipped.
                                    if let first = lines.first, first.hasPrefix("@") {
                                        if first == self.instance { continue }
                                        lines.removeFirst()
                                    }
                                    changed(lines.isEmpty || lines == [Substring(Self.anythingPayload)] ? nil : Set(lines.map(String.init)))
                                }
                            }
                        }
                        group.addTask { try await self.watchListeners(besides: listener, changed: changed, logger: logger) }
                        try await group.next()
                        group.cancelAll()
                    }
                }
            } catch {
                logger.debug("listening for changes failed; retrying", metadata: ["error": "\(error)"])
            }
            // Not listening, this instance cannot tell who else does: it announces to be safe.
            announcements.withLock { $0.othersListening = true }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// Every second, whether another instance listens: a backend of this database whose last statement was the `LISTEN`
    /// (or one whose statements this role may not see). An instance that starts listening is seen within a second, and,
    /// when others listen, wakes all its own connections once more after two, for the commits announced to nobody in
    /// between.
    func watchListeners(besides listener: Int32, changed: @escaping @Sendable (Set<String>?) -> Void, logger: Logger) async throws {
        var rounds = 0
        while !Task.isCancelled {
            var others = true
            do {
                let rows = try await query(
                    """
                    SELECT count(*) FROM pg_stat_activity
                    WHERE datname = current_database() AND pid <> \(listener) AND backend_type = 'client backend'
                    AND (query LIKE \("LISTEN \"\(Self.changeChannel)\"%") OR query = '<insufficient privilege>')
                    """, logger: logger)
                for try await count in rows.decode(Int64.self) { others = count > 0 }
            } catch {
                others = true
            }
            announcements.withLock { $0.othersListening = others }
            rounds += 1
            // Alone, nobody's commits went unannounced to this instance.
            if rounds == 3, others { changed(nil) }
            try await Task.sleep(for: .seconds(1))
        }
    }

    /// The other fan-out: every `interval`, the positions of the databases this instance's connections wait on, read
    /// in one statement; a database whose position moved wakes its connections. No `NOTIFY`, so it also works through
    /// a pooler in transaction mode (PgBouncer), where `LISTEN` does not; the price is up to `interval` of latency and
    /// one read an interval per instance. A database seen for the first time wakes its connections once, for a commit
    /// between their look and this read.
    func watchDatabases(
        every interval: Duration, watching: @Sendable () -> Set<String>, changed: @Sendable (Set<String>?) -> Void, logger: Logger
    ) async {
        var positions: [String: Int64] = [:]
        while !Task.isCancelled {
            let keys = watching()
            let databases = keys.compactMap { key in DatabaseRef(changeKey: key).map { (key: key, database: $0) } }
            if databases.isEmpty {
                positions = [:]
            } else {
                do {
                    let rows = try await query(
                        """
                        SELECT w.position, d.change_seq FROM databases d
                        JOIN unnest(\(databases.map { $0.database.container })::text[], \(databases.map { $0.database.environment.rawValue })::text[],
                            \(databases.map { $0.database.scope.rawValue })::text[], \(databases.map { $0.database.ownerRecordName })::text[]) WITH ORDINALITY
                            AS w(container_id, environment, scope, owner_record_name, position)
                        ON d.container_id = w.container_id AND d.environment = w.environment AND d.scope = w.scope
                            AND d.owner_record_name = w.owner_record_name
                        """, logger: logger)
                    var woken: Set<String> = []
                    var seen: [String: Int64] = [:]
                    for try await (position, sequence) in rows.decode((Int64, Int64).self) {
                        let key = databases[Int(position) - 1].key
                        seen[key] = sequence
                        if positions[key] != sequence { woken.insert(key) }
                    }
                    // Keys no longer watched are forgotten; one watched again wakes once more.
                    positions = seen
                    if !woken.isEmpty { changed(woken) }
                } catch {
                    logger.debug("watching databases failed; retrying", metadata: ["error": "\(error)"])
                    // What changed meanwhile is unknown.
                    positions = [:]
                }
            }
            try? await Task.sleep(for: interval)
        }
    }

    /// Whether announcements are sent: another instance listens, or this one cannot tell (for tests).
    var announcesChanges: Bool { announcements.withLock { $0.othersListening } }
}

/// How instances over one database wake each other's push connections when they commit.
public enum ChangeFanOut: Sendable, Hashable {
    /// `NOTIFY` after each commit (on a connection of its own, never in the writer's transaction), heard by the other
    /// instances' `LISTEN`; sent only while another instance listens.
    case notify
    /// Each instance reads the positions of the databases its connections wait on, every `interval`; nothing is sent.
    case watch(interval: Duration)
}

/// Whether a `NOTIFY` is being sent, the keys owed in the next, and whether anyone else listens.
struct AnnouncementState {
    var inFlight = false
    var pending: Set<String> = []
    /// Another instance listens on the channel (``PostgresRecordStore/listenForChanges(watching:_:)`` keeps it current); `true`
    /// while that is not known.
    var othersListening = true
}
