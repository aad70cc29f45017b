import Crypto
import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// The web console at `/console`: a container's administrator looks at its users, credentials, databases, zones and
/// records (and edits or deletes a record), shares and participants, subscriptions, links, schema and the field
/// indexes its queries use (and drops one only its container uses).
///
/// The administrator signs in with a link `cumulus console --container …` prints: it works once, within 15 minutes,
/// and starts a 12-hour session in an `HttpOnly`, `SameSite=Strict` cookie scoped to `/console`. Forms carry a token
/// derived from the session, so another site cannot post them. Pages have no scripts; the policy forbids them.
struct ConsoleRoutes {
    let accounts: AccountService
    let database: DatabaseService
    let console: ConsoleService
    /// This instance's last hour, for the overview's charts.
    let recent: RecentActivity
    let secureCookies: Bool

    static let cookieName = "cumulus_console"
    /// Records a zone page lists at once.
    static let pageSize = 200

    func register(on router: Router<CumulusRequestContext>) {
        router.get("console/signin", use: signIn)
        router.post("console/signout", use: signOut)
        router.get("console") { _, _ in Response(status: .seeOther, headers: [.location: "/console/development"]) }
        router.get("console/:environment", use: overview)
        router.get("console/:environment/users", use: users)
        router.get("console/:environment/users/:user", use: user)
        router.get("console/:environment/credentials", use: credentials)
        router.get("console/:environment/links", use: links)
        router.get("console/:environment/schema", use: schema)
        router.get("console/:environment/indexes", use: indexes)
        router.post("console/:environment/indexes", use: dropIndex)
        router.get("console/:environment/zones/:scope/:owner", use: zones)
        router.get("console/:environment/zones/:scope/:owner/:zone", use: records)
        router.post("console/:environment/zones/:scope/:owner/:zone", use: changeZone)
        router.get("console/:environment/zones/:scope/:owner/:zone/:record", use: record)
        router.post("console/:environment/zones/:scope/:owner/:zone/:record", use: changeRecord)
    }

    // MARK: - Signing in

    @Sendable func signIn(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        guard let token = request.uri.queryParameters["token"].map(String.init),
            let (session, _) = try await accounts.startConsoleSession(signInToken: token, logger: context.logger)
        else {
            return ConsolePage.response(Self.signedOutPage("This sign-in link was used already or has expired."), status: .unauthorized)
        }
        let cookie =
            "\(Self.cookieName)=\(session); Path=/console; HttpOnly; SameSite=Strict; Max-Age=\(AccountService.consoleSessionLifetime / 1000)"
            + (secureCookies ? "; Secure" : "")
        // `next` may name a console page to land on; anything else (another site, another path) lands on the overview.
        let next = request.uri.queryParameters["next"].map(String.init)
        let destination =
            next.flatMap { $0.hasPrefix("/console/") && !$0.contains("//") && !$0.contains("\\") && !$0.contains("@") ? $0 : nil }
            ?? "/console/development"
        return Response(status: .seeOther, headers: [.location: destination, .setCookie: cookie, .cacheControl: "no-store"])
    }

    @Sendable func signOut(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        let session: Session
        do {
            session = try await self.session(request, context: context)
        } catch is ConsoleSignInRequired {
            return ConsolePage.response(Self.signedOutPage("You are signed out."), status: .unauthorized)
        }
        let form = try await Self.form(request)
        guard form["csrf"] == session.csrf else { throw CumulusError(.accessDenied, "csrf: the form is not from this session") }
        try await accounts.endConsoleSession(sessionToken: session.token, logger: context.logger)
        return ConsolePage.response(
            Self.signedOutPage("You are signed out."), status: .ok,
            headers: [.setCookie: "\(Self.cookieName)=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"])
    }

    static func signedOutPage(_ message: String) -> String {
        ConsolePage.document(
            title: "Sign in", container: nil, environment: nil,
            body: """
                <p class="note" id="signed-out">\(ConsolePage.escape(message))</p>
                <p>Sign in with a link from the command line, on the server's machine:</p>
                <pre>cumulus console --container iCloud.com.example.app</pre>
                <p class="note">A link works once, for 15 minutes; the session it starts lasts 12 hours.</p>
                """)
    }

    /// The signed-in session, or a sign-in page.
    struct Session {
        var token: String
        var container: String
        /// What the session's forms carry, so another site cannot post them.
        var csrf: String
    }

    func session(_ request: Request, context: CumulusRequestContext) async throws -> Session {
        let cookies = request.headers[values: .cookie].flatMap { $0.split(separator: ";") }
        let token = cookies.lazy.compactMap { cookie -> String? in
            let parts = cookie.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            return parts.count == 2 && parts[0] == Self.cookieName ? String(parts[1]) : nil
        }.first
        guard let token, let container = try await accounts.consoleContainer(sessionToken: token, logger: context.logger) else {
            throw ConsoleSignInRequired()
        }
        let csrf = SHA256.hash(data: Data("cumulus console form:\(token)".utf8)).map { String(format: "%02x", $0) }.joined()
        return Session(token: token, container: container, csrf: csrf)
    }

