import Crypto
import CumulusCore
import CumulusModel
import Logging
import Testing

@Suite("Public database and user discovery")
struct PublicDatabaseTests {
    @Test func everyoneReadsOnlyTheCreatorOrAKeyWrites() async throws {
        let world = try await TestWorld.make()
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

    @Test func onlyDiscoverableUsersAreFound() async throws {
        let world = try await TestWorld.make()
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
}
