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

    /// Tells the other instances (this one's connections were woken at the commit). Sends `NOTIFY` on its own connection, never in a user's write transaction (a `NOTIFY` there would serialize every
    /// commit on PostgreSQL's notification queue), and at most one at a time: keys announced while one is in flight go
    /// together in the next.
    public func announceChange(_ keys: Set<String>) {
        let start = announcements.withLock { state -> Bool in
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
            } catch {
                logger.debug("listening for changes failed; retrying", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }
}

/// Whether a `NOTIFY` is being sent, and the keys owed in the next.
struct AnnouncementState {
    var inFlight = false
    var pending: Set<String> = []
}