    /// Thrown by a page when no session is signed in; answered with the sign-in page.
    struct ConsoleSignInRequired: Error {}

    /// Runs a page, answering the sign-in page without a session.
    private func page(
        _ request: Request, context: CumulusRequestContext, _ body: (Session, ContainerEnvironment) async throws -> Response
    ) async throws -> Response {
        let session: Session
        do {
            session = try await self.session(request, context: context)
        } catch is ConsoleSignInRequired {
            return ConsolePage.response(Self.signedOutPage("Sign in to use the console."), status: .unauthorized)
        }
        guard let environment = context.parameters.get("environment").flatMap(ContainerEnvironment.init(rawValue:)) else {
            throw CumulusError(.notFound, "environment: must be development or production")
        }
        return try await body(session, environment)
    }

    private func render(_ title: String, _ session: Session, _ environment: ContainerEnvironment, _ body: String) -> Response {
        ConsolePage.response(
            ConsolePage.document(title: title, container: session.container, environment: environment, csrf: session.csrf, body: body))
    }

    // MARK: - Pages

    @Sendable func overview(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let logger = context.logger
            let container = session.container
            let users = try await console.users(container: container, logger: logger)
            let (tokens, keys) = try await console.credentials(container: container, environment: environment, logger: logger)
            let links = try await console.links(container: container, environment: environment, limit: 1000, logger: logger)
            let publicZones = try await console.zones(in: .publicDatabase(container: container, environment: environment), logger: logger)
            let schema = try await database.schemas.schema(container: container, environment: environment, logger: logger)
            let outOfSync = try await console.devicesOutOfSync(container: container, environment: environment, logger: logger)
            let base = "/console/\(environment.rawValue)"
            func card(_ label: String, _ count: Int, _ href: String) -> String {
                #"<div class="card"><a href="\#(href)"><b>\#(count)</b>\#(ConsolePage.escape(label))</a></div>"#
            }
            let body = """
                <p class="note">Environment <b id="environment">\(environment.rawValue)</b>.</p>
                <div class="cards" id="counts">
                \(card("users", users.count, "\(base)/users"))
                \(card("API tokens", tokens.count, "\(base)/credentials"))
                \(card("server keys", keys.count, "\(base)/credentials"))
                \(card("public zones", publicZones.count, "\(base)/zones/public/\(ZoneID.publicOwnerName)"))
                \(card("live links", links.count, "\(base)/links"))
                \(card("record types", schema.recordTypes.count, "\(base)/schema"))
                \(card("devices out of sync", outOfSync.count, "#devices-out-of-sync"))
                </div>
                <h2 id="devices-out-of-sync">Devices out of sync</h2>
                \(ConsolePage.table(
                    id: "out-of-sync", headers: ["User", "Device", "Found", "Verified"],
                    rows: outOfSync.map { entry in
                        [
                            .link(entry.userName, href: "\(base)/users/\(ConsolePage.segment(entry.userRecordName))"), .code(entry.device.deviceID),
                            .flag(entry.device.verification.map(Self.differences) ?? ""),
                            .text(entry.device.verification.map { ConsolePage.date($0.verifiedAt) } ?? ""),
                        ]
                    },
                    empty: "Every device that reported its last verification (SyncEngine.verify()) held what the server holds."))
                <h2>This instance, the last hour</h2>
                <p class="note">A bar a minute, every container of this instance together (with several instances, <code>/metrics</code> of each).</p>
                <div class="charts" id="charts">
                \(ConsoleCharts.html(.init(id: "requests", title: "Requests", lower: recent.lastHour(.requests))))
                \(ConsoleCharts.html(.init(id: "writes", title: "Records written", lower: recent.lastHour(.recordsWritten))))
                \(ConsoleCharts.html(.init(id: "push-connections", title: "Push connections open", lower: recent.lastHour(.pushConnections), isGauge: true)))
                \(ConsoleCharts.html(.init(id: "push-deliveries", title: "Notifications delivered", lower: recent.lastHour(.pushDeliveries))))
                \(ConsoleCharts.html(.init(
                    id: "devices", title: "Devices fetching to the end of their feed", lower: recent.lastHour(.fetchesInStep),
                    upper: recent.lastHour(.fetchesBehind), lowerLabel: "already in step", upperLabel: "behind")))
                \(ConsoleCharts.html(.init(
                    id: "verifications", title: "Verifications devices reported", lower: recent.lastHour(.verificationsInSync),
                    upper: recent.lastHour(.verificationsOutOfSync), lowerLabel: "in sync", upperLabel: "out of sync")))
                </div>
                """
            return render("Overview", session, environment, body)
        }
    }

    @Sendable func users(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let users = try await console.users(container: session.container, logger: context.logger)
            let base = "/console/\(environment.rawValue)"
            let rows: [[ConsolePage.Cell]] = users.map { user in
                [
                    .link(user.name, href: "\(base)/users/\(ConsolePage.segment(user.userRecordName))"), .code(user.userRecordName),
                    .text(user.email ?? ""), .text(user.discoverable ? "yes" : "no"), .text(ConsolePage.date(user.createdAt)),
                ]
            }
            let body = ConsolePage.table(
                id: "users", headers: ["Name", "userRecordName", "Email", "Discoverable", "Created"], rows: rows, empty: "No users yet.")
            return render("Users", session, environment, body)
        }
    }

    @Sendable func user(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let logger = context.logger
            let user = try await console.user(context.parameters.get("user") ?? "", container: session.container, logger: logger)
            let database = DatabaseRef(container: session.container, environment: environment, scope: .private, ownerRecordName: user.userRecordName)
            let zones = try await console.zones(in: database, logger: logger)
            let base = "/console/\(environment.rawValue)/zones/private/\(ConsolePage.segment(user.userRecordName))"
            var body = "<p><code id=\"user-record-name\">\(ConsolePage.escape(user.userRecordName))</code></p><h2>Private database</h2>"
            body += ConsolePage.table(
                id: "zones", headers: ["Zone", "Changes"],
                rows: zones.map {
                    [.link($0.zoneID.zoneName, href: "\(base)/\(ConsolePage.segment($0.zoneID.zoneName))"), .text("\($0.changeSequence)")]
                },
                empty: "No zones.")
            body += "<h2>Devices</h2>"
            let devices = try await console.devices(of: user.userRecordName, container: session.container, logger: logger)
                .filter { $0.environment == environment }
            body += ConsolePage.table(
                id: "devices", headers: ["Device", "Name", "Last seen", "Last fetched", "Changes behind", "Last verified"],
                rows: devices.map { device in
                    [
                        .code(device.deviceID), .text(device.name ?? ""), .text(ConsolePage.date(device.lastSeenAt)),
                        .text(device.lastFetchedAt.map(ConsolePage.date) ?? "never"),
                        .text(device.changesBehind.map { $0 == 0 ? "in step" : "\($0)" } ?? "not fetched yet"),
                        Self.verificationCell(device.verification),
                    ]
                },
                empty: "No device has synced yet (devices name themselves with X-Cumulus-Device; CloudContainer's deviceID).")
            body += "<h2>Subscriptions</h2>"
            let subscriptions = try await console.subscriptions(
                of: user.userRecordName, container: session.container, environment: environment, logger: logger)
            let rows: [[ConsolePage.Cell]] = subscriptions.map { scope, subscription in
                [.text(scope.rawValue), .code(subscription.subscriptionID), .code(String(decoding: subscription.json, as: UTF8.self))]
            }
            body += ConsolePage.table(id: "subscriptions", headers: ["Database", "ID", "Subscription"], rows: rows, empty: "No subscriptions.")
            return render(user.name, session, environment, body)
        }
    }

    /// A device's last verification: in sync, or flagged with what differed and where.
    static func verificationCell(_ verification: DeviceVerification?) -> ConsolePage.Cell {
        guard let verification else { return .text("never") }
        let when = ConsolePage.date(verification.verifiedAt)
        guard !verification.isInSync else {
            return .text("in sync (\(verification.zones) \(verification.zones == 1 ? "zone" : "zones")), \(when)")
        }
        return .flag("OUT OF SYNC: \(differences(verification)), \(when)")
    }

    /// "2 missing, 1 stale in Drives, Lists".
    static func differences(_ verification: DeviceVerification) -> String {
        let counts = [("missing", verification.missing), ("extra", verification.extra), ("stale", verification.stale)]
            .filter { $0.1 > 0 }.map { "\($0.1) \($0.0)" }.joined(separator: ", ")
        return verification.zonesOutOfSync.isEmpty ? counts : "\(counts) in \(verification.zonesOutOfSync.joined(separator: ", "))"
    }

    @Sendable func credentials(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let (tokens, keys) = try await console.credentials(container: session.container, environment: environment, logger: context.logger)
            var body = "<h2>API tokens</h2>"
            body += ConsolePage.table(
                id: "tokens", headers: ["Fingerprint", "Created", "Status"],
                rows: tokens.map {
                    [.code(AccountService.tokenFingerprint($0)), .text(ConsolePage.date($0.createdAt)), .text($0.revoked ? "revoked" : "active")]
                }, empty: "No API tokens.")
            body += #"<p class="note">Only a token's hash is kept: revoke one with <code>cumulus tokens revoke FINGERPRINT</code>.</p>"#
            body += "<h2>Server-to-server keys</h2>"
            body += ConsolePage.table(
                id: "keys", headers: ["Key ID", "Created", "Status"],
                rows: keys.map { [.code($0.keyID), .text(ConsolePage.date($0.createdAt)), .text($0.revoked ? "revoked" : "active")] },
                empty: "No keys.")
            return render("Tokens and keys", session, environment, body)
        }
    }

    @Sendable func links(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let links = try await console.links(container: session.container, environment: environment, limit: 500, logger: context.logger)
            let body = ConsolePage.table(
                id: "links", headers: ["Link", "Kind", "Size", "Created", "Expires"],
                rows: links.map {
                    [
                        .link($0.id, href: "/s/\(ConsolePage.segment($0.id))"), .text($0.kind), .text("\($0.payload.count) bytes"),
                        .text(ConsolePage.date($0.createdAt)), .text(ConsolePage.date($0.expiresAt)),
                    ]
                }, empty: "No live share-a-copy links.")
            return render("Share-a-copy links", session, environment, body)
        }
    }

    @Sendable func schema(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let schema = try await database.schemas.schema(container: session.container, environment: environment, logger: context.logger)
            let body = """
                <pre id="schema">\(ConsolePage.escape(SchemaLanguage.write(schema)))</pre>
                <p class="note">Change it with <code>cumulus schema deploy</code> (docs/SCHEMA.md).</p>
                """
            return render("Schema", session, environment, body)
        }
    }

    // MARK: - Field indexes

    @Sendable func indexes(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            try await indexesPage(context, session, environment, message: nil)
        }
    }

    /// Drops an index only the session's container uses. One another container shares (its production schema declares
    /// the field, or its queries asked for it) is the operator's to drop (`cumulus indexes drop`): a container's
    /// administrator must not slow another container's queries.
    @Sendable func dropIndex(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let form = try await Self.form(request)
            guard form["csrf"] == session.csrf else { throw CumulusError(.accessDenied, "csrf: the form is not from this session") }
            guard let field = form["field"], !field.isEmpty else { throw CumulusError(.badRequest, "field: is required") }
            let states = try await database.schemas.fieldIndexes(logger: context.logger)
            guard let state = states.first(where: { $0.field == field && Self.concerns($0, session.container) }) else {
                throw CumulusError(.notFound, "field \(field): no index of this container's")
            }
            guard Self.isOnly(state, session.container) else {
                throw CumulusError(
                    .accessDenied, "field \(field): other containers use this index too; the operator drops it with `cumulus indexes drop`")
            }
            try await database.schemas.dropFieldIndex(field: field, logger: context.logger)
            return try await indexesPage(context, session, environment, message: "Dropped the index of \(field).")
        }
    }

    static func concerns(_ state: FieldIndexState, _ container: String) -> Bool {
        state.productionContainers.contains(container) || state.developmentContainers.contains(container)
    }

    static func isOnly(_ state: FieldIndexState, _ container: String) -> Bool {
        state.productionContainers.union(state.developmentContainers) == [container]
    }

    private func indexesPage(_ context: CumulusRequestContext, _ session: Session, _ environment: ContainerEnvironment, message: String?)
        async throws -> Response
    {
        let states = try await database.schemas.fieldIndexes(logger: context.logger)
            .filter { Self.concerns($0, session.container) }
            .sorted { ($0.field ?? "") < ($1.field ?? "") }
        let rows = states.map { state -> [ConsolePage.Cell] in
            let others = state.productionContainers.union(state.developmentContainers).subtracting([session.container]).count
            return [
                .code(state.field ?? state.indexName),
                .text(state.productionContainers.contains(session.container) ? "declared" : "—"),
                .text(state.developmentContainers.contains(session.container) ? "queried" : "—"),
                .text(others == 0 ? "none" : "\(others)"),
                Self.isOnly(state, session.container)
                    ? .form(
                        action: "/console/\(environment.rawValue)/indexes", csrf: session.csrf, fields: ["field": state.field ?? ""], button: "Drop")
                    : .text("operator only"),
            ]
        }
        let body = """
            \(message.map { #"<p class="note" id="message">\#(ConsolePage.escape($0))</p>"# } ?? "")
            \(ConsolePage.table(
                id: "indexes", headers: ["Field", "Production", "Development", "Other containers", ""], rows: rows,
                empty: "No field indexes: no query of this container's has needed one."))
            <p class="note">A field a production schema declares <code>QUERYABLE</code> or <code>SORTABLE</code> always has its index;
            development queries make theirs from a budget the store shares (docs/SCHEMA.md). An index makes its queries fast and
            every write a little slower. A dropped index is made again by the next query that needs it, within the budget.</p>
            """
        return render("Field indexes", session, environment, body)
    }

    /// The database a path names: the public database, or a user's private database in the session's container.
    private func databaseRef(_ context: CumulusRequestContext, _ session: Session, _ environment: ContainerEnvironment) async throws
        -> DatabaseRef
    {
        guard let scope = context.parameters.get("scope").flatMap(DatabaseScope.init(rawValue:)), let owner = context.parameters.get("owner")
        else { throw CumulusError(.notFound, "database: must be public or private") }
        return try await console.database(
            scope: scope, owner: owner, container: session.container, environment: environment, logger: context.logger)
    }

    private func zonePath(_ environment: ContainerEnvironment, _ database: DatabaseRef, _ zone: String? = nil) -> String {
        let base = "/console/\(environment.rawValue)/zones/\(database.scope.rawValue)/\(ConsolePage.segment(database.ownerRecordName))"
        return zone.map { "\(base)/\(ConsolePage.segment($0))" } ?? base
    }

    @Sendable func zones(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let database = try await databaseRef(context, session, environment)
            let zones = try await console.zones(in: database, logger: context.logger)
            let body = ConsolePage.table(
                id: "zones", headers: ["Zone", "Changes"],
                rows: zones.map {
                    [.link($0.zoneID.zoneName, href: zonePath(environment, database, $0.zoneID.zoneName)), .text("\($0.changeSequence)")]
                },
                empty: "No zones.")
            let title = database.scope == .public ? "Public database" : "Private database of \(database.ownerRecordName)"
            return render(title, session, environment, body)
        }
    }

    @Sendable func records(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let database = try await databaseRef(context, session, environment)
            let message = request.uri.queryParameters["message"].map(String.init)
            return try await zonePage(request, context, session, environment, database, message: message)
        }
    }

    private func zonePage(
        _ request: Request, _ context: CumulusRequestContext, _ session: Session, _ environment: ContainerEnvironment, _ database: DatabaseRef,
        message: String?, differences: [RestoreDifference] = [], status: HTTPResponse.Status = .ok
    ) async throws -> Response {
        let zoneName = context.parameters.get("zone") ?? ""
        let after = request.uri.queryParameters["after"].flatMap { Int64($0) } ?? 0
        let filter = RecordFilter(
            type: request.uri.queryParameters["type"].map(String.init), field: request.uri.queryParameters["field"].map(String.init),
            value: request.uri.queryParameters["value"].map(String.init))
        let page = try await console.records(in: zoneName, of: database, after: after, limit: Self.pageSize, logger: context.logger)
        // Who last changed each record, by name: one read for the page.
        var authors = Set<String>()
        for case .changed(let record) in page.changes { authors.insert(record.header.modified.userRecordName) }
        let names = try await console.userNames(authors, container: session.container, logger: context.logger)
        var rows: [[ConsolePage.Cell]] = []
        for change in page.changes {
            guard case .changed(let record) = change else { continue }
            let fields = (try? JSONValue(parsing: record.fieldsJSON))?.objectValue ?? [:]
            guard filter.matches(record.header.recordType, fields) else { continue }
            let modified = record.header.modified
            rows.append([
                .link(
                    record.header.recordName,
                    href: "\(zonePath(environment, database, zoneName))/\(ConsolePage.segment(record.header.recordName))"),
                .text(record.header.recordType), .text(Self.preview(fields)), .code(record.header.recordChangeTag),
                .text(ConsolePage.date(modified.timestamp)),
                .text("\(names[modified.userRecordName] ?? modified.userRecordName), \(modified.deviceID)"),
            ])
        }
        var body = message.map { #"<p class="message" id="message">\#(ConsolePage.escape($0))</p>"# } ?? ""
        if !differences.isEmpty {
            body += ConsolePage.table(
                id: "differences", headers: ["Since the moment", "Record"],
                rows: differences.prefix(200).map { difference in
                    switch difference {
                    case .changed: [.text("changed: comes back as it was"), .code(difference.recordName)]
                    case .deleted: [.text("deleted: comes back"), .code(difference.recordName)]
                    case .created: [.text("created: is deleted"), .code(difference.recordName)]
                    }
                }, empty: "")
        }
        body += filter.form
        body += ConsolePage.table(
            id: "records", headers: ["Record", "Type", "Fields", "Change tag", "Modified", "By"], rows: rows,
            empty: filter.isEmpty ? "No records in this range." : "No record in this range matches.")
        body += #"<p class="note">In the order of their last change, 200 changes a page; deleted records are not listed.</p>"#
        if page.moreComing {
            body += #"<p><a id="more" href="\#(zonePath(environment, database, zoneName))?after=\#(page.sequence)\#(filter.query)">More</a></p>"#
        }
        body += try await historySection(session, environment, database, zoneName, context: context)
        return ConsolePage.response(
            ConsolePage.document(title: "Zone \(zoneName)", container: session.container, environment: environment, csrf: session.csrf, body: body),
            status: status)
    }

    /// The zone's history: records deleted within the window, each with an undelete button, and a restore form.
    private func historySection(
        _ session: Session, _ environment: ContainerEnvironment, _ database: DatabaseRef, _ zoneName: String, context: CumulusRequestContext
    ) async throws -> String {
        guard self.database.historyRetention > .zero else {
            return
                #"<p class="note" id="history-off">History is off on this server (<code>--history-retention 0</code>): no restore or undelete.</p>"#
        }
        let action = zonePath(environment, database, zoneName)
        let deleted = try await self.database.history.deletedRecords(zoneName, in: database, limit: 50, logger: context.logger)
        var body = "<h2>Recently deleted</h2>"
        body += ConsolePage.table(
            id: "deleted", headers: ["Record", "Type", "Deleted", "By", ""],
            rows: deleted.map { entry in
                [
                    .code(entry.record.header.recordName), .text(entry.record.header.recordType), .text(ConsolePage.date(entry.deleted.timestamp)),
                    .text(entry.deleted.userRecordName),
                    .form(
                        action: action, csrf: session.csrf, fields: ["action": "undelete", "recordName": entry.record.header.recordName],
                        button: "Undelete"),
                ]
            }, empty: "No record deleted within the history window.")
        body += """
            <h2>Restore to a moment</h2>
            <form method="post" action="\(ConsolePage.escape(action))" id="restore" class="actions">
            <input type="hidden" name="csrf" value="\(ConsolePage.escape(session.csrf))"><input type="hidden" name="action" value="restore">
            <label>Moment (UTC) <input type="datetime-local" name="to" step="1" required></label>
            <label><input type="checkbox" name="dryRun" value="1" checked> Only show what would change</label>
            <button type="submit">Restore</button>
            </form>
            <p class="note">Records changed since the moment come back as they were, records deleted since come back, records created since
            are deleted, each with a new change tag: devices fetch it like any other change, and restoring to the moment before a restore
            undoes it.</p>
            """
        return body
    }

    /// Undeletes a record, or restores the zone to a moment (or shows what that would change).
    @Sendable func changeZone(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let database = try await databaseRef(context, session, environment)
            let form = try await Self.form(request)
            guard form["csrf"] == session.csrf else { throw CumulusError(.accessDenied, "csrf: the form is not from this session") }
            let zoneName = context.parameters.get("zone") ?? ""
            func done(_ message: String) -> Response {
                var allowed = CharacterSet.alphanumerics
                allowed.insert(charactersIn: "-._~")
                let query = message.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
                return Response(status: .seeOther, headers: [.location: "\(zonePath(environment, database, zoneName))?message=\(query)"])
            }
            switch form["action"] {
            case "undelete":
                guard let name = form["recordName"], !name.isEmpty else { throw CumulusError(.badRequest, "recordName: is required") }
                let result = try await self.database.history.undeleteRecords([name], zoneName: zoneName, in: database, logger: context.logger).first
                if case .failed(let failure)? = result {
                    return try await zonePage(request, context, session, environment, database, message: failure.reason, status: .badRequest)
                }
                return done("Undeleted \(name).")
            case "restore":
                guard let text = form["to"], let time = HistoryMoment.milliseconds(parsing: text) else {
                    throw CumulusError(.badRequest, "to: a moment such as 2026-11-26T09:30:00")
                }
                let dryRun = form["dryRun"] == "1"
                var differences: [RestoreDifference] = []
                let report = try await self.database.history.restoreZone(zoneName, in: database, to: time, dryRun: dryRun, logger: context.logger) {
                    differences.append($0)
                }
                let counts = "\(report.changed) changed, \(report.deleted) deleted and \(report.created) created since \(HistoryMoment.text(time))"
                if dryRun {
                    return try await zonePage(
                        request, context, session, environment, database, message: "A restore would undo \(counts).", differences: differences)
                }
                let failed = report.failures.isEmpty ? "" : " \(report.failures.count) not restored: \(report.failures.first?.reason ?? "")."
                return done("Restored: \(counts).\(failed) To undo it, restore to \(HistoryMoment.text(report.startedAt - 1)).")
            default:
                throw CumulusError(.badRequest, "action: undelete or restore")
            }
        }
    }

    /// The first three fields of a record, `name: value`, each value cut to 40 characters: enough to tell rows apart.
    static func preview(_ fields: [String: JSONValue]) -> String {
        fields.keys.sorted().prefix(3).map { name in
            let value = fields[name]?["value"] ?? .null
            var text = value.stringValue ?? String(decoding: value.jsonBytes, as: UTF8.self)
            if text.count > 40 { text = String(text.prefix(39)) + "…" }
            return "\(name): \(text)"
        }.joined(separator: " · ")
    }

    @Sendable func record(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let database = try await databaseRef(context, session, environment)
            let message = request.uri.queryParameters["message"].map(String.init)
            return try await recordPage(context, session, environment, database, message: message, error: nil, draft: nil)
        }
    }

    private func recordPage(
        _ context: CumulusRequestContext, _ session: Session, _ environment: ContainerEnvironment, _ database: DatabaseRef, message: String?,
        error: String?, draft: String?, status: HTTPResponse.Status = .ok
    ) async throws -> Response {
        let zoneName = context.parameters.get("zone") ?? ""
        let recordName = context.parameters.get("record") ?? ""
        guard let record = try await console.record(recordName, in: zoneName, of: database, logger: context.logger) else {
            throw CumulusError(.notFound, "record \(recordName) does not exist")
        }
        let header = record.header
        var body = ""
        if let message { body += #"<p class="message" id="message">\#(ConsolePage.escape(message))</p>"# }
        if let error { body += #"<p class="error" id="error">\#(ConsolePage.escape(error))</p>"# }
        // Who made the record and who changed it last, by name: one read.
        let names = try await console.userNames(
            [header.created.userRecordName, header.modified.userRecordName], container: session.container, logger: context.logger)
        func stamp(_ stamp: RecordStamp) -> String {
            let who = names[stamp.userRecordName].map { "\($0) (\(stamp.userRecordName))" } ?? stamp.userRecordName
            return "\(ConsolePage.date(stamp.timestamp)) by \(who), device \(stamp.deviceID)"
        }
        var system: [[ConsolePage.Cell]] = [
            [.text("Type"), .code(header.recordType)], [.text("Change tag"), .code(header.recordChangeTag)],
            [.text("Created"), .text(stamp(header.created))], [.text("Modified"), .text(stamp(header.modified))],
        ]
        if let parent = header.parent {
            system.append([.text("Parent"), .link(parent, href: "\(zonePath(environment, database, zoneName))/\(ConsolePage.segment(parent))")])
        }
        if let share = header.share {
            system.append([
                .text("Share"),
                .link(share.recordName, href: "\(zonePath(environment, database, zoneName))/\(ConsolePage.segment(share.recordName))"),
            ])
        }
        body += ConsolePage.table(id: "system-fields", headers: [], rows: system, empty: "")
        body +=
            #"<p class="note">The change tag moves on each save, and the zone's change feed tells what changed since a sync token. The versions a save or deletion replaced are kept for the history window: the zone's page restores them.</p>"#
        let fields = (try? JSONValue(parsing: record.fieldsJSON))?.objectValue ?? [:]
        body += "<h2>Fields</h2>"
        body += ConsolePage.table(
            id: "fields", headers: ["Field", "Type", "Value"],
            rows: fields.keys.sorted().map { name in
                let field = fields[name]
                return [
                    .code(name), .text(field?["type"]?.stringValue ?? ""),
                    .code(String(decoding: (field?["value"] ?? .null).jsonBytes, as: UTF8.self)),
                ]
            }, empty: "No fields.")
        if header.recordType == "cloudkit.share",
            let share = try await console.share(header.recordName, in: zoneName, of: database, logger: context.logger)
        {
            body += "<h2>Participants</h2>"
            body += "<p class=\"note\">Anyone with the link: <b id=\"public-permission\">\(share.publicPermission.rawValue)</b>.</p>"
            body += ConsolePage.table(
                id: "participants", headers: ["userRecordName", "Type", "Permission", "Status", "Email"],
                rows: share.participants.map {
                    [
                        .code($0.userRecordName), .text($0.type.rawValue), .text($0.permission.rawValue), .text($0.status.rawValue),
                        .text($0.email ?? ""),
                    ]
                }, empty: "No participants.")
        }
        let editable = (try? JSONValue(parsing: record.fieldsJSON)).map { String(decoding: $0.jsonBytes, as: UTF8.self) } ?? "{}"
        body += """
            <h2>Edit</h2>
            <form method="post" id="edit">
            <input type="hidden" name="csrf" value="\(ConsolePage.escape(session.csrf))">
            <input type="hidden" name="recordChangeTag" value="\(ConsolePage.escape(header.recordChangeTag))">
            <label for="fields-json" class="note">The fields, as records/modify takes them; saving replaces them all, and fails if the record changed since this page was shown.</label>
            <textarea id="fields-json" name="fields">\(ConsolePage.escape(draft ?? editable))</textarea>
            <div class="actions"><button name="action" value="save">Save</button>
            <button name="action" value="delete" class="danger">Delete record</button></div>
            </form>
            """
        return ConsolePage.response(
            ConsolePage.document(title: header.recordName, container: session.container, environment: environment, csrf: session.csrf, body: body),
            status: status)
    }

    @Sendable func changeRecord(_ request: Request, context: CumulusRequestContext) async throws -> Response {
        try await page(request, context: context) { session, environment in
            let database = try await databaseRef(context, session, environment)
            let form = try await Self.form(request)
            guard form["csrf"] == session.csrf else { throw CumulusError(.accessDenied, "csrf: the form is not from this session") }
            let zoneName = context.parameters.get("zone") ?? ""
            let recordName = context.parameters.get("record") ?? ""
            guard let tag = form["recordChangeTag"] else { throw CumulusError(.badRequest, "recordChangeTag: is required") }
            guard let current = try await console.record(recordName, in: zoneName, of: database, logger: context.logger) else {
                throw CumulusError(.notFound, "record \(recordName) does not exist")
            }
            let author = try await console.author(of: current, in: database, logger: context.logger)
            let caller = Caller(container: session.container, environment: environment, user: author, credential: .apiToken, deviceID: "console")
            let deleting = form["action"] == "delete"
            var operation: [String: JSONValue] = [
                "operationType": deleting ? "delete" : "replace",
                "record": ["recordName": .string(recordName), "recordType": .string(current.header.recordType), "recordChangeTag": .string(tag)],
            ]
            if !deleting {
                let text = form["fields"] ?? "{}"
                guard let fields = try? JSONValue(parsing: text), case .object = fields else {
                    return try await recordPage(
                        context, session, environment, database, message: nil, error: "fields: not a JSON object", draft: text, status: .badRequest)
                }
                if var record = operation["record"]?.objectValue {
                    record["fields"] = fields
                    operation["record"] = .object(record)
                }
            }
            var zoneID: [String: JSONValue] = ["zoneName": .string(zoneName)]
            if database.scope == .private { zoneID["ownerRecordName"] = .string(database.ownerRecordName) }
            let body: JSONValue = ["zoneID": .object(zoneID), "operations": [.object(operation)]]
            let response: RecordsModifyResponse
            do {
                response = try await self.database.records.modify(
                    caller: caller, scope: database.scope, request: try RecordsModifyRequest(wire: try WireObject(body, path: "")),
                    logger: context.logger)
            } catch let error as CumulusError {
                return try await recordPage(
                    context, session, environment, database, message: nil, error: error.reason, draft: form["fields"], status: .badRequest)
            } catch let error as WireFormatError {
                return try await recordPage(
                    context, session, environment, database, message: nil, error: "\(error)", draft: form["fields"], status: .badRequest)
            }
            let recordPath = "\(zonePath(environment, database, zoneName))/\(ConsolePage.segment(recordName))"
            switch response.results.first?.result {
            case .saved?:
                return Response(status: .seeOther, headers: [.location: "\(recordPath)?message=Saved."])
            case .deleted?:
                return Response(status: .seeOther, headers: [.location: "\(zonePath(environment, database, zoneName))"])
            case .failed(let failure)?:
                let reason = failure.code == .conflict ? "The record changed since this page was shown: look at it again." : failure.reason
                return try await recordPage(
                    context, session, environment, database, message: nil, error: "\(failure.code.rawValue): \(reason)", draft: form["fields"],
                    status: failure.code == .conflict ? .conflict : .badRequest)
            case nil:
                throw CumulusError(.internalError, "records/modify answered nothing")
            }
        }
    }

    /// A form body (`application/x-www-form-urlencoded`), at most 1 MiB.
    static func form(_ request: Request) async throws -> [String: String] {
        let buffer = try await request.body.collect(upTo: 1 << 20)
        let text = String(buffer: buffer)
        var values: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ part: Substring) -> String {
                part.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            }
            guard let key = parts.first else { continue }
            values[decode(key)] = parts.count > 1 ? decode(parts[1]) : ""
        }
        return values
    }
}

