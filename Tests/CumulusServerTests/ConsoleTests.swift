import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1
import Testing

/// The web console: signing in with a one-use link, what each page shows, editing and deleting a record, and that
/// nothing from the data can run in the page.
@Suite("Web console", .serialized, .timeLimit(.minutes(10)))
struct ConsoleTests {
    let logger = Logger(label: "test")
    static let hostile = #"<img src=x onerror="document.title='owned'"><script>document.title='owned'</script>"#

    /// A container with a user, a zone, records (one with hostile content), a share and a link.
    func seeded(_ store: TestStore) async throws -> TestWorld {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Lists", as: world.alice)
            let created = try await client.modify(
                [
                    operation("create", "list", type: "List", fields: #"{"name":{"value":"Weekend"},"count":{"value":3}}"#),
                    operation(
                        "create", "item", type: "Item", fields: #"{"text":{"value":\#(Self.jsonString(Self.hostile))}}"#,
                        extra: #","parent":{"recordName":"list"}"#),
                ], zone: "Lists", as: .user(world.alice))
            #expect(created.records.allSatisfy { $0["serverErrorCode"] == nil }, "\(created.json)")
            let shared = try await client.modify(
                [shareOperation(participants: [("bob@example.com", "READ_WRITE")])], zone: "Lists", as: .user(world.alice))
            #expect(shared.records.first?["serverErrorCode"] == nil, "\(shared.json)")
        }
        return world
    }

    static func jsonString(_ text: String) -> String { String(decoding: JSONValue.string(text).jsonBytes, as: UTF8.self) }

    /// An HTTP client that keeps no cookies and follows no redirects: each request says which cookie it sends.
    struct Browser {
        let base: String
        static let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))

        func get(_ path: String, cookie: String? = nil) async throws -> (status: Int, headers: HTTPHeaders, body: String) {
            var request = HTTPClientRequest(url: base + path)
            if let cookie { request.headers.add(name: "Cookie", value: cookie) }
            let response = try await Self.client.execute(request, timeout: .seconds(30))
            return (Int(response.status.code), response.headers, String(buffer: try await response.body.collect(upTo: 1 << 22)))
        }

