import CumulusCore
import Foundation
import Hummingbird
import Logging
import Synchronization

/// The page at `/`: what this server is, whether it serves, the next step on a new server, and where to go from here
/// (the console, the API's description, health and metrics).
///
/// A stranger may read it, so it tells the server's state and nothing of its users: whether the store answers, since
/// when the instance serves, and whether any container exists yet (a new server's next step is to make one), never a
/// container's name or a count.
enum LandingPage {
    /// What the page shows of the server.
    struct State: Sendable {
        /// When this instance started, and now (milliseconds since 1970).
        var startedAt: Int64
        var now: Int64
        /// Whether the store answered a read of its containers.
        var storeAnswers: Bool
        var hasContainers: Bool
    }

    /// The state, read from the store at most once every `lifetime`, however often strangers load the page.
    final class Probe: Sendable {
        private let accounts: AccountService
        private let clock: WallClock
        private let startedAt: Int64
        private let lifetime: Int64 = 5_000
        private let last = Mutex<State?>(nil)

        init(accounts: AccountService, clock: WallClock) {
            self.accounts = accounts
            self.clock = clock
            self.startedAt = clock.milliseconds()
        }

        func state(logger: Logger) async -> State {
            let now = clock.milliseconds()
            if var state = last.withLock({ $0 }), now - state.now < lifetime {
                state.now = now
                return state
            }
            var state = State(startedAt: startedAt, now: now, storeAnswers: false, hasContainers: false)
            do {
                state.hasContainers = !(try await accounts.listContainers(logger: logger)).isEmpty
                state.storeAnswers = true
            } catch {
                logger.warning("the landing page's read of the store failed", metadata: ["error": "\(error)"])
            }
            last.withLock { $0 = state }
            return state
        }
    }

    /// The page; `metricsPort` when `/metrics` is served on a port of its own.
    static func html(metricsPort: Int?, state: State) -> String {
        let metrics =
            metricsPort.map { "<li><code>/metrics</code> is served on port \($0) only (<code>--metrics-port</code>).</li>" }
            ?? #"<li><a href="/metrics">/metrics</a>: Prometheus metrics (requests, connections, push, the store).</li>"#
        let since = Date(timeIntervalSince1970: Double(state.startedAt) / 1000).formatted(.iso8601)
        let store =
            state.storeAnswers
            ? #"<li class="ok" id="store-state"><span class="dot"></span>The store answers.</li>"#
            : #"<li class="problem" id="store-state"><span class="dot"></span>The store does not answer: requests fail with 503 until it does; <code>cumulus doctor</code> says why.</li>"#
        let next =
            state.hasContainers
            ? """
            <section id="next-step"><h2>Next</h2>
            <p>Sign in to <a href="/console">the console</a> with the link <code>cumulus console --container ID</code> prints, and see
            what each container holds and what this instance did in the last hour.</p></section>
            """
            : """
            <section id="next-step" class="first"><h2>Next: make a container</h2>
            <p>No container yet. Where the server keeps its data (the folder it started in, or the same <code>--data</code>):</p>
            <pre>cumulus containers create iCloud.com.example.app
            cumulus tokens create --container iCloud.com.example.app     # the app's ckAPIToken
            cumulus console --container iCloud.com.example.app           # a sign-in link to the console</pre>
            <p>The README's walk-through goes on from there: a user, a zone, a record arriving through the change feed.</p></section>
            """
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Cumulus</title>
            <style>
            body { font: 16px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 2rem auto; padding: 0 1rem; color: #1d1d1f; }
            h1 { font-size: 1.6rem; margin-bottom: 0; display: flex; align-items: center; gap: .5rem; }
            h2 { font-size: 1.15rem; margin: 0 0 .4rem; }
            p.version { color: #6e6e73; margin-top: 0.2rem; }
            li { margin: 0.4rem 0; } code, pre { font-size: 0.92em; }
            ul.state { list-style: none; padding: 0; }
            .dot { display: inline-block; width: .7rem; height: .7rem; border-radius: 50%; margin-right: .5rem; background: #34c759; }
            .problem .dot { background: #ff3b30; } .problem { color: #b3261e; }
            section { background: #f4f5f7; border-radius: 12px; padding: .8rem 1rem; margin: 1rem 0; }
            section.first { background: #eef6ff; }
            pre { background: #fff; padding: .6rem; border-radius: 8px; overflow-x: auto; }
            </style></head>
            <body>
            <h1><svg width="40" height="28" viewBox="0 0 40 28" aria-hidden="true"><path d="M11 26h20a8 8 0 0 0 0-16 11 11 0 0 0-21-1A8.5 8.5 0 0 0 11 26z" fill="#7fb4ff"/></svg>Cumulus</h1>
            <p class="version">version \(LinkPage.escape(CumulusVersion.current))</p>
            <ul class="state">
            <li class="ok" id="serving"><span class="dot"></span>This instance serves, since \(since).</li>
            \(store)
            </ul>
            \(next)
            <p>A self-hosted server with CloudKit's data model and the wire format of CloudKit Web Services: clients talk to
            <code>/database/1/{container}/{environment}/{database}/…</code> with an API token.</p>
            <ul>
            <li><a href="/console">The console</a>: users, zones, records, shares, links and indexes of a container, and this
            instance's last hour. Sign in with the link <code>cumulus console --container …</code> prints.</li>
            <li><a href="/openapi.json">/openapi.json</a>: the HTTP API, described in OpenAPI 3.1.</li>
            <li><a href="/health">/health</a>: answers <code>ok</code> while this instance serves.</li>
            \(metrics)
            </ul>
            <p>The documentation is in the source tree's <code>docs/</code> (and the release tarball's): <code>API.md</code>,
            <code>SYNC.md</code>, <code>SHARING.md</code>, <code>LINKS.md</code>, <code>PUSH.md</code>, <code>DEPLOY.md</code> and
            <code>OPERATIONS.md</code>; <code>cumulus --help</code> lists the commands.</p>
            </body></html>
            """
    }
}
