import Hummingbird

/// The page at `/`: what this server is and where to go from here (the console, the API's description, health and
/// metrics). It says nothing about any container or user: a stranger may read it.
enum LandingPage {
    /// The page; `metricsPort` when `/metrics` is served on a port of its own.
    static func html(metricsPort: Int?) -> String {
        let metrics =
            metricsPort.map { "<li><code>/metrics</code> is served on port \($0) only (<code>--metrics-port</code>).</li>" }
            ?? #"<li><a href="/metrics">/metrics</a>: Prometheus metrics (requests, connections, push, the store).</li>"#
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Cumulus</title>
            <style>
            body { font: 16px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 2rem auto; padding: 0 1rem; color: #1d1d1f; }
            h1 { font-size: 1.6rem; margin-bottom: 0; } p.version { color: #6e6e73; margin-top: 0.2rem; }
            li { margin: 0.4rem 0; } code { font-size: 0.95em; }
            </style></head>
            <body>
            <h1>Cumulus</h1>
            <p class="version">version \(LinkPage.escape(CumulusVersion.current))</p>
            <p>A self-hosted server with CloudKit's data model and the wire format of CloudKit Web Services: clients talk to
            <code>/database/1/{container}/{environment}/{database}/…</code> with an API token.</p>
            <ul>
            <li><a href="/console">The console</a>: users, zones, records, shares, links and indexes of a container. Sign in with the
            link <code>cumulus console --container …</code> prints.</li>
            <li><a href="/openapi.json">/openapi.json</a>: the HTTP API, described in OpenAPI 3.1.</li>
            <li><a href="/health">/health</a>: answers <code>ok</code> while this instance serves.</li>
            \(metrics)
            </ul>
            <p>The documentation is in the source tree's <code>docs/</code>: <code>API.md</code>, <code>SYNC.md</code>,
            <code>SHARING.md</code>, <code>LINKS.md</code>, <code>PUSH.md</code>, <code>DEPLOY.md</code> and <code>OPERATIONS.md</code>;
            <code>cumulus --help</code> lists the commands.</p>
            </body></html>
            """
    }
}
