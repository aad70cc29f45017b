import CumulusModel
import Foundation
import HTTPTypes
import Hummingbird

/// The console's HTML: server-rendered pages with no scripts, every value from the store escaped, readable on a phone.
enum ConsolePage {
    static func escape(_ text: String) -> String { LinkPage.escape(text) }

    /// The console's policy: nothing but the page and its own forms; no scripts at all, no framing.
    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    static func response(_ page: String, status: HTTPResponse.Status = .ok, headers extra: HTTPFields = [:]) -> Response {
        var headers: HTTPFields = [
            .contentType: "text/html; charset=utf-8",
            .contentSecurityPolicy: contentSecurityPolicy,
            .init("X-Content-Type-Options")!: "nosniff",
            .init("Referrer-Policy")!: "no-referrer",
            .cacheControl: "no-store",
        ]
        headers.append(contentsOf: extra)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: page)))
    }

    /// A whole page: a header naming the container, navigation for the environment, and the body.
    static func document(title: String, container: String?, environment: ContainerEnvironment?, csrf: String? = nil, body: String) -> String {
        var navigation = ""
        if let container, let environment {
            let base = "/console/\(environment.rawValue)"
            let other: ContainerEnvironment = environment == .development ? .production : .development
            navigation = """
                <header><div class="container" id="container">\(escape(container))</div>
                <nav>
                <a href="\(base)">Overview</a>
                <a href="\(base)/users">Users</a>
                <a href="\(base)/zones/public/\(ZoneID.publicOwnerName)">Public database</a>
                <a href="\(base)/credentials">Tokens and keys</a>
                <a href="\(base)/links">Links</a>
                <a href="\(base)/schema">Schema</a>
                <a href="\(base)/indexes">Indexes</a>
                <a class="environment" href="/console/\(other.rawValue)">\(environment.rawValue) ⇄ \(other.rawValue)</a>
                </nav>
                \(csrf.map { #"<form method="post" action="/console/signout" class="signout"><input type="hidden" name="csrf" value="\#(escape($0))"><button>Sign out</button></form>"# } ?? "")
                </header>
                """
        }
        return """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="robots" content="noindex">
            <title>\(escape(title)) · Cumulus console</title>
            <style>\(style)\(ConsoleCharts.style)</style>
            </head>
            <body>
            \(navigation)
            <main>
            <h1>\(escape(title))</h1>
            \(body)
            </main>
            </body>
            </html>
            """
    }

    /// A table: a header row and escaped cells; a cell that is a link keeps its (escaped) URL.
    static func table(id: String, headers: [String], rows: [[Cell]], empty: String) -> String {
        guard !rows.isEmpty else { return #"<p class="empty" id="\#(id)">\#(escape(empty))</p>"# }
        let head = headers.isEmpty ? "" : "<thead><tr>" + headers.map { "<th>\(escape($0))</th>" }.joined() + "</tr></thead>"
        let body = rows.map { row in "<tr>" + row.map(\.html).joined() + "</tr>" }.joined(separator: "\n")
        return #"<div class="scroll"><table id="\#(id)">"# + head + "<tbody>\n\(body)\n</tbody></table></div>"
    }

    /// A table cell.
    enum Cell {
        case text(String)
        case code(String)
        case link(String, href: String)
        /// Text the operator must not miss (a device out of sync).
        case flag(String)
        /// A button posting a form with the session's token and the given hidden fields.
        case form(action: String, csrf: String, fields: [String: String], button: String)

        var html: String {
            switch self {
            case .form(let action, let csrf, let fields, let button):
                let hidden = ([("csrf", csrf)] + fields.sorted { $0.key < $1.key }).map {
                    #"<input type="hidden" name="\#(ConsolePage.escape($0.0))" value="\#(ConsolePage.escape($0.1))">"#
                }.joined()
                return
                    #"<td><form method="post" action="\#(ConsolePage.escape(action))">\#(hidden)<button>\#(ConsolePage.escape(button))</button></form></td>"#
            case .text(let text): return "<td>\(ConsolePage.escape(text))</td>"
            case .code(let text): return "<td><code>\(ConsolePage.escape(text))</code></td>"
            case .flag(let text): return #"<td class="flag">\#(ConsolePage.escape(text))</td>"#
            case .link(let text, let href): return #"<td><a href="\#(ConsolePage.escape(href))">\#(ConsolePage.escape(text))</a></td>"#
            }
        }
    }

    /// A path segment, percent-encoded so a record or zone name cannot change the URL's shape.
    static func segment(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    static func date(_ milliseconds: Int64) -> String {
        Date(timeIntervalSince1970: Double(milliseconds) / 1000).formatted(.iso8601)
    }

    static let style = """
        body { font-family: -apple-system, system-ui, "Segoe UI", Roboto, sans-serif; margin: 0; background: #f4f5f7; color: #1c1c1e; }
        header { background: #1c1c1e; color: #fff; padding: 10px 16px; }
        header .container { font-weight: 600; word-break: break-all; }
        header nav { display: flex; flex-wrap: wrap; gap: 4px 14px; margin-top: 6px; }
        header a { color: #9ecbff; text-decoration: none; font-size: .95rem; }
        header .environment { color: #ffd479; }
        header .signout { margin-top: 6px; }
        header button { background: none; border: 1px solid #777; color: #ddd; border-radius: 6px; padding: 2px 8px; }
        main { max-width: 960px; margin: 0 auto; padding: 16px; }
        h1 { font-size: 1.4rem; margin: 4px 0 12px; word-break: break-all; }
        h2 { font-size: 1.1rem; margin: 20px 0 8px; }
        .scroll { overflow-x: auto; background: #fff; border-radius: 10px; box-shadow: 0 1px 3px rgba(0,0,0,.08); }
        table { border-collapse: collapse; width: 100%; font-size: .92rem; }
        th, td { text-align: left; padding: 7px 10px; border-bottom: 1px solid #eee; vertical-align: top; }
        th { color: #6b6b70; font-weight: 500; white-space: nowrap; }
        td { word-break: break-word; }
        code, pre { font-family: ui-monospace, Menlo, monospace; font-size: .85rem; }
        pre { background: #fff; padding: 12px; border-radius: 10px; overflow-x: auto; white-space: pre-wrap; word-break: break-word; }
        .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(140px, 1fr)); gap: 10px; }
        .card { background: #fff; border-radius: 10px; padding: 12px; box-shadow: 0 1px 3px rgba(0,0,0,.08); }
        .card b { display: block; font-size: 1.5rem; }
        .card a { color: inherit; text-decoration: none; }
        .empty, .note { color: #6b6b70; }
        .message { background: #e8f5e9; padding: 8px 12px; border-radius: 8px; }
        .error { background: #fdecea; padding: 8px 12px; border-radius: 8px; }
        td.flag { color: #b3261e; font-weight: 600; }
        textarea { width: 100%; box-sizing: border-box; min-height: 160px; font-family: ui-monospace, Menlo, monospace; font-size: .85rem; }
        form.actions { display: flex; gap: 8px; margin-top: 8px; flex-wrap: wrap; }
        button { font-size: .95rem; padding: 6px 14px; border-radius: 8px; border: 1px solid #bbb; background: #fff; }
        button.danger { border-color: #d33; color: #d33; }
        """
}
