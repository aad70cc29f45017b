import Crypto
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusStoreSQLite
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// What real third-party CloudKit Web Services clients depend on beyond the documents: token shapes, share records that
/// read back whole, the share URL, and how refused requests end. Everything goes through real HTTP on loopback.
@Suite("Wire fidelity for third-party clients", .timeLimit(.minutes(10)))
struct WireFidelityTests {
    /// A strict standard-base64 check, as a client using a strict decoder (and force-unwrapping it) performs.
    static func decodesStrictly(_ token: String) -> Bool {
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
        guard token.count % 4 == 0, token.allSatisfy(alphabet.contains), let data = Data(base64Encoded: token) else { return false }
        return data.base64EncodedString() == token
    }

    /// The unpadded base64url form earlier versions issued.
    static func legacyForm(_ token: String) -> String {
        token.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    @Test func apiTokensAndKeyIDsAreShapedLikeApples() async throws {
        let world = try await TestWorld.make()
        let hex = /[0-9a-f]{64}/
        #expect(world.apiToken.wholeMatch(of: hex) != nil, "\(world.apiToken)")
        let key = P256.Signing.PrivateKey()
        let keyID = try await world.accounts.addServerKey(
            container: TestWorld.container, environment: .development, publicKeyPEM: key.publicKey.pemRepresentation, logger: Logger(label: "test"))
        #expect(keyID.wholeMatch(of: hex) != nil, "\(keyID)")

        // A token issued in the earlier base64url shape keeps working: only its hash is looked up.
        let legacy = TokenCodec.makeToken()
        try await world.store.saveAPIToken(
            StoredAPIToken(tokenHash: TokenCodec.hash(legacy), container: TestWorld.container, environment: .development, createdAt: 0),
            logger: Logger(label: "test"))
        try await world.test { client in
            let answer = try await client.send("zones/list", as: .apiTokenAndUser(legacy, world.alice), method: .get)
            #expect(answer.status == 200, "\(answer.json)")
        }
    }

    @Test func everyTokenDecodesWithAStrictStandardBase64Decoder() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("Z", as: alice)
            let records = (0..<5).map { operation("create", "note-\($0)", fields: #"{"rank":{"value":\#($0)}}"#) }
            _ = try await client.modify(records, as: .user(alice))
            _ = try await client.modify(
                [operation("create", "root", type: "List"), shareOperation(root: "root", participants: [("bob@example.com", "READ_ONLY")])],
                as: .user(alice))

            var tokens: [(String, String)] = []
            let listed = try await client.send("zones/list", as: .user(alice), method: .get)
            for zone in listed.zones { tokens.append(("zones/list", try #require(zone["syncToken"]?.stringValue))) }
            let lookedUp = try await client.send("zones/lookup", as: .user(alice), body: #"{"zones":[{"zoneName":"Z"}]}"#)
            tokens.append(("zones/lookup", try #require(lookedUp.zones.first?["syncToken"]?.stringValue)))
            let database = try await client.databaseChanges("private", as: alice)
            tokens.append(("changes/database", try #require(database.json["syncToken"]?.stringValue)))
            let zone = try await client.send("changes/zone", as: .user(alice), body: #"{"zones":[{"zoneID":{"zoneName":"Z"},"resultsLimit":2}]}"#)
            let zoneToken = try #require(zone.zones.first?["syncToken"]?.stringValue)
            tokens.append(("changes/zone", zoneToken))
            let legacyFeed = try await client.send("records/changes", as: .user(alice), body: #"{"zoneID":{"zoneName":"Z"}}"#)
            tokens.append(("records/changes", try #require(legacyFeed.json["syncToken"]?.stringValue)))
            let query = #"{"zoneID":{"zoneName":"Z"},"resultsLimit":2,"query":{"recordType":"Note","sortBy":[{"fieldName":"rank"}]}}"#
            let firstPage = try await client.send("records/query", as: .user(alice), body: query)
            let marker = try #require(firstPage.json["continuationMarker"]?.stringValue)
            tokens.append(("records/query", marker))

            let guid = try #require(
                (try await client.lookup(["share-1"], as: .user(alice))).records.first?["shortGUID"]?.stringValue)
            _ = try await client.resolve(guid, as: .user(bob), accept: true)
            let sharedDatabase = try await client.databaseChanges("shared", as: bob)
            tokens.append(("shared changes/database", try #require(sharedDatabase.json["syncToken"]?.stringValue)))
            let sharedZone = try await client.sharedChanges(zone: "Z", owner: alice, as: bob)
            tokens.append(("shared changes/zone", try #require(sharedZone.zones.first?["syncToken"]?.stringValue)))

            for (source, token) in tokens { #expect(Self.decodesStrictly(token), "\(source): \(token)") }

            // A client that decodes and re-encodes the marker strictly pages through every record, not just the first page.
            var names = Set(firstPage.records.compactMap { $0["recordName"]?.stringValue })
            var next: String? = try #require(Data(base64Encoded: marker)).base64EncodedString()
            while let current = next {
                let page = try await client.send(
                    "records/query", as: .user(alice), body: String(query.dropLast()) + #","continuationMarker":"\#(current)"}"#)
                #expect(page.status == 200, "\(page.json)")
                names.formUnion(page.records.compactMap { $0["recordName"]?.stringValue })
                next = page.json["continuationMarker"]?.stringValue.flatMap { Data(base64Encoded: $0)?.base64EncodedString() }
            }
            #expect(names == Set((0..<5).map { "note-\($0)" }))

            // Tokens held from before, in the unpadded base64url form, keep working.
            let resumed = try await client.send(
                "changes/zone", as: .user(alice), body: #"{"zones":[{"zoneID":{"zoneName":"Z"},"syncToken":"\#(Self.legacyForm(zoneToken))"}]}"#)
            #expect(resumed.zones.first?["serverErrorCode"] == nil, "\(resumed.json)")
            #expect(resumed.zones.first?["records"]?.arrayValue?.isEmpty == false)
            let legacyMarker = try await client.send(
                "records/query", as: .user(alice), body: String(query.dropLast()) + #","continuationMarker":"\#(Self.legacyForm(marker))"}"#)
            #expect(legacyMarker.status == 200, "\(legacyMarker.json)")
            #expect(legacyMarker.records.count == 2)
        }
    }

    @Test func shareRecordsReadBackWholeAndSaveBackWithOneParticipantRemoved() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        let carol = try await world.user("carol")
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify(
                [operation("create", "list", type: "List"), operation("create", "milk", type: "Item", extra: #","parent":{"recordName":"list"}"#)],
                zone: "Lists", as: .user(alice))
            let created = try await client.modify(
                [shareOperation(participants: [("bob@example.com", "READ_WRITE"), ("carol@example.com", "READ_ONLY")])], zone: "Lists",
                as: .user(alice))
            let guid = try #require(created.records.first?["shortGUID"]?.stringValue, "\(created.json)")
            for user in [bob, carol] { _ = try await client.resolve(guid, as: .user(user), accept: true) }

            /// The share keys `records/modify` answers with, checked on a share record from any read path.
            func expectWhole(_ share: JSONValue?, viewer: TestUser, participants: Int, _ path: String) {
                guard let share else {
                    Issue.record("\(path): no share record")
                    return
                }
                #expect(share["recordType"]?.stringValue == "cloudkit.share", "\(path)")
                #expect(share["shortGUID"]?.stringValue == guid, "\(path)")
                #expect(share["url"]?.stringValue?.hasSuffix("/share/\(guid)") == true, "\(path)")
                #expect(share["publicPermission"]?.stringValue == "NONE", "\(path)")
                #expect(share["participants"]?.arrayValue?.count == participants, "\(path): \(share)")
                #expect(share["owner"]?["userIdentity"]?["userRecordName"]?.stringValue == alice.userRecordName, "\(path)")
                #expect(share["currentUserParticipant"]?["userIdentity"]?["userRecordName"]?.stringValue == viewer.userRecordName, "\(path)")
            }

            // The owner, through lookup, query and both feeds.
            expectWhole(
                (try await client.lookup(["share-1"], zone: "Lists", as: .user(alice))).records.first, viewer: alice, participants: 3, "lookup")
            let query = try await client.send(
                "records/query", as: .user(alice), body: #"{"zoneID":{"zoneName":"Lists"},"query":{"recordType":"cloudkit.share"}}"#)
            expectWhole(query.records.first, viewer: alice, participants: 3, "query")
            let feed = try await client.send("changes/zone", as: .user(alice), body: #"{"zones":[{"zoneID":{"zoneName":"Lists"}}]}"#)
            let fed = SharingTests.zoneRecords(feed).first { $0["recordName"]?.stringValue == "share-1" }
            expectWhole(fed, viewer: alice, participants: 3, "changes/zone")
            let legacy = try await client.send("records/changes", as: .user(alice), body: #"{"zoneID":{"zoneName":"Lists"}}"#)
            expectWhole(legacy.records.first { $0["recordName"]?.stringValue == "share-1" }, viewer: alice, participants: 3, "records/changes")

            // A participant, through the shared database and resolve: everyone in a private share, no one else's email.
            let bobLookup = try await client.sharedLookup(["share-1"], zone: "Lists", owner: alice, as: bob)
            expectWhole(bobLookup.records.first, viewer: bob, participants: 3, "shared lookup")
            let emails = bobLookup.records.first?["participants"]?.arrayValue?.compactMap {
                $0["userIdentity"]?["lookupInfo"]?["emailAddress"]?.stringValue
            }
            #expect(emails == ["bob@example.com"], "a participant sees their own email only")
            let bobFeed = try await client.sharedChanges(zone: "Lists", owner: alice, as: bob)
            expectWhole(
                SharingTests.zoneRecords(bobFeed).first { $0["recordName"]?.stringValue == "share-1" }, viewer: bob, participants: 3,
                "shared changes/zone")
            let resolved = try await client.resolve(guid, as: .user(bob))
            expectWhole(resolved.json["results"]?[0]?["share"], viewer: bob, participants: 3, "records/resolve")

            // A client reads the share, drops Carol from its participants, and saves the record back as it read it.
            var record = try #require(try await client.lookup(["share-1"], zone: "Lists", as: .user(alice)).records.first?.objectValue)
            let kept = try #require(record["participants"]?.arrayValue).filter {
                $0["userIdentity"]?["userRecordName"]?.stringValue != carol.userRecordName
            }
            record["participants"] = .array(kept)
            var writer = JSONWriter()
            writer.write(.object(["operationType": .string("update"), "record": .object(record)]))
            let saved = try await client.modify([String(decoding: writer.bytes, as: UTF8.self)], zone: "Lists", as: .user(alice))
            #expect(saved.records.first?["serverErrorCode"] == nil, "\(saved.json)")
            #expect(saved.records.first?["participants"]?.arrayValue?.count == 2)

            // Bob keeps access, with his acceptance and permission; Carol has none.
            #expect(SharingTests.names(try await client.sharedLookup(["list", "milk"], zone: "Lists", owner: alice, as: bob)) == ["list", "milk"])
            let bobNow = try await client.sharedLookup(["share-1"], zone: "Lists", owner: alice, as: bob)
            #expect(bobNow.records.first?["currentUserParticipant"]?["acceptanceStatus"]?.stringValue == "ACCEPTED")
            #expect(bobNow.records.first?["currentUserParticipant"]?["permission"]?.stringValue == "READ_WRITE")
            #expect((try await client.sharedLookup(["list"], zone: "Lists", owner: alice, as: carol)).serverErrorCode == "ZONE_NOT_FOUND")
        }
    }

    @Test func aPublicShareShowsAParticipantOnlyTheOwnerAndThemselves() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        let carol = try await world.user("carol")
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify([operation("create", "list", type: "List")], zone: "Lists", as: .user(alice))
            let created = try await client.modify([shareOperation(publicPermission: "READ_ONLY")], zone: "Lists", as: .user(alice))
            let guid = try #require(created.records.first?["shortGUID"]?.stringValue, "\(created.json)")
            for user in [bob, carol] { _ = try await client.resolve(guid, as: .user(user), accept: true) }
            let owner = try await client.lookup(["share-1"], zone: "Lists", as: .user(alice))
            #expect(owner.records.first?["participants"]?.arrayValue?.count == 3)
            let seen = try await client.sharedLookup(["share-1"], zone: "Lists", owner: alice, as: bob)
            let names = seen.records.first?["participants"]?.arrayValue?.compactMap { $0["userIdentity"]?["userRecordName"]?.stringValue }
            #expect(names.map(Set.init) == [alice.userRecordName, bob.userRecordName])

            // The owner saves the list back without Carol, who joined by the link: she is removed, Bob stays.
            var record = try #require(owner.records.first?.objectValue)
            record["participants"] = .array(
                try #require(record["participants"]?.arrayValue).filter { $0["userIdentity"]?["userRecordName"]?.stringValue != carol.userRecordName }
            )
            var writer = JSONWriter()
            writer.write(.object(["operationType": .string("update"), "record": .object(record)]))
            let saved = try await client.modify([String(decoding: writer.bytes, as: UTF8.self)], zone: "Lists", as: .user(alice))
            #expect(saved.records.first?["participants"]?.arrayValue?.count == 2, "\(saved.json)")
            #expect((try await client.sharedLookup(["list"], zone: "Lists", owner: alice, as: carol)).serverErrorCode == "ZONE_NOT_FOUND")
            #expect(SharingTests.names(try await client.sharedLookup(["list"], zone: "Lists", owner: alice, as: bob)) == ["list"])
        }
    }

    @Test func theShareURLAnswersABrowserAndAClient() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify([operation("create", "list", type: "List")], zone: "Lists", as: .user(alice))
            let hostile = #"<script>alert('x')</script> & "Weekend""#
            let share = #"""
                {"operationType":"create","record":{"recordName":"share-1","recordType":"cloudkit.share","fields":{"cloudkit.title":{"value":"\#(hostile.replacingOccurrences(of: "\"", with: "\\\""))"}},"forRecord":{"recordName":"list"},"participants":[{"permission":"READ_WRITE","userIdentity":{"lookupInfo":{"emailAddress":"bob@example.com"}}}]}}
                """#
            let created = try await client.modify([share], zone: "Lists", as: .user(alice))
            let url = try #require(created.records.first?["url"]?.stringValue, "\(created.json)")
            let guid = try #require(created.records.first?["shortGUID"]?.stringValue)
            let path = "/share/\(guid)"
            #expect(url.hasSuffix(path))

            // A browser gets a page: the title escaped, the owner, how to open it, universal-link tags, a strict policy.
            let page = try await client.client.execute(uri: path, method: .get, headers: [.accept: "text/html"])
            #expect(page.status == .ok)
            #expect(page.headers[.contentType]?.hasPrefix("text/html") == true)
            #expect(page.headers[.contentSecurityPolicy]?.contains("default-src 'none'") == true)
            let html = String(buffer: page.body)
            #expect(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;Weekend&quot;"))
            #expect(!html.contains("<script"))
            #expect(html.contains("alice shared this with you."))
            #expect(html.contains(#"<meta property="og:url" content=""#))

            // A client asking for JSON without credentials learns where to accept it, not what is in it.
            let anonymous = try await client.raw(path, method: .get, headers: [.accept: "application/json"])
            #expect(anonymous.status == 200)
            let summary = try #require(anonymous.json["results"]?[0])
            #expect(summary["containerIdentifier"]?.stringValue == TestWorld.container)
            #expect(summary["environment"]?.stringValue == "development")
            #expect(summary["shortGUID"]?.stringValue == guid)
            #expect(summary["title"]?.stringValue == hostile)
            #expect(summary["zoneID"] == nil && summary["share"] == nil)
            // With the container's API token and a user's token, the answer is records/resolve's.
            let signedIn = try await client.raw(
                "\(path).json?ckAPIToken=\(client.apiToken)&ckWebAuthToken=\(bob.webAuthToken)", method: .get)
            let resolved = try await client.resolve(guid, as: .user(bob))
            #expect(signedIn.status == 200)
            #expect(signedIn.json["results"]?[0]?["participantStatus"]?.stringValue == "INVITED")
            #expect(signedIn.json["results"]?[0]?["zoneID"] == resolved.json["results"]?[0]?["zoneID"])
            #expect(signedIn.json["results"]?[0]?["share"]?["participants"] == resolved.json["results"]?[0]?["share"]?["participants"])
            let wrongToken = try await client.raw(
                "\(path).json?ckAPIToken=\(world.otherContainerToken)&ckWebAuthToken=\(bob.webAuthToken)", method: .get)
            #expect(wrongToken.status == 401)

            // Stopped: a clean 404 for both.
            let tag = try #require(created.records.first?["recordChangeTag"]?.stringValue)
            _ = try await client.modify([operation("delete", "share-1", type: nil, tag: tag)], zone: "Lists", as: .user(alice))
            let gone = try await client.client.execute(uri: path, method: .get, headers: [.accept: "text/html"])
            #expect(gone.status == .notFound)
            #expect(String(buffer: gone.body).contains("This share is not available"))
            let goneJSON = try await client.raw(path, method: .get, headers: [.accept: "application/json"])
            #expect(goneJSON.status == 404)
            #expect(goneJSON.serverErrorCode == "NOT_FOUND")
        }
    }

    @Test func theSharePageRendersInABrowser() async throws {
        let world = try await TestWorld.make()
        let alice = world.alice
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify([operation("create", "list", type: "List")], zone: "Lists", as: .user(alice))
            let created = try await client.modify([shareOperation(publicPermission: "READ_ONLY")], zone: "Lists", as: .user(alice))
            let guid = try #require(created.records.first?["shortGUID"]?.stringValue, "\(created.json)")
            let url = "http://127.0.0.1:\(try #require(client.client.port))/share/\(guid)"
            let dom = try await LinkPageBrowserTests.runChromium(["--dump-dom", url])
            #expect(dom.contains(#"<h1 id="title">Groceries</h1>"#), "\(dom)")
            #expect(dom.contains("alice shared this with you."))
            #expect(dom.contains("Anyone with this link can view it."))
            let png = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-share-\(UUID().uuidString).png")
            _ = try await LinkPageBrowserTests.runChromium(["--screenshot=\(png.path)", url])
            let image = try Data(contentsOf: png)
            #expect(image.starts(with: [0x89, 0x50, 0x4E, 0x47]), "a PNG")
            if let keep = ProcessInfo.processInfo.environment["CUMULUS_SHARE_SCREENSHOT"] { try image.write(to: URL(fileURLWithPath: keep)) }
        }
    }

    @Test func theRemainingSmallWireGaps() async throws {
        let world = try await TestWorld.make()
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            // users/lookup/contacts answers CloudKit's shape: no address book, no users.
            let contacts = try await client.send("users/lookup/contacts", as: .user(alice), body: #"{"contacts":[]}"#)
            #expect(contacts.status == 200)
            #expect(contacts.json["users"] == .array([]))

            // A new user's first token for the default zone, taken before any write, stays valid after the first write.
            let first = try await client.send("changes/zone", as: .user(bob), body: #"{"zones":[{"zoneID":{"zoneName":"_defaultZone"}}]}"#)
            let token = try #require(first.zones.first?["syncToken"]?.stringValue, "\(first.json)")
            _ = try await client.modify([operation("create", "first-note")], zone: nil, as: .user(bob))
            let next = try await client.send(
                "changes/zone", as: .user(bob), body: #"{"zones":[{"zoneID":{"zoneName":"_defaultZone"},"syncToken":"\#(token)"}]}"#)
            #expect(next.zones.first?["serverErrorCode"] == nil, "\(next.json)")
            #expect(next.zones.first?["records"]?[0]?["recordName"]?.stringValue == "first-note")

            // Over the documented number of filters or sorts: 400 naming the limit, never a retryable 503.
            let filters = (0..<1200).map { #"{"fieldName":"a","comparator":"NOT_EQUALS","fieldValue":{"value":\#($0)}}"# }.joined(separator: ",")
            let tooMany = try await client.send(
                "records/query", as: .anonymous, database: "public", body: #"{"query":{"recordType":"Note","filterBy":[\#(filters)]}}"#)
            #expect(tooMany.status == 400)
            #expect(tooMany.serverErrorCode == "BAD_REQUEST")
            #expect(tooMany.reason?.contains("query.filterBy: 1200 filters; the limit is 32") == true, "\(tooMany.json)")
            let sorts = (0..<9).map { #"{"fieldName":"f\#($0)"}"# }.joined(separator: ",")
            let tooManySorts = try await client.send(
                "records/query", as: .anonymous, database: "public", body: #"{"query":{"recordType":"Note","sortBy":[\#(sorts)]}}"#)
            #expect(tooManySorts.status == 400)
            #expect(tooManySorts.reason?.contains("the limit is 8") == true, "\(tooManySorts.json)")
        }
    }

    @Test func aMalformedChunkedBodyIsABadRequest() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let port = try #require(client.client.port)
            let head = """
                POST /database/1/\(TestWorld.container)/development/public/records/query?ckAPIToken=\(client.apiToken) HTTP/1.1\r
                Host: localhost\r
                Transfer-Encoding: chunked\r
                \r
                5\r
                {"que\r
                ZZZ\r
                nonsense\r
                \r

                """
            let exchange = try await RawHTTPClient.exchange(port: port, head: head, body: [])
            #expect(exchange.statusCode == 400, "\(exchange.response)")
            #expect(exchange.response.contains(#""serverErrorCode":"BAD_REQUEST""#))
            #expect(exchange.closedByServer)
        }
    }

    /// A client that writes its whole body before reading reads its `413`, whether or not it asked to close the connection
    /// (Python's urllib always sends `Connection: close`; a reset mid-write hid the answer from it).
    @Test(arguments: ["", "Connection: close\r\n"])
    func anOversizedBodyIsAnsweredToAClientThatSendsEverythingFirst(_ connectionHeader: String) async throws {
        var world = try await TestWorld.make()
        // The server reads a refused body until it ends or the linger is over; 20 MiB over loopback on a machine the
        // whole suite loads has taken most of a minute, so the linger here is long: it bounds only a broken drain.
        world.configuration.refusedBodyLinger = .seconds(300)
        try await world.test { client in
            let port = try #require(client.client.port)
            // 20 MiB, over the 16 MiB limit and more than loopback's socket buffers take in (4 MiB did fit: a server that
            // closed at once then passed), written in full before a byte is read.
            let body =
                Array(#"{"operations":[],"pad":""#.utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: 20 << 20) + Array(#""}"#.utf8)
            let path = "/database/1/\(TestWorld.container)/development/public/records/modify?ckAPIToken=\(client.apiToken)"
            let head = "POST \(path) HTTP/1.1\r\nHost: localhost\r\n\(connectionHeader)Content-Length: \(body.count)\r\n\r\n"
            let exchange = try await RawHTTPClient.exchange(port: port, head: head, body: body, readTimeout: 300)
            #expect(!exchange.writeFailed, "the server read the body instead of resetting the connection")
            #expect(exchange.statusCode == 413, "\(exchange.response.prefix(300))")
            #expect(exchange.response.contains(#""serverErrorCode":"QUOTA_EXCEEDED""#))
            #expect(exchange.response.lowercased().contains("connection: close"))
            #expect(exchange.closedByServer, "the connection is closed after the answer")
        }
    }

    @Test func aSenderThatNeverStopsIsCutOffAfterTheLinger() async throws {
        var world = try await TestWorld.make(limits: Limits(maximumRequestBodySize: 1 << 20))
        world.configuration.refusedBodyLinger = .seconds(1)
        try await world.test { client in
            // Chunked, so the limit is found only after 1 MiB arrived; then one second more, then the connection closes.
            // A server that reads on for good keeps this client writing for two minutes.
            let head = "POST \(Self.queryPath(client)) HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
            let chunk = Array("10000\r\n".utf8) + [UInt8](repeating: UInt8(ascii: " "), count: 0x10000) + Array("\r\n".utf8)
            let seconds = try await RawHTTPClient.secondsUntilClosed(
                port: try #require(client.client.port), head: head, chunk: chunk, maximumSeconds: 120)
            #expect(seconds != nil, "the server kept reading for two minutes")
        }
    }

    static func queryPath(_ client: CloudKitTestClient) -> String {
        "/database/1/\(TestWorld.container)/development/public/records/query?ckAPIToken=\(client.apiToken)"
    }
}