        func post(_ path: String, cookie: String?, form: [String: String]) async throws -> (status: Int, headers: HTTPHeaders, body: String) {
            var request = HTTPClientRequest(url: base + path)
            request.method = .POST
            if let cookie { request.headers.add(name: "Cookie", value: cookie) }
            request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            let body = form.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed)!)" }.joined(separator: "&")
            request.body = .bytes(ByteBuffer(string: body))
            let response = try await Self.client.execute(request, timeout: .seconds(30))
            return (Int(response.status.code), response.headers, String(buffer: try await response.body.collect(upTo: 1 << 22)))
        }

        /// Signs in with a new link; answers the session cookie.
        func signIn(_ world: TestWorld) async throws -> String {
            let token = try await world.accounts.createConsoleSignIn(container: TestWorld.container, logger: Logger(label: "test"))
            let answer = try await get("/console/signin?token=\(token)")
            #expect(answer.status == 303)
            let setCookie = try #require(answer.headers["Set-Cookie"].first)
            #expect(setCookie.contains("HttpOnly") && setCookie.contains("SameSite=Strict") && setCookie.contains("Path=/console"))
            return String(setCookie.split(separator: ";")[0])
        }
    }

    func csrf(in page: String) throws -> String {
        let marker = #"name="csrf" value=""#
        let start = try #require(page.range(of: marker)).upperBound
        return String(page[start...].prefix { $0 != "\"" })
    }

    @Test(arguments: TestStore.all)
    func aSignInLinkWorksOnceAndEveryPageNeedsTheSession(_ store: TestStore) async throws {
        let world = try await seeded(store)
        try await world.application().test(.live) { client in
            let browser = Browser(base: "http://127.0.0.1:\(client.port!)")
            let signedOut = try await browser.get("/console/development/users")
            #expect(signedOut.status == 401 && signedOut.body.contains("cumulus console --container"))
            #expect(!signedOut.body.contains("alice"))

            let token = try await world.accounts.createConsoleSignIn(container: TestWorld.container, logger: logger)
            #expect(try await browser.get("/console/signin?token=\(token)").status == 303)
            #expect(try await browser.get("/console/signin?token=\(token)").status == 401, "a link works once")
            #expect(try await browser.get("/console/signin?token=nonsense").status == 401)

            let cookie = try await browser.signIn(world)
            let users = try await browser.get("/console/development/users", cookie: cookie)
            #expect(users.status == 200)
            #expect(users.headers["Content-Security-Policy"].first?.contains("default-src 'none'") == true)
            #expect(!(users.headers["Content-Security-Policy"].first ?? "").contains("script-src"))
            #expect(users.body.contains(world.alice.userRecordName) && users.body.contains("bob@example.com"))
            #expect(try await browser.get("/console/development/users", cookie: "cumulus_console=forged").status == 401)

            // A user of another container is not this session's.
            let stranger = try await world.accounts.createUser(
                container: TestWorld.otherContainer, name: "mallory", password: nil, email: nil, logger: logger)
            #expect(try await browser.get("/console/development/users/\(stranger.userRecordName)", cookie: cookie).status == 404)
            #expect(try await browser.get("/console/development/zones/private/\(stranger.userRecordName)", cookie: cookie).status == 404)

            // Every page answers.
            let zone = "/console/development/zones/private/\(world.alice.userRecordName)/Lists"
            for path in [
                "/console/development", "/console/production", "/console/development/credentials", "/console/development/links",
                "/console/development/indexes",
                "/console/development/schema", "/console/development/users/\(world.alice.userRecordName)", zone, "\(zone)/list", "\(zone)/share-1",
                "/console/development/zones/public/\(ZoneID.publicOwnerName)",
            ] {
                let page = try await browser.get(path, cookie: cookie)
                #expect(page.status == 200, "\(path): \(page.body.prefix(300))")
                #expect(!page.body.contains("<script"), "\(path)")
            }
            let share = try await browser.get("\(zone)/share-1", cookie: cookie)
            #expect(share.body.contains("READ_WRITE") && share.body.contains("INVITED") && share.body.contains("OWNER"))

            // Signing out ends the session.
            let overview = try await browser.get("/console/development", cookie: cookie)
            #expect(try await browser.post("/console/signout", cookie: cookie, form: ["csrf": try csrf(in: overview.body)]).status == 200)
            #expect(try await browser.get("/console/development", cookie: cookie).status == 401)
            // Found by the fuzzer: signing out without a session was a 500.
            #expect(try await browser.post("/console/signout", cookie: nil, form: [:]).status == 401)
            #expect(try await browser.post("/console/signout", cookie: "cumulus_console=forged", form: ["csrf": "x"]).status == 401)
        }
    }

    @Test(arguments: TestStore.all)
    func aRecordIsEditedWithItsChangeTagAndDeleted(_ store: TestStore) async throws {
        let world = try await seeded(store)
        try await world.application().test(.live) { client in
            let browser = Browser(base: "http://127.0.0.1:\(client.port!)")
            let cookie = try await browser.signIn(world)
            let path = "/console/development/zones/private/\(world.alice.userRecordName)/Lists/list"
            let page = try await browser.get(path, cookie: cookie)
            #expect(page.body.contains("Weekend") && page.body.contains("INT64"))
            // Its authors by name, beside their user record names.
            #expect(page.body.contains("by alice (\(world.alice.userRecordName))"), "\(page.body)")
            let csrf = try csrf(in: page.body)
            let database = DatabaseRef(
                container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: world.alice.userRecordName)
            let before = try #require(
                try await world.store.records(named: ["list"], zoneName: "Lists", in: database, access: nil, logger: logger)["list"])
            let tag = before.header.recordChangeTag

            // A form from elsewhere (no token from this session) changes nothing.
            let forged = try await browser.post(path, cookie: cookie, form: ["action": "save", "recordChangeTag": tag, "fields": "{}"])
            #expect(forged.status == 403)
            #expect(try await browser.post(path, cookie: nil, form: ["csrf": csrf, "action": "delete", "recordChangeTag": tag]).status == 401)

            // Not JSON: the page says so and keeps the draft.
            let broken = try await browser.post(
                path, cookie: cookie, form: ["csrf": csrf, "action": "save", "recordChangeTag": tag, "fields": "{nope"])
            #expect(broken.status == 400 && broken.body.contains("not a JSON object") && broken.body.contains("{nope"))

            let saved = try await browser.post(
                path, cookie: cookie, form: ["csrf": csrf, "action": "save", "recordChangeTag": tag, "fields": #"{"name":{"value":"Sunday"}}"#])
            #expect(saved.status == 303)
            let after = try #require(
                try await world.store.records(named: ["list"], zoneName: "Lists", in: database, access: nil, logger: logger)["list"])
            #expect(try after.fields()["name"] == .string("Sunday") && after.fields()["count"] == nil)
            #expect(after.header.modified.deviceID == "console" && after.header.modified.userRecordName == world.alice.userRecordName)

            // The old tag is stale now: a conflict, and nothing changes.
            let stale = try await browser.post(
                path, cookie: cookie, form: ["csrf": csrf, "action": "save", "recordChangeTag": tag, "fields": #"{"name":{"value":"Lost"}}"#])
            #expect(stale.status == 409 && stale.body.contains("CONFLICT"))
            let deleteStale = try await browser.post(path, cookie: cookie, form: ["csrf": csrf, "action": "delete", "recordChangeTag": tag])
            #expect(deleteStale.status == 409)

            let deleted = try await browser.post(
                path, cookie: cookie, form: ["csrf": csrf, "action": "delete", "recordChangeTag": after.header.recordChangeTag])
            #expect(deleted.status == 303)
            #expect(try await world.store.records(named: ["list"], zoneName: "Lists", in: database, access: nil, logger: logger).isEmpty)
        }
    }

    /// The console lists the field indexes the container's queries use, drops one only it uses, and leaves one another
    /// container shares to the operator, never naming that container.
    @Test(arguments: TestStore.all)
    func aContainersIndexesAreListedAndOnlyItsOwnDropped(_ store: TestStore) async throws {
        let world = try await seeded(store)
        let account = try await world.accounts.createUser(
            container: TestWorld.otherContainer, name: "mallory", password: nil, email: nil, logger: logger)
        let mallory = TestUser(account: account, webAuthToken: try await world.accounts.issueWebAuthToken(for: account, logger: logger))
        @Sendable func query(_ type: String, _ field: String, zone: String?) -> String {
            let zoneID = zone.map { #","zoneID":{"zoneName":"\#($0)"}"# } ?? ""
            return
                #"{"query":{"recordType":"\#(type)","filterBy":[{"fieldName":"\#(field)","comparator":"EQUALS","fieldValue":{"value":"x"}}]}\#(zoneID)}"#
        }
        try await world.test { client in
            // Alice's queries index `name` (this container's alone) and `text`, which the other container's queries use too.
            #expect(try await client.send("records/query", as: .user(world.alice), body: query("List", "name", zone: "Lists")).status == 200)
            #expect(try await client.send("records/query", as: .user(world.alice), body: query("Item", "text", zone: "Lists")).status == 200)
            let other = Identity.apiTokenAndUser(world.otherContainerToken, mallory)
            let written = try await client.send(
                "records/modify", as: other, container: TestWorld.otherContainer,
                body: #"{"operations":[\#(operation("create", "n", type: "Item", fields: #"{"text":{"value":"x"}}"#))]}"#)
            #expect(written.status == 200, "\(written.json)")
            #expect(
                try await client.send("records/query", as: other, container: TestWorld.otherContainer, body: query("Item", "text", zone: nil)).status
                    == 200)
        }
        @Sendable func indexedFields() async throws -> Set<String> { Set(try await world.store.fieldIndexes(logger: logger).compactMap(\.field)) }
        #expect(try await indexedFields().isSuperset(of: ["name", "text"]))

        try await world.application().test(.live) { client in
            let browser = Browser(base: "http://127.0.0.1:\(client.port!)")
            let cookie = try await browser.signIn(world)
            let page = try await browser.get("/console/development/indexes", cookie: cookie)
            #expect(page.status == 200)
            #expect(page.body.contains("<code>name</code>") && page.body.contains("<code>text</code>"))
            #expect(page.body.contains("operator only"), "the shared index cannot be dropped here")
            #expect(!page.body.contains(TestWorld.otherContainer), "another container is counted, never named")
            let csrf = try csrf(in: page.body)

            #expect(try await browser.post("/console/development/indexes", cookie: cookie, form: ["field": "name"]).status == 403)
            let shared = try await browser.post("/console/development/indexes", cookie: cookie, form: ["csrf": csrf, "field": "text"])
            #expect(shared.status == 403 && shared.body.contains("cumulus indexes drop"))
            let dropped = try await browser.post("/console/development/indexes", cookie: cookie, form: ["csrf": csrf, "field": "name"])
            #expect(dropped.status == 200 && dropped.body.contains("Dropped the index of name."))
            let fields = try await indexedFields()
            #expect(!fields.contains("name") && fields.contains("text"))
            #expect(try await browser.post("/console/development/indexes", cookie: cookie, form: ["csrf": csrf, "field": "name"]).status == 404)
        }
    }

    /// The devices a user syncs from, in a real browser: when each was last seen, and how many changes of the private
    /// database it has not fetched; a device's name is shown as text whatever it holds.
    @Test(arguments: TestStore.all)
    func aUsersDevicesShowWhenTheyWereSeenAndHowFarBehindTheyAre(_ store: TestStore) async throws {
        let world = try await seeded(store)
        try await world.application().test(.live) { client in
            try await CloudKitTestClient.patient(client, apiToken: world.apiToken, on: world.eventLoop.group) { api in
                func headers(_ device: String, _ name: String) -> HTTPFields {
                    [HTTPField.Name("X-Cumulus-Device")!: device, HTTPField.Name("X-Cumulus-Device-Name")!: name]
                }
                // The phone reads the whole feed; then the tablet writes twice, so the phone is two changes behind.
                let fetched = try await api.send(
                    "changes/database", as: .user(world.alice), body: "{}", headers: headers("phone-1", "Alice's phone \(Self.hostile)"))
                #expect(fetched.status == 200)
                for name in ["a", "b"] {
                    _ = try await api.send(
                        "records/modify", as: .user(world.alice),
                        body: #"{"zoneID":{"zoneName":"Lists"},"operations":[\#(operation("create", name))]}"#, headers: headers("tablet-1", "Tablet")
                    )
                }
                let base = "http://127.0.0.1:\(client.port!)"
                let token = try await world.accounts.createConsoleSignIn(container: TestWorld.container, logger: logger)
                let path = "/console/development/users/\(world.alice.userRecordName)"
                let page = try await LinkPageBrowserTests.runChromium(["--dump-dom", "\(base)/console/signin?token=\(token)&next=\(path)"])
                #expect(page.contains(#"id="devices""#), "\(page)")
                #expect(page.contains("<code>phone-1</code>") && page.contains("<code>tablet-1</code>"))
                #expect(page.contains("Alice's phone &lt;img src=x"), "the name shown as text")
                #expect(!page.contains("<img src=\"x\""), "an element made from a device's name")
                let phoneRow = try #require(page.components(separatedBy: "<tr>").first { $0.contains("phone-1") })
                #expect(phoneRow.hasSuffix("<td>2</td></tr>") || phoneRow.contains("<td>2</td>"), "two changes behind: \(phoneRow)")
                let tabletRow = try #require(page.components(separatedBy: "<tr>").first { $0.contains("tablet-1") })
                #expect(tabletRow.contains("not fetched yet") && tabletRow.contains("never"), "\(tabletRow)")
            }
        }
    }

    @Test func theBrowserShowsHostileContentAsTextAndThePagesFitAPhone() async throws {
        let world = try await seeded(.sqlite)
        _ = try await world.accounts.createAPIToken(container: TestWorld.container, environment: .development, logger: logger)
        try await world.application().test(.live) { client in
            let base = "http://127.0.0.1:\(client.port!)"
            let zone = "/console/development/zones/private/\(world.alice.userRecordName)/Lists"
            /// The page as the browser rendered it, signed in with a new link that lands on it; with a picture if asked.
            func rendered(_ path: String, screenshot: String? = nil) async throws -> String {
                func link() async throws -> String {
                    let token = try await world.accounts.createConsoleSignIn(container: TestWorld.container, logger: logger)
                    var allowed = CharacterSet.alphanumerics
                    allowed.insert(charactersIn: "-._~")
                    return "\(base)/console/signin?token=\(token)&next=\(path.addingPercentEncoding(withAllowedCharacters: allowed)!)"
                }
                if let screenshot {
                    let png = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-console-\(UUID().uuidString).png")
                    _ = try await LinkPageBrowserTests.runChromium(["--screenshot=\(png.path)", try await link()])
                    let image = try Data(contentsOf: png)
                    #expect(image.starts(with: [0x89, 0x50, 0x4E, 0x47]) && image.count > 10_000, "a picture of \(path)")
                    if let directory = ProcessInfo.processInfo.environment["CUMULUS_CONSOLE_SCREENSHOTS"] {
                        try image.write(to: URL(fileURLWithPath: directory).appendingPathComponent(screenshot))
                    }
                }
                return try await LinkPageBrowserTests.runChromium(["--dump-dom", try await link()])
            }

            let overview = try await rendered("/console/development")
            #expect(overview.contains(#"id="container">\#(TestWorld.container)<"#))
            #expect(overview.contains("<b>2</b>users"), "alice and bob: \(overview)")

            // The hostile field is text on the page: no element was made from it, no script ran (the title stays).
            let item = try await rendered("\(zone)/item", screenshot: "console-record.png")
            #expect(item.contains("<title>item · Cumulus console</title>"), "the title a script would have changed")
            #expect(!item.contains("<img src=\"x\""), "an element made from the record's content")
            #expect(!item.contains("<script>document.title"), "a script made from the record's content")
            #expect(item.contains("&lt;img src=x onerror="), "the content shown as text")
            #expect(item.contains(#"<td><code>text</code></td><td>STRING</td>"#))
            #expect(item.contains(#"<a href="/console/development/zones/private/"#) && item.contains("/Lists/list\">list</a>"), "the parent")

            // A zone's records filtered by type, and by a field's value; each row shows its first fields.
            let lists = try await rendered("\(zone)?type=List", screenshot: "console-zone.png")
            #expect(lists.contains("/Lists/list\">list</a>") && !lists.contains("/Lists/item\">item</a>"), "\(lists)")
            #expect(lists.contains("count: 3 · name: Weekend"), "the fields shown in the row")
            #expect(lists.contains("<td>alice, web</td>"), "who changed it last, by name, and from which device: \(lists)")
            let weekend = try await rendered("\(zone)?field=name&value=WEEK")
            #expect(weekend.contains("/Lists/list\">list</a>") && !weekend.contains("/Lists/item\">item</a>"), "\(weekend)")
            #expect(weekend.contains(#"id="filter""#) && weekend.contains(#"value="WEEK""#), "the filter kept in its form")
            let none = try await rendered("\(zone)?type=Nothing")
            #expect(none.contains("No record in this range matches."))

            let share = try await rendered("\(zone)/share-1", screenshot: "console-share.png")
            #expect(share.contains(#"id="participants""#) && share.contains("bob@example.com") && share.contains("INVITED"))

            let users = try await rendered("/console/development/users")
            #expect(users.contains(world.alice.userRecordName) && users.contains(world.bob.userRecordName))
            let credentials = try await rendered("/console/development/credentials")
            #expect(credentials.contains(#"id="tokens""#) && !credentials.contains(world.apiToken), "tokens by fingerprint only")
        }
    }
}
