import CumulusCore
import CumulusModel
import Foundation
import Logging
import Testing

/// Every role against every operation, on shared and unshared records: who may do what, and that nothing leaks.
@Suite("Live sharing: authorization matrix", .timeLimit(.minutes(10)))
struct SharingAuthorizationTests {
    enum Role: String, CaseIterable, Sendable {
        case owner, readWrite, readOnly, pendingInvitee, removedParticipant, unrelatedUser, anonymous
    }

    enum Operation: String, CaseIterable, Sendable {
        // `accept` comes last: it changes the standing of a pending invitee.
        case lookupShared, lookupUnshared, query, modifyShared, modifyUnshared, createChild, deleteRoot, zoneFeed, databaseFeed
        case resolve, manageParticipants, accept
    }

    /// The expected outcome: "ok", a serverErrorCode, or "hidden" (the answer shows nothing of the data).
    static func expected(_ role: Role, _ operation: Operation) -> String {
        switch role {
        case .owner:
            return "ok"
        case .anonymous:
            return "AUTHENTICATION_REQUIRED"
        case .readWrite:
            switch operation {
            case .lookupUnshared, .modifyUnshared: return "NOT_FOUND"
            case .deleteRoot, .manageParticipants: return "ACCESS_DENIED"
            default: return "ok"
            }
        case .readOnly:
            switch operation {
            case .lookupUnshared, .modifyUnshared: return "NOT_FOUND"
            case .modifyShared, .createChild, .deleteRoot, .manageParticipants: return "ACCESS_DENIED"
            default: return "ok"
            }
        case .pendingInvitee:
            switch operation {
            case .resolve, .accept: return "ok"
            case .databaseFeed: return "hidden"
            default: return "ZONE_NOT_FOUND"
            }
        case .removedParticipant:
            switch operation {
            case .resolve, .accept: return "ACCESS_DENIED"
            case .databaseFeed: return "deletedZone"
            default: return "ZONE_NOT_FOUND"
            }
        case .unrelatedUser:
            switch operation {
            case .resolve, .accept: return "ACCESS_DENIED"
            case .databaseFeed: return "hidden"
            default: return "ZONE_NOT_FOUND"
            }
        }
    }

