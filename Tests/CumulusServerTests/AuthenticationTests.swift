import Crypto
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import Foundation
import HTTPTypes
import Logging
import Synchronization
import Testing

@Suite("Authentication: API tokens, web auth tokens, server-to-server keys, sign-in", .timeLimit(.minutes(10)))
struct AuthenticationTests {
    @Test(arguments: TestStore.all)
    func apiTokenIsRequiredAndChecked(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let missing = try await client.send("zones/list", as: .none, database: "public", method: .get)
            #expect(missing.status == 401)
            #expect(missing.serverErrorCode == "AUTHENTICATION_FAILED")
            #expect(missing.json["uuid"]?.stringValue != nil)

            let wrong = try await client.send("zones/list", as: .apiToken("not-a-token"), database: "public", method: .get)
            #expect(wrong.status == 401)

            // A token opens only its own container and environment.
            let otherContainer = try await client.send("zones/list", as: .apiToken(world.otherContainerToken), database: "public", method: .get)
            #expect(otherContainer.status == 401)
            let otherEnvironment = try await client.send("zones/list", as: .apiToken(world.productionToken), database: "public", method: .get)
            #expect(otherEnvironment.status == 401)
            let production = try await client.send(
                "zones/list", as: .apiToken(world.productionToken), database: "public", environment: "production", method: .get)
            #expect(production.status == 200)
        }
    }

    /// Each authenticated group resolves the caller, then the database the path names, once, before any handler: a
    /// stranger learns nothing from a made-up database, and a caller is told which part of the path is wrong.
    @Test func aPathNamingNoDatabaseIsRefusedAfterAuthenticationNamingThePath() async throws {
        let world = try await TestWorld.make(store: .sqlite)
        try await world.test { client in
            let stranger = try await client.send("zones/list", as: .none, database: "everything", method: .get)
            #expect(stranger.status == 401)
            for operation in ["zones/list", "records/query", "assets/upload", "tokens/create", "changes/database"] {
                let answer = try await client.send(operation, as: .user(world.alice), database: "everything", body: "{}")
                #expect(answer.status == 400, "\(operation)")
                #expect(answer.serverErrorCode == "BAD_REQUEST")
                #expect(answer.reason == "path: database must be public, private or shared", "\(operation)")
            }
            // Push tokens also answer without a database segment (CloudKit JS's path): the caller alone is resolved.
            let token = try await client.raw("/device/1/\(TestWorld.container)/development/tokens/create?ckAPIToken=\(world.apiToken)", body: "{}")
            #expect(token.status == 200)
        }
    }

    @Test(arguments: TestStore.all)
    func userTokenIsRequiredForThePrivateDatabase(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let anonymous = try await client.send("zones/list", as: .anonymous, method: .get)
            #expect(anonymous.status == 421)
            #expect(anonymous.serverErrorCode == "AUTHENTICATION_REQUIRED")
            #expect(anonymous.json["redirectURL"]?.stringValue?.hasSuffix("/auth/1/\(TestWorld.container)/development/signin") == true)

            var forged = world.alice
            forged.webAuthToken = "forged"
            let bad = try await client.send("zones/list", as: .user(forged), method: .get)
            #expect(bad.status == 401)
            #expect(bad.serverErrorCode == "AUTHENTICATION_FAILED")

            let good = try await client.send("zones/list", as: .user(world.alice), method: .get)
            #expect(good.status == 200)
            #expect(good.zones.map { $0["zoneID"]?["zoneName"]?.stringValue } == ["_defaultZone"])
        }
    }

    @Test(arguments: TestStore.all)
    func expiredWebAuthTokensAreRejected(_ store: TestStore) async throws {
        let clockTime = LockedTime(Date())
        let world = try await TestWorld.make(store: store, clock: WallClock { clockTime.now })
        try await world.test { client in
            let fresh = try await client.send("zones/list", as: .user(world.alice), method: .get)
            #expect(fresh.status == 200)
            clockTime.advance(by: 15 * 24 * 3600)
            let expired = try await client.send("zones/list", as: .user(world.alice), method: .get)
            #expect(expired.status == 401)
        }
    }

    @Test(arguments: TestStore.all)
    func usersCallerReturnsTheFlatIdentity(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            for operation in ["users/caller", "users/current"] {
                let response = try await client.send(operation, as: .user(world.alice), database: "public", method: .get)
                #expect(response.status == 200)
                #expect(response.json["userRecordName"]?.stringValue == world.alice.userRecordName)
                #expect(response.json["lookupInfo"]?["emailAddress"]?.stringValue == "alice@example.com")
                #expect(response.json["users"]?[0]?["userRecordName"]?.stringValue == world.alice.userRecordName)
            }
            #expect(try await client.send("users/caller", as: .anonymous, database: "public", method: .get).status == 421)
        }
    }

    /// PostgreSQL cannot hold U+0000 in a text column (SQLite can): a name holding one is the request's fault, answered
    /// 4xx on both stores, never a 500; a field's text holding one is stored (fields are stored escaped) and read back.
    @Test(arguments: TestStore.all)
    func textsHoldingNULAreRefusedOrStoredNeverAServerError(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let base = "/auth/1/\(TestWorld.container)/development"
            let signIn = try await client.raw("\(base)/signin?ckAPIToken=\(world.apiToken)", body: #"{"name":"car\u0000ol","password":"x"}"#)
            #expect((400..<500).contains(signIn.status) && signIn.serverErrorCode != nil, "\(signIn.status) \(signIn.json)")
            let signUp = try await client.raw(
                "\(base)/signup?ckAPIToken=\(world.apiToken)", body: #"{"name":"dav\u0000e","password":"correct horse battery"}"#)
            #expect((400..<500).contains(signUp.status) && signUp.serverErrorCode != nil, "\(signUp.status) \(signUp.json)")

            try await client.createZone("Z", as: world.alice)
            let named = try await client.send(
                "records/modify", as: .user(world.alice),
                body: #"{"zoneID":{"zoneName":"Z"},"operations":[{"operationType":"create","record":{"recordName":"a\u0000b","recordType":"Note"}}]}"#
            )
            #expect(named.status != 500 && (named.status >= 400 || named.records.first?["serverErrorCode"] != nil), "\(named.status) \(named.json)")

            let field = try await client.modify(
                [operation("create", "note", fields: #"{"text":{"value":"before\u0000after"}}"#)], zone: "Z", as: .user(world.alice))
            #expect(field.status == 200 && field.records.first?["serverErrorCode"] == nil, "\(field.json)")
            let read = try await client.lookup(["note"], zone: "Z", as: .user(world.alice))
            #expect(read.records.first?["fields"]?["text"]?["value"]?.stringValue == "before\u{0}after")
        }
    }

    @Test(arguments: TestStore.all)
    func signUpSignInAndSignOutOverHTTP(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let base = "/auth/1/\(TestWorld.container)/development"
            let signUp = try await client.raw(
                "\(base)/signup?ckAPIToken=\(world.apiToken)", body: #"{"name":"carol","password":"correct horse","email":"carol@example.com"}"#)
            #expect(signUp.status == 201)
            let token = try #require(signUp.json["ckWebAuthToken"]?.stringValue)
            let carol = TestUser(
                account: .init(
                    userRecordName: try #require(signUp.json["userRecordName"]?.stringValue), container: TestWorld.container, name: "carol",
                    createdAt: 0),
                webAuthToken: token
            )
            #expect(
                try await client.send("users/caller", as: .user(carol), database: "public", method: .get).json["userRecordName"]?.stringValue
                    == carol.userRecordName)

            let again = try await client.raw("\(base)/signup?ckAPIToken=\(world.apiToken)", body: #"{"name":"Carol","password":"another one"}"#)
            #expect(again.status == 409)
            #expect(again.serverErrorCode == "EXISTS")

            let wrongPassword = try await client.raw(
                "\(base)/signin?ckAPIToken=\(world.apiToken)", body: #"{"name":"carol","password":"wrong password"}"#)
            #expect(wrongPassword.status == 401)
            let unknown = try await client.raw("\(base)/signin?ckAPIToken=\(world.apiToken)", body: #"{"name":"nobody","password":"wrong password"}"#)
            #expect(unknown.status == 401)
            #expect(unknown.reason == wrongPassword.reason, "sign-in does not reveal who has an account")

            let signIn = try await client.raw("\(base)/signin?ckAPIToken=\(world.apiToken)", body: #"{"name":"carol","password":"correct horse"}"#)
            #expect(signIn.status == 200)
            let second = try #require(signIn.json["ckWebAuthToken"]?.stringValue)
            #expect(second != token)

            let signOut = try await client.raw("\(base)/signout?ckAPIToken=\(world.apiToken)", body: #"{"ckWebAuthToken":"\#(token)"}"#)
            #expect(signOut.status == 204)
            #expect(try await client.send("users/caller", as: .user(carol), database: "public", method: .get).status == 401)

            let noKey = try await client.raw("\(base)/signin", body: #"{"name":"carol","password":"correct horse"}"#)
            #expect(noKey.status == 401)
            let shortPassword = try await client.raw("\(base)/signup?ckAPIToken=\(world.apiToken)", body: #"{"name":"dan","password":"short"}"#)
            #expect(shortPassword.status == 400)
            #expect(shortPassword.reason?.hasPrefix("password") == true)
        }
    }

    /// An instance trusts a verified credential for a few seconds without reading the store: revocation through it is
    /// immediate, through another instance it takes at most that long, and a token's own expiry always holds.
    @Test(arguments: TestStore.all)
    func verifiedCredentialsAreTrustedForTheirLifetimeOnly(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let time = LockedTime(Date(timeIntervalSince1970: 1_800_000_000))
        let logger = Logger(label: "test")
        let instance = AccountService(
            store: world.store, webAuthTokenLifetime: .seconds(60), credentialCacheLifetime: .seconds(5), clock: WallClock { time.now })
        let other = AccountService(store: world.store, clock: WallClock { time.now })
        let container = TestWorld.container

        // Revoked through another instance: still trusted here for the rest of the five seconds, then refused.
        let apiToken = try await other.createAPIToken(container: container, environment: .development, logger: logger)
        _ = try await instance.authenticate(apiToken: apiToken, logger: logger)
        try await other.revokeAPIToken(apiToken, logger: logger)
        _ = try await instance.authenticate(apiToken: apiToken, logger: logger)
        time.advance(by: 5)
        await #expect(throws: CumulusError.self) { try await instance.authenticate(apiToken: apiToken, logger: logger) }

        // Revoked through this instance: refused at once.
        let second = try await other.createAPIToken(container: container, environment: .development, logger: logger)
        _ = try await instance.authenticate(apiToken: second, logger: logger)
        try await instance.revokeAPIToken(second, logger: logger)
        await #expect(throws: CumulusError.self) { try await instance.authenticate(apiToken: second, logger: logger) }

        // Web auth tokens: signing out here is immediate; elsewhere, within the lifetime.
        let token = try await instance.issueWebAuthToken(for: world.alice.account, logger: logger)
        #expect(try await instance.authenticate(webAuthToken: token, container: container, logger: logger) == world.alice.account)
        try await other.signOut(webAuthToken: token, logger: logger)
        #expect(try await instance.authenticate(webAuthToken: token, container: container, logger: logger) == world.alice.account)
        time.advance(by: 5)
        await #expect(throws: CumulusError.self) { try await instance.authenticate(webAuthToken: token, container: container, logger: logger) }
        let again = try await instance.issueWebAuthToken(for: world.alice.account, logger: logger)
        _ = try await instance.authenticate(webAuthToken: again, container: container, logger: logger)
        try await instance.signOut(webAuthToken: again, logger: logger)
        await #expect(throws: CumulusError.self) { try await instance.authenticate(webAuthToken: again, container: container, logger: logger) }

        // A trusted token still expires on time, and still opens only its own container.
        let expiring = try await instance.issueWebAuthToken(for: world.alice.account, logger: logger)
        _ = try await instance.authenticate(webAuthToken: expiring, container: container, logger: logger)
        await #expect(throws: CumulusError.self) {
            try await instance.authenticate(webAuthToken: expiring, container: TestWorld.otherContainer, logger: logger)
        }
        time.advance(by: 58)
        _ = try await instance.authenticate(webAuthToken: expiring, container: container, logger: logger)
        // Trusted until 63 s, but the token itself ends at 60 s.
        time.advance(by: 3)
        await #expect(throws: CumulusError.self) { try await instance.authenticate(webAuthToken: expiring, container: container, logger: logger) }
    }

    // MARK: - Server-to-server keys

    struct Signer {
        let key = P256.Signing.PrivateKey()
        var keyID = ""

        func headers(body: String, subpath: String, date: Date = Date(), hash: String? = nil, raw: Bool = false) throws -> HTTPFields {
            let dateString = ISO8601DateFormatter().string(from: date)
            let bodyHash = hash ?? Data(SHA256.hash(data: Data(body.utf8))).base64EncodedString()
            let signature = try key.signature(for: Data("\(dateString):\(bodyHash):\(subpath)".utf8))
            return [
                .init("X-Apple-CloudKit-Request-KeyID")!: keyID,
                .init("X-Apple-CloudKit-Request-ISO8601Date")!: dateString,
                .init("X-Apple-CloudKit-Request-SignatureV1")!: (raw ? signature.rawRepresentation : signature.derRepresentation)
                    .base64EncodedString(),
            ]
        }
    }

    func signer(_ world: TestWorld, environment: ContainerEnvironment = .development) async throws -> Signer {
        var signer = Signer()
        signer.keyID = try await world.accounts.addServerKey(
            container: TestWorld.container, environment: environment, publicKeyPEM: signer.key.publicKey.pemRepresentation,
            logger: Logger(label: "test")
        )
        return signer
    }

    @Test(arguments: TestStore.all)
    func signedRequestsActOnThePublicDatabase(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let signer = try await signer(world)
        try await world.test { client in
            let path = "/database/1/\(TestWorld.container)/development/public/records/modify"
            let body = #"{"operations":[\#(operation("create", "announcement", fields: #"{"text":{"value":"hello"}}"#))]}"#
            let saved = try await client.raw(path, body: body, headers: try signer.headers(body: body, subpath: path))
            #expect(saved.status == 200)
            #expect(saved.records[0]["created"]?["userRecordName"]?.stringValue == "_serverKey.\(signer.keyID)")

            // Variants real clients use: the query in the subpath, an empty-string hash for GET, a raw signature.
            let listPath = "/database/1/\(TestWorld.container)/development/public/zones/list"
            let withQuery = try await client.raw(listPath + "?x=1", method: .get, headers: try signer.headers(body: "", subpath: listPath + "?x=1"))
            #expect(withQuery.status == 200)
            let emptyHash = try await client.raw(listPath, method: .get, headers: try signer.headers(body: "", subpath: listPath, hash: ""))
            #expect(emptyHash.status == 200)
            let raw = try await client.raw(listPath, method: .get, headers: try signer.headers(body: "", subpath: listPath, raw: true))
            #expect(raw.status == 200)

            // Everyone can read what the key wrote.
            let read = try await client.lookup(["announcement"], zone: nil, as: .anonymous, database: "public")
            #expect(read.records[0]["fields"]?["text"]?["value"] == .string("hello"))
        }
    }

    /// A captured signed request cannot be sent again, in any encoding of its signature; a signature over an empty hash
    /// does not cover a large body unless the unsafe compatibility switch is on.
    @Test(arguments: TestStore.all)
    func signaturesAreUsedOnceAndAlwaysCoverTheBody(_ store: TestStore) async throws {
        var world = try await TestWorld.make(store: store)
        let signer = try await signer(world)
        let path = "/database/1/\(TestWorld.container)/development/public/records/modify"
        let large =
            #"{"operations":[\#(operation("create", "big", fields: #"{"text":{"value":"\#(String(repeating: "x", count: 900_000))"}}"#))],"pad":"\#(String(repeating: " ", count: 200_000))"}"#
        try await world.test { client in
            let listPath = "/database/1/\(TestWorld.container)/development/public/zones/list"
            let headers = try signer.headers(body: "", subpath: listPath)
            #expect(try await client.raw(listPath, method: .get, headers: headers).status == 200)
            let replay = try await client.raw(listPath, method: .get, headers: headers)
            #expect(replay.status == 401)
            #expect(replay.serverErrorCode == "AUTHENTICATION_FAILED")
            #expect(replay.reason?.contains("used before") == true)
            // The same signature in its raw 64-byte form is the same signature.
            let der = try #require(Data(base64Encoded: headers[HTTPField.Name("X-Apple-CloudKit-Request-SignatureV1")!] ?? ""))
            var rawForm = headers
            rawForm[HTTPField.Name("X-Apple-CloudKit-Request-SignatureV1")!] =
                try P256.Signing.ECDSASignature(derRepresentation: der).rawRepresentation.base64EncodedString()
            #expect(try await client.raw(listPath, method: .get, headers: rawForm).status == 401)
            // Signed anew, the same request is served.
            #expect(try await client.raw(listPath, method: .get, headers: try signer.headers(body: "", subpath: listPath)).status == 200)

            #expect(large.utf8.count > 1024 * 1024)
            let unhashed = try await client.raw(path, body: large, headers: try signer.headers(body: large, subpath: path, hash: ""))
            #expect(unhashed.status == 401)
            let hashed = try await client.raw(path, body: large, headers: try signer.headers(body: large, subpath: path))
            #expect(hashed.status == 200)
        }
        world.configuration.acceptsUnhashedLargeServerToServerBodies = true
        try await world.test { client in
            let unhashed = try await client.raw(path, body: large, headers: try signer.headers(body: large, subpath: path, hash: ""))
            #expect(unhashed.status == 200)
            // A small body is always covered.
            let small = #"{"operations":[]}"#
            #expect(try await client.raw(path, body: small, headers: try signer.headers(body: small, subpath: path, hash: "")).status == 401)
        }
    }

    @Test(arguments: TestStore.all)
    func badSignaturesAreRejected(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let signer = try await signer(world)
        let production = try await self.signer(world, environment: .production)
        try await world.test { client in
            let path = "/database/1/\(TestWorld.container)/development/public/zones/list"
            let stale = try await client.raw(
                path, method: .get, headers: try signer.headers(body: "", subpath: path, date: Date().addingTimeInterval(-3600)))
            #expect(stale.status == 401)
            #expect(stale.reason?.contains("window") == true)

            var impostor = Signer()
            impostor.keyID = signer.keyID
            #expect(try await client.raw(path, method: .get, headers: try impostor.headers(body: "", subpath: path)).status == 401)

            let tampered = try await client.raw(path, body: "{}", headers: try signer.headers(body: "{\"x\":1}", subpath: path))
            #expect(tampered.status == 401)

            #expect(try await client.raw(path, method: .get, headers: try production.headers(body: "", subpath: path)).status == 401)

            let privatePath = "/database/1/\(TestWorld.container)/development/private/zones/list"
            let privateDatabase = try await client.raw(privatePath, method: .get, headers: try signer.headers(body: "", subpath: privatePath))
            #expect(privateDatabase.status == 403)
            #expect(privateDatabase.serverErrorCode == "ACCESS_DENIED")
        }
    }

    @Test(arguments: TestStore.all)
    func serverKeysMustBeP256PublicKeys(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        await #expect(throws: CumulusError.self) {
            try await world.accounts.addServerKey(
                container: TestWorld.container, environment: .development, publicKeyPEM: "not a key", logger: Logger(label: "t"))
        }
    }

    /// An unknown name must cost the same key derivation as a wrong password. The decoy is that: a hash `verify` parses
    /// in full, with the hasher's own parameters (a malformed one would return early, and fast), matching nothing.
    @Test func unknownNamesAreCheckedAgainstADecoyOfTheSameCost() throws {
        let hasher = PasswordHasher(rounds: 1 << 10)
        let real = try hasher.hash("correct horse")
        let decoyParts = hasher.decoy.split(separator: "$")
        let realParts = real.split(separator: "$")
        #expect(decoyParts.count == realParts.count && decoyParts.prefix(4) == realParts.prefix(4))
        #expect(Data(base64Encoded: String(decoyParts[4]))?.count == 16 && Data(base64Encoded: String(decoyParts[5]))?.count == 32)
        #expect(!hasher.verify("correct horse", against: hasher.decoy) && !hasher.verify("", against: hasher.decoy))
        #expect(hasher.verify("correct horse", against: real))
    }
}

/// A settable time for an injected clock.
final class LockedTime: Sendable {
    private let storage: Mutex<Date>

    init(_ date: Date) { storage = Mutex(date) }

    var now: Date { storage.withLock { $0 } }

    func advance(by seconds: TimeInterval) { storage.withLock { $0 += seconds } }
}
