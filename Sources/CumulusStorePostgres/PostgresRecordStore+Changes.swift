public import CumulusStore
import Logging
import PostgresNIO
import Synchronization

extension PostgresRecordStore: ChangeBroadcasting {
    /// The channel instances announce commits on.
    static let changeChannel = "cumulus_changes"

    /// Sends `NOTIFY` on its own connection, never in a user's write transaction (a `NOTIFY` there would serialize every
    /// commit on PostgreSQL's notification queue), and at most one at a time: announcements made while one is in
    /// flight are covered by the next.
    public func announceChange() {
        let start = announcements.withLock { state -> Bool in
            if state.inFlight {
                state.again = true
                return false
            }
            state.inFlight = true
            return true
        }
        guard start else { return }
        Task {
            let logger = Logger(label: "cumulus.changes")
            while true {
                _ = try? await self.client.query(PostgresQuery(unsafeSQL: "NOTIFY \(Self.changeChannel)"), logger: logger)
                let again = announcements.withLock { state -> Bool in
                    if state.again {
                        state.again = false
                        return true
                    }
                    state.inFlight = false
                    return false
                }
                if !again { return }
            }
        }
    }

    public func listenForChanges(_ changed: @escaping @Sendable () -> Void) async {
        let logger = Logger(label: "cumulus.changes")
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: Self.changeChannel) { notifications in
                        // Changes made while no one listened (starting, reconnecting) are found by the polls' re-check.
                        changed()
                        for try await _ in notifications { changed() }
                    }
                }
            } catch {
                logger.debug("listening for changes failed; retrying", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }
}

/// Whether a `NOTIFY` is being sent, and whether another is owed once it is.
struct AnnouncementState {
    var inFlight = false
    var again = false
}