    @Test(arguments: TestStore.allAndSharded, Role.allCases)
    func roleAgainstEveryOperation(_ store: TestStore, _ role: Role) async throws {
        let world = try await TestWorld.make(store: store)
        let logger = Logger(label: "test")
        func user(_ name: String) async throws -> TestUser {
            let account = try await world.accounts.createUser(
                container: TestWorld.container, name: name, password: nil, email: "\(name)@example.com", logger: logger)
            return TestUser(account: account, webAuthToken: try await world.accounts.issueWebAuthToken(for: account, logger: logger))
        }
        let alice = world.alice
        let (readWrite, readOnly, pending, removed, unrelated) = (
            world.bob, try await user("carol"), try await user("dave"), try await user("erin"), try await user("frank")
        )

        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify(
                [
                    operation("create", "list", type: "List"),
                    operation("create", "item", type: "Item", extra: #","parent":{"recordName":"list"}"#),
                    operation("create", "secret", type: "Item", fields: #"{"text":{"value":"t0p-s3cret"}}"#),
                ],
                zone: "Lists", as: .user(alice)
            )
            let created = try await client.modify(
                [
                    shareOperation(participants: [
                        ("bob@example.com", "READ_WRITE"), ("carol@example.com", "READ_ONLY"), ("dave@example.com", "READ_WRITE"),
                        ("erin@example.com", "READ_WRITE"),
                    ])
                ],
                zone: "Lists", as: .user(alice)
            )
            let guid = try #require(created.records.first?["shortGUID"]?.stringValue, "\(created.json)")
            for participant in [readWrite, readOnly, removed] { _ = try await client.resolve(guid, as: .user(participant), accept: true) }
            // Erin accepted, then the owner removed her (by saving the share without her).
            let shareTag = try #require(
                (try await client.lookup(["share-1"], zone: "Lists", as: .user(alice))).records[0]["recordChangeTag"]?.stringValue)
            let update = try await client.modify(
                [
                    shareOperation(
                        "update", tag: shareTag,
                        participants: [("bob@example.com", "READ_WRITE"), ("carol@example.com", "READ_ONLY"), ("dave@example.com", "READ_WRITE")])
                ],
                zone: "Lists", as: .user(alice)
            )
            #expect(update.records[0]["serverErrorCode"] == nil, "\(update.json)")

            let actor: TestUser? =
                switch role {
                case .owner: alice
                case .readWrite: readWrite
                case .readOnly: readOnly
                case .pendingInvitee: pending
                case .removedParticipant: removed
                case .unrelatedUser: unrelated
                case .anonymous: nil
                }
            let identity: Identity = actor.map { .user($0) } ?? .anonymous
            let database = role == .owner ? "private" : "shared"
            let zone = role == .owner ? #""zoneID":{"zoneName":"Lists"}"# : client.ownerZone("Lists", owner: alice)

            func send(_ operation: String, _ body: String) async throws -> CloudKitResponse {
                try await client.send(operation, as: identity, database: database, body: body)
            }
            func currentTag(_ name: String) async throws -> String {
                let response = try await client.lookup([name], zone: "Lists", as: .user(alice))
                guard let tag = response.records.first?["recordChangeTag"]?.stringValue else { throw URLError(.cannotParseResponse) }
                return tag
            }

            for operationKind in Operation.allCases {
                let response: CloudKitResponse
                switch operationKind {
                case .lookupShared:
                    response = try await send("records/lookup", #"{\#(zone),"records":[{"recordName":"item"}]}"#)
                case .lookupUnshared:
                    response = try await send("records/lookup", #"{\#(zone),"records":[{"recordName":"secret"}]}"#)
                case .query:
                    response = try await send("records/query", #"{\#(zone),"query":{"recordType":"Item"}}"#)
                case .modifyShared:
                    let tag = try await currentTag("item")
                    response = try await send(
                        "records/modify",
                        #"{\#(zone),"operations":[\#(operation("update", "item", type: "Item", tag: tag, fields: #"{"n":{"value":1}}"#))]}"#)
                case .modifyUnshared:
                    let tag = try await currentTag("secret")
                    response = try await send(
                        "records/modify",
                        #"{\#(zone),"operations":[\#(operation("update", "secret", type: "Item", tag: tag, fields: #"{"text":{"value":"x"}}"#))]}"#)
                case .createChild:
                    response = try await send(
                        "records/modify",
                        #"{\#(zone),"operations":[\#(operation("create", "child-\(role.rawValue)", type: "Item", extra: #","parent":{"recordName":"list"}"#))]}"#
                    )
                case .deleteRoot:
                    // Run last among writes for the owner; everyone else must fail.
                    if role == .owner { continue }
                    response = try await send("records/modify", #"{\#(zone),"operations":[\#(operation("forceDelete", "list"))]}"#)
                case .zoneFeed:
                    response = try await send("changes/zone", #"{"zones":[{\#(zone)}]}"#)
                case .databaseFeed:
                    response = try await send("changes/database", "{}")
                case .resolve:
                    response = try await client.resolve(guid, as: identity)
                case .accept:
                    response = try await client.resolve(guid, as: identity, accept: true)
                case .manageParticipants:
                    let tag = try await currentTag("share-1")
                    response = try await send(
                        "records/modify",
                        #"{\#(zone),"operations":[\#(shareOperation("update", tag: tag, participants: [("frank@example.com", "READ_WRITE")]))]}"#
                    )
                }
                let expectation = Self.expected(role, operationKind)
                let code = Self.outcome(response, operationKind)
                if expectation == "hidden" {
                    #expect(response.status == 200 && response.zones.isEmpty, "\(role) \(operationKind): \(response.json)")
                } else if expectation == "deletedZone" {
                    // A participant who was removed learns only that the zone went away.
                    #expect(response.zones.count == 1 && response.zones[0]["deleted"] == .bool(true), "\(role) \(operationKind): \(response.json)")
                } else {
                    #expect(code == expectation, "\(role) \(operationKind): \(response.json)")
                }
                if role != .owner {
                    #expect(!"\(response.json)".contains("t0p-s3cret"), "\(role) \(operationKind) leaked the unshared record")
                    if operationKind == .query || operationKind == .zoneFeed {
                        #expect(!"\(response.json)".contains("\"secret\""), "\(role) \(operationKind) revealed the unshared record's name")
                    }
                }
            }
            // The unshared record is untouched by anyone but its owner.
            let secret = try await client.lookup(["secret"], zone: "Lists", as: .user(alice))
            #expect(secret.records[0]["fields"]?["text"]?["value"] == .string(role == .owner ? "x" : "t0p-s3cret"))
        }
    }

    /// The code an answer carries: top-level, per item, or per zone; "ok" when none.
    static func outcome(_ response: CloudKitResponse, _ operation: Operation) -> String {
        if let code = response.serverErrorCode { return code }
        let items = Array(response.records) + Array(response.zones) + (response.json["results"]?.arrayValue ?? [])
        if let code = items.compactMap({ $0["serverErrorCode"]?.stringValue }).first { return code }
        return "ok"
    }
}
