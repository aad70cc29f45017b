public import CumulusStore
import Logging
import PostgresNIO
import Synchronization

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
    /// When no other instance listens (``listenForChanges(_:)`` looks every second), nothing is sent: the `NOTIFY` is a
    /// round trip and a connection of its own at every write, about a tenth of a single write's CPU, for nobody.
    public func announceChange(_ keys: Set<String>) {
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

    public func listenForChanges(_ changed: @escaping @Sendable (Set<String>?) -> Void) async {
        let logger = Logger(label: "cumulus.changes")
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

    /// Whether announcements are sent: another instance listens, or this one cannot tell (for tests).
    var announcesChanges: Bool { announcements.withLock { $0.othersListening } }
}

/// Whether a `NOTIFY` is being sent, the keys owed in the next, and whether anyone else listens.
struct AnnouncementState {
    var inFlight = false
    var pending: Set<String> = []
    /// Another instance listens on the channel (``PostgresRecordStore/listenForChanges(_:)`` keeps it current); `true`
    /// while that is not known.
    var othersListening = true
}
