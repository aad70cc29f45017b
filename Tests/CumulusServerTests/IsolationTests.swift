import Crypto
import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Logging
import Testing

/// A user's private database is theirs alone: no other user, anonymous caller, or token of another container or
/// environment can read or write it, or learn whether a record exists in it.
@Suite("Private database isolation", .timeLimit(.minutes(10)))
struct IsolationTests {
    enum Intruder: String, CaseIterable, Sendable {
        case otherUser, anonymous, otherContainerToken, productionToken, productionTokenWithUser, serverKey
    }

    /// Outcome of each intruder's attempt: the HTTP status, or 200 with per-item errors in the intruder's own database.
    static func expectedStatus(_ intruder: Intruder) -> Int {
        switch intruder {
        case .otherUser, .productionTokenWithUser: 404  // their own database has no zone "Secret"
        case .anonymous: 421
        case .otherContainerToken, .productionToken: 401
        case .serverKey: 403
        }
    }

    @Test(arguments: Intruder.allCases, TestStore.all)
    func intrudersCanNeitherReadNorWrite(_ intruder: Intruder, _ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        var signer = AuthenticationTests.Signer()
        signer.keyID = try await world.accounts.addServerKey(
            container: TestWorld.container, environment: .development, publicKeyPEM: signer.key.publicKey.pemRepresentation,
            logger: Logger(label: "t")
        )
        let keyedSigner = signer
        try await world.test { client in
            try await client.createZone("Secret", as: world.alice)
            let saved = try await client.modify(
                [operation("create", "diary", fields: #"{"text":{"value":"s3cr3t-diary"}}"#)], zone: "Secret", as: .user(world.alice))
            let tag = try #require(saved.records[0]["recordChangeTag"]?.stringValue)
            _ = try await client.modify(
                [operation("create", "inbox", fields: #"{"text":{"value":"default zone"}}"#)], zone: nil, as: .user(world.alice))

            func attempt(_ operation: String, _ body: String) async throws -> CloudKitResponse {
                switch intruder {
                case .otherUser: return try await client.send(operation, as: .user(world.bob), body: body)
                case .anonymous: return try await client.send(operation, as: .anonymous, body: body)
                case .otherContainerToken: return try await client.send(operation, as: .apiToken(world.otherContainerToken), body: body)
                case .productionToken: return try await client.send(operation, as: .apiToken(world.productionToken), body: body)
                case .productionTokenWithUser:
                    return try await client.send(
                        operation, as: .apiTokenAndUser(world.productionToken, world.alice), environment: "production", body: body)
                case .serverKey:
                    let path = "/database/1/\(TestWorld.container)/development/private/\(operation)"
                    return try await client.raw(path, body: body, headers: try keyedSigner.headers(body: body, subpath: path))
                }
            }
            let secret = #""zoneID":{"zoneName":"Secret","ownerRecordName":"\#(world.alice.userRecordName)"}"#
            let attempts = [
                ("records/lookup", #"{\#(secret),"records":[{"recordName":"diary"}]}"#),
                (
                    "records/modify",
                    #"{\#(secret),"operations":[\#(operation("update", "diary", tag: tag, fields: #"{"text":{"value":"hacked"}}"#))]}"#
                ),
                ("records/modify", #"{\#(secret),"operations":[\#(operation("forceDelete", "diary"))]}"#),
                ("zones/lookup", #"{"zones":[{"zoneName":"Secret","ownerRecordName":"\#(world.alice.userRecordName)"}]}"#),
                ("zones/modify", #"{"operations":[{"operationType":"delete","zone":{"zoneID":{"zoneName":"Secret"}}}]}"#),
            ]
            for (operation, body) in attempts {
                let response = try await attempt(operation, body)
                let expected = Self.expectedStatus(intruder)
                if operation.hasPrefix("zones/"), expected == 404 {
                    // Zone operations answer per item: the zone does not exist in the intruder's database.
                    #expect(response.status == 200, "\(intruder) \(operation)")
                    #expect(response.zones.first?["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND", "\(intruder) \(operation)")
                } else {
                    #expect(response.status == expected, "\(intruder) \(operation): \(response.json)")
                }
                #expect(!"\(response.json)".contains("s3cr3t"), "\(intruder) \(operation) leaked data")
            }

            // The default zone exists everywhere, so a lookup there succeeds but finds only the intruder's own records.
            if intruder == .otherUser {
                let lookup = try await client.lookup(["inbox", "no-such-record"], zone: nil, as: .user(world.bob))
                #expect(lookup.records.map { $0["serverErrorCode"]?.stringValue } == ["NOT_FOUND", "NOT_FOUND"])
                // An existing and a missing record look the same to an intruder.
                var existing = lookup.records[0].objectValue!
                var missing = lookup.records[1].objectValue!
                for key in ["uuid", "recordName", "reason"] {
                    existing[key] = nil
                    missing[key] = nil
                }
                #expect(existing == missing)
                #expect(lookup.records[0]["reason"]?.stringValue == "record inbox does not exist")
            }

            // Alice's data is untouched.
            let after = try await client.lookup(["diary"], zone: "Secret", as: .user(world.alice))
            #expect(after.records[0]["fields"]?["text"]?["value"] == .string("s3cr3t-diary"))
            #expect(after.records[0]["recordChangeTag"]?.stringValue == tag)
        }
    }
}
