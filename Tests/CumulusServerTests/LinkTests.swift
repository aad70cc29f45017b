import CumulusClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStoreSQLite
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// A drive in the seed's flat shape.
func driveJSON(name: String? = "Morning commute", points: Int = 50, extra: String = "", startTime: String = #""2026-11-20T07:45:00Z""#) -> String {
    let route = (0..<points).map { index in #"{"lat":\#(51.5 + Double(index) * 0.0005),"lon":\#(-0.12 + sin(Double(index) / 8) * 0.002)}"# }
    let namePart = name.map { #","customName":"\#($0)""# } ?? ""
    return
        #"{"startTime":\#(startTime),"duration":1834,"distance":12400.5,"averageSpeed":6.76,"maxSpeed":19.4,"points":[\#(route.joined(separator: ","))]\#(namePart)\#(extra)}"#
}

@Suite("Share a copy by link", .timeLimit(.minutes(10)))
struct LinkTests {
    static func upload(_ client: CloudKitTestClient, _ drives: [String], device: String = "device-1", token: String? = nil) async throws
        -> CloudKitResponse
    {
        try await client.raw(
            "/links/1/\(TestWorld.container)/development/drives?ckAPIToken=\(token ?? client.apiToken)",
            body: #"{"drives":[\#(drives.joined(separator: ","))]}"#,
            headers: [.init("X-Cumulus-Device")!: device]
        )
    }

    static func links(_ response: CloudKitResponse) -> [JSONValue] { response.json["links"]?.arrayValue ?? [] }

    @Test(arguments: TestStore.all) func uploadGivesOneLinkPerDriveThatExpiresInADay(_ store: TestStore) async throws {
        let time = LockedTime(Date(timeIntervalSince1970: 1_795_000_000))
        let world = try await TestWorld.make(store: store, clock: WallClock { time.now })
        try await world.test { client in
            let response = try await Self.upload(client, [driveJSON(), driveJSON(name: nil), driveJSON(name: "Third")])
            #expect(response.status == 200, "\(response.json)")
            let links = Self.links(response)
            #expect(links.count == 3)
            let id = try #require(links[0]["id"]?.stringValue)
            #expect(links[0]["url"]?.stringValue?.hasSuffix("/s/\(id)") == true)
            #expect(links[0]["expiresAt"]?.stringValue == "2026-11-19T11:06:40.000Z")

            let json = try await client.raw("/s/\(id)", method: .get, headers: [.accept: "application/json"])
            #expect(json.status == 200)
            #expect(json.json["drive"]?["customName"]?.stringValue == "Morning commute")
            #expect(json.json["drive"]?["startTime"]?.stringValue == "2026-11-20T07:45:00.000Z")
            #expect(json.json["drive"]?["points"]?.arrayValue?.count == 50)
            let suffix = try await client.raw("/s/\(id).json", method: .get)
            #expect(suffix.json == json.json)
            let unnamed = try await client.raw("/s/\(try #require(links[1]["id"]?.stringValue)).json", method: .get)
            #expect(unnamed.json["drive"]?["customName"] == nil)

            let page = try await client.client.execute(uri: "/s/\(id)", method: .get, headers: [.accept: "text/html"])
            #expect(page.status == .ok)
            #expect(page.headers[.contentType]?.hasPrefix("text/html") == true)
            #expect(page.headers[.contentSecurityPolicy]?.contains("default-src 'none'") == true)
            let html = String(buffer: page.body)
            #expect(html.contains("Morning commute"))
            #expect(html.contains("12.40 km"))
            #expect(html.contains("30:34"))
            #expect(html.contains("24.3 km/h"))
            #expect(html.contains("69.8 km/h"))
            #expect(html.contains("<path id=\"route\" d=\"M"))
            #expect(html.contains("og:title"))
            #expect(!html.contains("<script"))

            // A day later the link is gone: a clean 404 for the app and a human page for a browser.
            time.advance(by: 24 * 3600 + 1)
            let expired = try await client.raw("/s/\(id).json", method: .get)
            #expect(expired.status == 404)
            #expect(expired.reason == "This link has expired")
            let expiredPage = try await client.client.execute(uri: "/s/\(id)", method: .get, headers: [.accept: "text/html"])
            #expect(expiredPage.status == .notFound)
            #expect(String(buffer: expiredPage.body).contains("This link has expired"))
            // The hourly cleanup deletes them for good.
            let service = LinkService(store: world.store, clock: WallClock { time.now })
            let deleted = try await service.deleteExpired(logger: .testServer)
            #expect(deleted == 3)
            let again = try await service.deleteExpired(logger: .testServer)
            #expect(again == 0)
        }
    }

    @Test(arguments: TestStore.all) func anAPIKeyAndADeviceAreRequired(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let missing = try await client.raw(
                "/links/1/\(TestWorld.container)/development/drives", body: #"{"drives":[\#(driveJSON())]}"#,
                headers: [.init("X-Cumulus-Device")!: "d"])
            #expect(missing.status == 401)
            #expect(try await Self.upload(client, [driveJSON()], token: "wrong").status == 401)
            #expect(try await Self.upload(client, [driveJSON()], token: world.otherContainerToken).status == 401)
            let noDevice = try await client.raw(
                "/links/1/\(TestWorld.container)/development/drives?ckAPIToken=\(world.apiToken)", body: #"{"drives":[\#(driveJSON())]}"#)
            #expect(noDevice.status == 400)
            #expect(noDevice.reason?.hasPrefix("X-Cumulus-Device") == true)
        }
    }

    @Test func uploadsAreRateLimitedPerDeviceAndAddressAcrossRestarts() async throws {
        let time = LockedTime(Date(timeIntervalSince1970: 1_795_000_000))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-links-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("cumulus.sqlite").path
        let logger = Logger(label: "t")
        let accounts = AccountService(store: try SQLiteRecordStore(path: path), clock: WallClock { time.now })
        try await accounts.createContainer(TestWorld.container, logger: logger)
        let apiToken = try await accounts.createAPIToken(container: TestWorld.container, environment: .development, logger: logger)
        func server(_ body: @Sendable (CloudKitTestClient) async throws -> Void) async throws {
            let app = buildApplication(
                configuration: ServerConfiguration(port: 0), store: try SQLiteRecordStore(path: path), logger: .testServer,
                clock: WallClock { time.now })
            try await app.test(.live) { client in try await CloudKitTestClient.patient(client, apiToken: apiToken, body) }
        }
        try await server { client in
            for _ in 0..<5 { #expect(try await Self.upload(client, [driveJSON()]).status == 200) }
            let sixth = try await Self.upload(client, [driveJSON()])
            #expect(sixth.status == 429)
            #expect(sixth.serverErrorCode == "THROTTLED")
            #expect(sixth.headers[.retryAfter] == "3600")
            #expect(sixth.json["retryAfter"] == .number("3600"))
            #expect(try await Self.upload(client, [driveJSON()], device: "device-2").status == 200, "another device has its own count")
        }
        // A restart forgets nothing.
        try await server { client in
            #expect(try await Self.upload(client, [driveJSON()]).status == 429)
            // Each hour allows five more, up to twenty a day.
            for hour in 1...3 {
                time.advance(by: 3601)
                for _ in 0..<5 { #expect(try await Self.upload(client, [driveJSON()]).status == 200, "hour \(hour)") }
            }
            time.advance(by: 3601)
            let daily = try await Self.upload(client, [driveJSON()])
            #expect(daily.status == 429)
            #expect(daily.reason?.contains("20 links a day") == true)
        }
        try await server { client in
            // Sixty an hour from one address, whatever the device.
            time.advance(by: 2 * 24 * 3600)
            for index in 0..<60 { #expect(try await Self.upload(client, [driveJSON()], device: "d\(index)").status == 200) }
            let address = try await Self.upload(client, [driveJSON()], device: "fresh")
            #expect(address.status == 429)
            #expect(address.reason?.contains("from this address") == true)
        }
    }

    @Test func behindALoadBalancerEachClientAddressHasItsOwnCount() async throws {
        var world = try await TestWorld.make()
        world.configuration.trustsForwardedFor = true
        try await world.test { client async throws in
            let drive = driveJSON()
            func upload(device: String, forwardedFor: String) async throws -> Int {
                try await client.raw(
                    "/links/1/\(TestWorld.container)/development/drives?ckAPIToken=\(client.apiToken)", body: #"{"drives":[\#(drive)]}"#,
                    headers: [.init("X-Cumulus-Device")!: device, .init("X-Forwarded-For")!: forwardedFor]
                ).status
            }
            // Sixty an hour from one client address, the last entry, whatever a client wrote before it.
            for index in 0..<60 { #expect(try await upload(device: "d\(index)", forwardedFor: "1.2.3.\(index), 203.0.113.7") == 200) }
            #expect(try await upload(device: "fresh", forwardedFor: "9.9.9.9, 203.0.113.7") == 429)
            #expect(try await upload(device: "fresh", forwardedFor: "203.0.113.8") == 200, "another client behind the same load balancer")
        }
    }

    @Test(arguments: TestStore.all) func sizeLimits(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            #expect(try await Self.upload(client, Array(repeating: driveJSON(points: 5), count: 6)).status == 200)
            let seven = try await Self.upload(client, Array(repeating: driveJSON(points: 5), count: 7))
            #expect(seven.status == 400)
            #expect(seven.reason?.hasPrefix("drives: 7 drives") == true)
            #expect(try await Self.upload(client, [driveJSON(points: 10_000)], device: "big").status == 200)
            let tooMany = try await Self.upload(client, [driveJSON(points: 10_001)], device: "big2")
            #expect(tooMany.status == 400)
            #expect(tooMany.reason?.hasPrefix("drives[0].points") == true)
            let huge = try await Self.upload(client, [driveJSON(name: String(repeating: "x", count: 5 * 1024 * 1024))], device: "big3")
            #expect(huge.status == 413)
            #expect(huge.serverErrorCode == "QUOTA_EXCEEDED")
        }
    }

    @Test(arguments: [
        (driveJSON(extra: "").replacingOccurrences(of: #"{"lat":51.5,"#, with: #"{"lat":91,"#), "drives[0].points[0].lat"),
        (driveJSON().replacingOccurrences(of: #""lon":-0.12}"#, with: #""lon":-181}"#), "drives[0].points[0].lon"),
        (driveJSON().replacingOccurrences(of: #""duration":1834"#, with: #""duration":-5"#), "drives[0].duration"),
        (driveJSON().replacingOccurrences(of: #""distance":12400.5"#, with: #""distance":-1"#), "drives[0].distance"),
        (driveJSON().replacingOccurrences(of: #""maxSpeed":19.4"#, with: #""maxSpeed":1e999"#), "drives[0].maxSpeed"),
        (driveJSON().replacingOccurrences(of: #""averageSpeed":6.76"#, with: #""averageSpeed":"fast""#), "drives[0].averageSpeed"),
        (driveJSON(startTime: #""yesterday""#), "drives[0].startTime"),
        (driveJSON().replacingOccurrences(of: #""duration":1834,"#, with: ""), "drives[0].duration"),
    ])
    func hostileInputIsRejectedNamingTheField(_ drive: String, _ path: String) async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let response = try await Self.upload(client, [drive])
            #expect(response.status == 400, "\(response.json)")
            #expect(response.reason?.hasPrefix(path) == true, "\(response.reason ?? "")")
        }
    }

    @Test(arguments: TestStore.all) func namesAreCleanedAndPagesEscapeEverything(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let hostile = #"<script>alert(\"x\")</script> Tom's & \"Jerry\" drive "# + String(repeating: "z", count: 200)
            let response = try await Self.upload(client, [driveJSON(name: hostile)])
            let id = try #require(Self.links(response).first?["id"]?.stringValue)
            let stored = try await client.raw("/s/\(id).json", method: .get)
            let name = try #require(stored.json["drive"]?["customName"]?.stringValue)
            #expect(!name.contains("<") && !name.contains(">") && !name.contains("\"") && !name.contains("'"))
            #expect(name.hasPrefix("scriptalert(x)/script Toms & Jerry drive"))
            #expect(name.count == 100)
            let page = String(buffer: try await client.client.execute(uri: "/s/\(id)", method: .get).body)
            #expect(page.contains("Toms &amp; Jerry"))
            #expect(!page.contains("<script"))
            // Even an unknown link id is never echoed into the page.
            let probe = try await client.client.execute(uri: "/s/%3Cscript%3E", method: .get)
            #expect(probe.status == .notFound)
            #expect(!String(buffer: probe.body).contains("<script"))
        }
    }

    @Test(arguments: TestStore.all) func appSiteAssociationIsServedFromConfiguration(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let association = #"{"applinks":{"details":[{"appIDs":["ABCDE12345.com.example.ghost"],"components":[{"/":"/s/*"}]}]}}"#
        var configuration = world.configuration
        configuration.appleAppSiteAssociation = association
        configuration.appStoreID = "123456789"
        let app = buildApplication(configuration: configuration, store: world.store, logger: .testServer)
        try await app.test(.router) { client in
            let response = try await client.execute(uri: "/.well-known/apple-app-site-association", method: .get)
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "application/json")
            #expect(String(buffer: response.body) == association)
            let upload = try await client.execute(
                uri: "/links/1/\(TestWorld.container)/development/drives?ckAPIToken=\(world.apiToken)", method: .post,
                headers: [.init("X-Cumulus-Device")!: "d"], body: ByteBuffer(string: #"{"drives":[\#(driveJSON())]}"#)
            )
            let id = try #require(try JSONValue(parsing: Array(upload.body.readableBytesView))["links"]?[0]?["id"]?.stringValue)
            let page = String(buffer: try await client.execute(uri: "/s/\(id)", method: .get).body)
            #expect(page.contains(#"<meta name="apple-itunes-app" content="app-id=123456789, app-argument=http://"#))
        }
        let unconfigured = buildApplication(configuration: world.configuration, store: world.store, logger: .testServer)
        try await unconfigured.test(.router) { client in
            let response = try await client.execute(uri: "/.well-known/apple-app-site-association", method: .get)
            #expect(response.status == .notFound)
        }
    }
}

/// The client side, against a real server on a loopback port.
@Suite("Share a copy by link: the client", .timeLimit(.minutes(10)))
struct LinkClientTests {
    func withClient(_ world: TestWorld, _ body: @Sendable (LinkClient) async throws -> Void) async throws {
        try await world.application().test(.live) { client in
            let links = LinkClient(
                serverURL: URL(string: "http://127.0.0.1:\(client.port!)")!, container: TestWorld.container, apiToken: world.apiToken,
                deviceID: "phone-1"
            )
            try await body(links)
        }
    }

    static let drive = DriveSnapshot(
        startTime: Date(timeIntervalSince1970: 1_795_000_000), duration: 1834, distance: 12_400.5, averageSpeed: 6.76, maxSpeed: 19.4,
        points: (0..<20).map { DriveSnapshot.Point(lat: 51.5 + Double($0) * 0.001, lon: -0.12) }, customName: "Morning commute"
    )

    @Test(arguments: TestStore.all) func uploadDownloadAndImportAFreshCopy(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await withClient(world) { links in
            var unnamed = Self.drive
            unnamed.customName = nil
            let uploaded = try await links.upload([Self.drive, unnamed])
            #expect(uploaded.count == 2)
            let received = try await links.downloadDrive(uploaded[0].url.absoluteString)
            #expect(received == Self.drive)
            let copy = received.importedCopy()
            #expect(copy.name == "Morning commute (Shared)")
            #expect(try await links.downloadDrive(uploaded[1].id).importedCopy().name == "Shared Drive")
            // Two imports of the same link are two independent drives.
            #expect(received.importedCopy().id != copy.id)
        }
    }

    @Test(arguments: TestStore.all) func errorsAreTypedForPeople(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await withClient(world) { links in
            await #expect(throws: LinkError.expired) { try await links.downloadDrive("nonexistent") }
            var wrongKey = links
            wrongKey.apiToken = "nope"
            await #expect(throws: LinkError.unauthorized) { try await wrongKey.upload([Self.drive]) }
            var bad = Self.drive
            bad.points.append(.init(lat: 95, lon: 0))
            let invalid = await #expect(throws: LinkError.self) { try await links.upload([bad]) }
            #expect(invalid?.userMessage == "This can't be shared: some of its data is invalid.")
            await #expect(throws: LinkError.self) { try await links.upload(Array(repeating: Self.drive, count: 7)) }
            for _ in 0..<5 { _ = try await links.upload([Self.drive]) }
            let limited = await #expect(throws: LinkError.self) { try await links.upload([Self.drive]) }
            // The real clock runs during the test: the hour has a few seconds less left.
            guard case .rateLimited(let retryAfter)? = limited else {
                Issue.record("expected rateLimited, got \(String(describing: limited))"); return
            }
            #expect((3500...3600).contains(retryAfter ?? 0))
            #expect(limited?.userMessage == "You've reached the sharing limit. Try again later.")
            #expect(LinkError.expired.userMessage == "This link has expired.")
        }
    }

    @Test(arguments: TestStore.all) func genericRecordSnapshotsRoundTripAndImportWithFreshNames(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await withClient(world) { links in
            let records = [
                SnapshotRecord(recordName: "list-1", recordType: "List", fields: ["name": .string("Weekend")]),
                SnapshotRecord(
                    recordName: "item-1", recordType: "Item",
                    fields: ["title": .string("Milk"), "list": .reference(Reference(recordName: "list-1", action: .deleteSelf)), "count": .int64(2)],
                    parent: "list-1"
                ),
            ]
            let link = try await links.upload(records: records)
            let received = try await links.downloadRecords(link.url.absoluteString)
            #expect(received == records)
            let copies = SnapshotRecord.freshCopies(of: received, nameField: "name")
            #expect(Set(copies.map(\.recordName)).isDisjoint(with: ["list-1", "item-1"]), "never the sender's identifiers")
            #expect(copies[1].parent == copies[0].recordName)
            #expect(copies[1].fields["list"] == .reference(Reference(recordName: copies[0].recordName, action: .deleteSelf)))
            #expect(copies[0].fields["name"] == .string("Weekend (Shared)"))
        }
    }
}

/// The web page, rendered by a real browser (Debian's chromium, installed by `.ci/run`).
@Suite("Share a copy by link: the web page in a browser", .serialized, .timeLimit(.minutes(10)))
struct LinkPageBrowserTests {
    static var chromium: String? {
        ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Runs the browser to its end on a thread of its own: waiting on a cooperative thread would starve the server the
    /// browser is talking to (two browser tests at once take both of a two-core machine's, and nothing moves).
    static func runChromium(_ arguments: [String]) async throws -> String {
        let executable = URL(fileURLWithPath: try #require(chromium, "chromium is needed: apt-get install -y chromium"))
        return try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                let browser: ChildProcess
                do {
                    browser = try ChildProcess(
                        executable.path, ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=390,844"] + arguments)
                } catch {
                    continuation.resume(throwing: error)
                    return
                }
                let data = browser.standardOutput?.readDataToEndOfFile() ?? Data()
                browser.wait()
                continuation.resume(returning: String(decoding: data, as: UTF8.self))
            }
        }
    }

    @Test(arguments: TestStore.all) func theDrivePageRendersTheRouteAndTheNumbers(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.application().test(.live) { client in
            let base = "http://127.0.0.1:\(client.port!)"
            let links = LinkClient(serverURL: URL(string: base)!, container: TestWorld.container, apiToken: world.apiToken, deviceID: "browser-test")
            let points = (0..<120).map { index -> DriveSnapshot.Point in
                let angle = Double(index) / 119 * 1.6 * Double.pi
                return .init(lat: 51.5007 + 0.012 * sin(angle) + Double(index) * 0.00005, lon: -0.1246 + 0.02 * (1 - cos(angle)))
            }
            let drive = DriveSnapshot(
                startTime: Date(timeIntervalSince1970: 1_795_050_000), duration: 1834, distance: 12_400.5, averageSpeed: 6.76, maxSpeed: 19.4,
                points: points,
                customName: "Morning commute"
            )
            let link = try await links.upload([drive])[0]
            let url = "\(base)/s/\(link.id)"

            // The DOM after the browser rendered it: the route is drawn, the numbers are shown.
            let dom = try await Self.runChromium(["--dump-dom", url])
            #expect(dom.contains("<path id=\"route\" d=\"M"))
            #expect(dom.components(separatedBy: " L").count > 100, "one segment per point")
            for text in ["Morning commute", "12.40 km", "30:34", "24.3 km/h", "69.8 km/h"] { #expect(dom.contains(text), "\(text)") }

            // And a picture of it.
            let png = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-drive-\(UUID().uuidString).png")
            _ = try await Self.runChromium(["--screenshot=\(png.path)", url])
            let image = try Data(contentsOf: png)
            #expect(image.starts(with: [0x89, 0x50, 0x4E, 0x47]), "a PNG")
            #expect(image.count > 10_000, "more than a blank page")
            if let keep = ProcessInfo.processInfo.environment["CUMULUS_SCREENSHOT"] {
                try image.write(to: URL(fileURLWithPath: keep))
            }
        }
    }
}
