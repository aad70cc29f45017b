import Crypto
import CumulusCore
import CumulusModel
import HTTPTypes
import Logging
import Testing

@Suite("Public database and user discovery", .timeLimit(.minutes(10)))
struct PublicDatabaseTests {
    @Test(arguments: TestStore.all)
    func everyoneReadsOnlyTheCreatorOrAKeyWrites(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        var signer = AuthenticationTests.Signer()
        signer.keyID = try await world.accounts.addServerKey(
            container: TestWorld.container, environment: .development, publicKeyPEM: signer.key.publicKey.pemRepresentation,
            logger: Logger(label: "t")
        )
        let key = signer
        try await world.test { client in
            let created = try await client.modify(
                [operation("create", "post", type: "Post", fields: #"{"text":{"value":"hello"}}"#)], zone: nil, as: .user(world.alice),
                database: "public"
            )
            let tag = try #require(created.records[0]["recordChangeTag"]?.stringValue)

            // Anyone with the API token reads it, signed in or not, by lookup and by query.
            let anonymous = try await client.lookup(["post"], zone: nil, as: .anonymous, database: "public")
            #expect(anonymous.records[0]["fields"]?["text"]?["value"] == .string("hello"))
            let query = try await client.send("records/query", as: .anonymous, database: "public", body: #"{"query":{"recordType":"Post"}}"#)
            #expect(query.records.count == 1)

            // Another user can neither change nor delete it.
            let bobUpdate = try await client.modify(
                [operation("update", "post", tag: tag, fields: #"{"text":{"value":"defaced"}}"#)], zone: nil, as: .user(world.bob), database: "public"
            )
            #expect(bobUpdate.records[0]["serverErrorCode"]?.stringValue == "ACCESS_DENIED")
            let bobDelete = try await client.modify([operation("forceDelete", "post")], zone: nil, as: .user(world.bob), database: "public")
            #expect(bobDelete.records[0]["serverErrorCode"]?.stringValue == "ACCESS_DENIED")
            // An anonymous caller cannot write at all.
            let anonymousWrite = try await client.modify([operation("create", "spam", type: "Post")], zone: nil, as: .anonymous, database: "public")
            #expect(anonymousWrite.status == 421)
            // Bob can create his own.
            let bobCreate = try await client.modify([operation("create", "bobs", type: "Post")], zone: nil, as: .user(world.bob), database: "public")
            #expect(bobCreate.records[0]["serverErrorCode"] == nil)

            // The creator changes it; a server-to-server key, acting as the developer, may too.
            let aliceUpdate = try await client.modify(
                [operation("update", "post", type: "Post", tag: tag, fields: #"{"text":{"value":"edited"}}"#)], zone: nil, as: .user(world.alice),
                database: "public")
            #expect(aliceUpdate.records[0]["fields"]?["text"]?["value"] == .string("edited"), "\(aliceUpdate.json)")
            let path = "/database/1/\(TestWorld.container)/development/public/records/modify"
            let body = #"{"operations":[\#(operation("forceDelete", "post"))]}"#
            let moderated = try await client.raw(path, body: body, headers: try key.headers(body: body, subpath: path))
            #expect(moderated.records[0]["deleted"] == .bool(true))
            #expect(
                try await client.lookup(["post"], zone: nil, as: .anonymous, database: "public").records[0]["serverErrorCode"]?.stringValue
                    == "NOT_FOUND")
        }
    }

    @Test(arguments: TestStore.all)
    func onlyDiscoverableUsersAreFound(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let byEmail = #"{"users":[{"emailAddress":"BOB@example.com"},{"emailAddress":"nobody@example.com"}]}"#
            let hidden = try await client.send("users/lookup/email", as: .user(world.alice), database: "public", body: byEmail)
            #expect(hidden.status == 200)
            #expect(hidden.json["users"]?.arrayValue?.isEmpty == true, "not discoverable by default")

            let optIn = try await client.raw(
                "/auth/1/\(TestWorld.container)/development/discoverability?ckAPIToken=\(world.apiToken)&ckWebAuthToken=\(world.bob.webAuthToken)",
                body: #"{"discoverable":true}"#
            )
            #expect(optIn.status == 200)

            let found = try await client.send("users/lookup/email", as: .user(world.alice), database: "public", body: byEmail)
            let users = try #require(found.json["users"]?.arrayValue)
            #expect(users.count == 1)
            #expect(users[0]["userRecordName"]?.stringValue == world.bob.userRecordName)
            #expect(users[0]["nameComponents"]?["givenName"]?.stringValue == "bob")
            #expect(users[0]["lookupInfo"]?["emailAddress"]?.stringValue == "bob@example.com")
            #expect(!"\(found.json)".contains("scrypt"), "no private fields")

            let discover = try await client.send(
                "users/discover", as: .user(world.alice), database: "public",
                body: #"{"lookupInfos":[{"userRecordName":"\#(world.bob.userRecordName)"},{"userRecordName":"\#(world.alice.userRecordName)"}]}"#
            )
            #expect(discover.json["users"]?.arrayValue?.map { $0["userRecordName"]?.stringValue } == [world.bob.userRecordName])
            #expect(discover.json["users"]?[0]?["lookupInfo"]?["emailAddress"] == nil, "email only when looked up by email")

            let anonymous = try await client.send("users/discover", as: .anonymous, database: "public", body: #"{"lookupInfos":[]}"#)
            #expect(anonymous.status == 421)
        }
    }

    /// A server-to-server key (the app's backend) finds the users who chose to be found, at the public database's path
    /// where keys act; at another it gets `403 ACCESS_DENIED`, never a sign-in redirect a key cannot follow.
    @Test(arguments: TestStore.all)
    func aServerToServerKeyDiscoversAtThePublicDatabase(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        var signer = AuthenticationTests.Signer()
        signer.keyID = try await world.accounts.addServerKey(
            container: TestWorld.container, environment: .development, publicKeyPEM: signer.key.publicKey.pemRepresentation,
            logger: Logger(label: "t"))
        try await world.accounts.setDiscoverable(container: TestWorld.container, name: "bob", true, logger: Logger(label: "t"))
        let key = signer
        try await world.test { client in
            func discover(_ operation: String, database: String, method: HTTPRequest.Method = .post, body: String = "") async throws
                -> CloudKitResponse
            {
                let path = "/database/1/\(TestWorld.container)/development/\(database)/\(operation)"
                return try await client.raw(path, method: method, body: body, headers: try key.headers(body: body, subpath: path))
            }
            let byEmail = #"{"users":[{"emailAddress":"bob@example.com"},{"emailAddress":"alice@example.com"}]}"#
            for operation in ["users/lookup/email", "users/discover"] {
                let found = try await discover(operation, database: "public", body: byEmail)
                #expect(found.status == 200, "\(found.json)")
                #expect(found.json["users"]?.arrayValue?.map { $0["userRecordName"]?.stringValue } == [world.bob.userRecordName], "\(found.json)")
            }
            let byID = try await discover(
                "users/lookup/id", database: "public", body: #"{"users":[{"userRecordName":"\#(world.bob.userRecordName)"}]}"#)
            #expect(byID.json["users"]?[0]?["userRecordName"]?.stringValue == world.bob.userRecordName, "\(byID.json)")
            let everyone = try await discover("users/discover", database: "public", method: .get)
            #expect(everyone.status == 200 && everyone.json["users"]?.arrayValue?.isEmpty == true, "\(everyone.json)")
            for database in ["private", "shared"] {
                let refused = try await discover("users/lookup/email", database: database, body: byEmail)
                #expect(refused.status == 403 && refused.serverErrorCode == "ACCESS_DENIED", "\(refused.json)")
                #expect(refused.json["redirectURL"] == nil)
                #expect(refused.reason?.contains("public database") == true)
            }
        }
    }
}