/// The records page's filter: a record type, and a field whose value, as text, contains a given text (ignoring case).
struct RecordFilter {
    var type: String?
    var field: String?
    var value: String?

    init(type: String?, field: String?, value: String?) {
        self.type = type.flatMap { $0.isEmpty ? nil : $0 }
        self.field = field.flatMap { $0.isEmpty ? nil : $0 }
        self.value = value.flatMap { $0.isEmpty ? nil : $0 }
    }

    var isEmpty: Bool { type == nil && field == nil }

    func matches(_ recordType: String, _ fields: [String: JSONValue]) -> Bool {
        if let type, type != recordType { return false }
        guard let field else { return true }
        guard let stored = fields[field]?["value"] else { return false }
        guard let value else { return true }
        let text = stored.stringValue ?? String(decoding: stored.jsonBytes, as: UTF8.self)
        return text.localizedCaseInsensitiveContains(value)
    }

    /// The filter's query items, to keep it on the next page.
    var query: String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return [("type", type), ("field", field), ("value", value)].compactMap { name, text in
            text.map { "&\(name)=\($0.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
        }.joined()
    }

    /// A form that reloads the page with the filter.
    var form: String {
        func input(_ name: String, _ label: String, _ value: String?) -> String {
            #"<label>\#(label) <input name="\#(name)" value="\#(ConsolePage.escape(value ?? ""))" size="14"></label>"#
        }
        return #"<form method="get" id="filter" class="note">"#
            + input("type", "Type", type) + " " + input("field", "Field", field) + " " + input("value", "contains", value)
            + #" <button type="submit">Filter</button></form>"#
    }
}
