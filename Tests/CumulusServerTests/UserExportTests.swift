import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Logging
import Testing

@testable import CumulusServer

/// `cumulus users export`: everything of one user is in the document, and nothing of another's that they do not share.
@Suite("Export a user", .timeLimit(.minutes(10)))
struct UserExportTests {
    static let photo = (0..<600_001).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }

    @Test(arguments: TestStore.all)
    func everyRecordShareParticipationSubscriptionAndAssetOfTheUserIsInTheExport(_ store: TestStore) async throws {
        let setup = try await AssetTests.AssetWorld(store)
        let world = setup.world
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await AssetTests.$port.withValue(client.client.port) {
                // Alice: a zone with records and a photo, a share of it with Bob, a public record, a subscription.
                try await client.createZone("Z", as: alice)
                // Three chunks of the asset store, the last one's bytes not a multiple of three: base64 written as read.
                let photo = Self.photo
                let uploaded = try await AssetTests.upload(photo, record: "list", as: alice, client: client)
                let singleFile = try #require(uploaded.singleFile)
                let saved = try await client.modify(
                    [
                        operation("create", "list", fields: AssetTests.assetField(singleFile)),
                        operation("create", "item", extra: #","parent":{"recordName":"list"}"#),
                    ], zone: "Z", as: .user(alice))
                #expect(saved.records.allSatisfy { $0["serverErrorCode"] == nil }, "\(saved.json)")
                let share = try await client.modify([shareOperation(participants: [("bob@example.com", "READ_ONLY")])], zone: "Z", as: .user(alice))
                #expect(share.records.first?["serverErrorCode"] == nil, "\(share.json)")
                let publicSaved = try await client.send(
                    "records/modify", as: .user(alice), database: "public",
                    body: #"{"operations":[\#(operation("create", "alice-post"))]}"#)
                #expect(publicSaved.status == 200, "\(publicSaved.json)")
                let subscribed = try await client.send(
                    "subscriptions/modify", as: .user(alice),
                    body:
                        #"{"operations":[{"operationType":"create","subscription":{"subscriptionID":"lists","subscriptionType":"zone","zoneID":{"zoneName":"Z"}}}]}"#
                )
                #expect(subscribed.status == 200, "\(subscribed.json)")
                // From her phone: a record changed and one deleted, whose past versions the server keeps.
                let phone: HTTPFields = [HTTPField.Name("X-Cumulus-Device")!: "alices-phone"]
                _ = try await client.send(
                    "records/modify", as: .user(alice),
                    body: #"{"zoneID":{"zoneName":"Z"},"operations":[\#(operation("create", "gone", fields: #"{"text":{"value":"GoneMark"}}"#))]}"#,
                    headers: phone)
                let edited = try await client.send(
                    "records/modify", as: .user(alice),
                    body:
                        #"{"zoneID":{"zoneName":"Z"},"operations":[\#(operation("forceUpdate", "item", fields: #"{"text":{"value":"NewMark"}}"#)),\#(operation("forceDelete", "gone"))]}"#,
                    headers: phone)
                #expect(edited.records.allSatisfy { $0["serverErrorCode"] == nil }, "\(edited.json)")
                // Bob: his own zone shared with Alice, who accepts; and a record of his own she never sees.
                try await client.createZone("Bobs", as: bob)
                _ = try await client.modify([operation("create", "bobs-list"), operation("create", "bobs-diary")], zone: "Bobs", as: .user(bob))
                let bobsShare = try await client.modify(
                    [shareOperation(name: "bobs-share", root: "bobs-list", participants: [("alice@example.com", "READ_WRITE")])], zone: "Bobs",
                    as: .user(bob))
                let guid = try #require(bobsShare.records.first?["shortGUID"]?.stringValue, "\(bobsShare.json)")
                _ = try await client.resolve(guid, as: .user(alice), accept: true)
            }
        }
        let account = try #require(try await world.store.user(userRecordName: alice.userRecordName, logger: Logger(label: "test")))
        let bytes = try await UserExport(store: world.store, assets: setup.storage).document(for: account, at: 42, logger: Logger(label: "test"))
        let document = try JSONValue(parsing: bytes)
        #expect(document["format"]?.stringValue == UserExport.format && document["version"] == .number("2"))
        #expect(document["user"]?["userRecordName"]?.stringValue == alice.userRecordName)
        let development = try #require(document["environments"]?.arrayValue?.first { $0["environment"]?.stringValue == "development" })
        let zone = try #require(development["zones"]?.arrayValue?.first { $0["zoneName"]?.stringValue == "Z" })
        let names = Set(zone["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? [])
        #expect(names == ["list", "item", "share-1"], "\(names)")
        // The versions kept for restores: the item before its change, and the deleted record as it was, marked so.
        let history = zone["history"]?.arrayValue ?? []
        let pastItem = try #require(history.first { $0["record"]?["recordName"]?.stringValue == "item" }, "\(history)")
        #expect(pastItem["deleted"] == .bool(false) && { if case .number? = pastItem["replacedAt"] { true } else { false } }())
        let pastGone = try #require(history.first { $0["record"]?["recordName"]?.stringValue == "gone" }, "\(history)")
        #expect(pastGone["deleted"] == .bool(true) && pastGone["record"]?["fields"]?["text"]?["value"]?.stringValue == "GoneMark")
        #expect(development["devices"]?.arrayValue?.contains { $0["deviceID"]?.stringValue == "alices-phone" } == true, "\(development)")
        #expect(development["publicRecords"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["alice-post"])
        let owned = try #require(development["sharesOwned"]?.arrayValue?.first)
        #expect(owned["shareRecordName"]?.stringValue == "share-1" && owned["rootRecordName"]?.stringValue == "list")
        #expect(owned["participants"]?.arrayValue?.contains { $0["userRecordName"]?.stringValue == bob.userRecordName } == true)
        let participation = try #require(development["participations"]?.arrayValue?.first)
        #expect(participation["ownerRecordName"]?.stringValue == bob.userRecordName && participation["shareRecordName"]?.stringValue == "bobs-share")
        #expect(participation["status"]?.stringValue == "ACCEPTED" && participation["permission"]?.stringValue == "READ_WRITE")
        #expect(development["subscriptions"]?.arrayValue?.first?["subscription"]?["subscriptionID"]?.stringValue == "lists")
        let asset = try #require(document["assets"]?.arrayValue?.first)
        #expect(Data(base64Encoded: asset["bytes"]?.stringValue ?? "").map(Array.init) == Self.photo)
        #expect(asset["record"]?.stringValue == "development/private/Z/list/photo")
        // Bob's records are his: Alice's export names the share she takes part in, and holds none of his records.
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(!text.contains("bobs-diary") && !text.contains(#""recordName":"bobs-list""#))
        #expect(participation["rootRecordName"]?.stringValue == "bobs-list")
    }

    /// A signed-in user asks for their own export through the API: once every ten minutes, their data only, no bytes.
    @Test func aUserExportsTheirOwnDataThroughTheAPIOnceInAWhile() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            try await client.createZone("Mine", as: world.alice)
            _ = try await client.modify([operation("create", "alices-note")], zone: "Mine", as: .user(world.alice))
            let mine = try await client.send("users/export", as: .user(world.alice), method: .get)
            #expect(mine.status == 200, "\(mine.json)")
            #expect(mine.json["format"]?.stringValue == UserExport.format)
            #expect(mine.json["user"]?["userRecordName"]?.stringValue == world.alice.userRecordName)
            let records = mine.json["environments"]?[0]?["zones"]?.arrayValue?.flatMap { $0["records"]?.arrayValue ?? [] } ?? []
            #expect(records.contains { $0["recordName"]?.stringValue == "alices-note" })
            let again = try await client.send("users/export", as: .user(world.alice), method: .post, body: "{}")
            #expect(again.status == 429 && again.json["serverErrorCode"]?.stringValue == "THROTTLED", "\(again.json)")
            guard case .number(let wait)? = again.json["retryAfter"] else {
                Issue.record("no retryAfter: \(again.json)")
                return
            }
            #expect((Int(wait) ?? 0) > 500, "the next export in about ten minutes")
            let bobs = try await client.send("users/export", as: .user(world.bob), method: .get)
            #expect(bobs.status == 200 && !String(decoding: bobs.json.jsonBytes, as: UTF8.self).contains("alices-note"))
            let nobody = try await client.send("users/export", as: .anonymous, method: .get)
            #expect(nobody.status == 401 || nobody.status == 421, "\(nobody.status)")
        }
    }

    /// An export is handed over in pieces as it is read, a page of records at a time: no piece holds much more than
    /// ``UserExport/pieceSize``, and together they are the whole document.
    @Test(arguments: TestStore.all)
    func anExportIsWrittenInPiecesThatMakeTheWholeDocument(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let route = String(repeating: "r", count: 1_000)
        try await world.test { client in
            try await client.createZone("Drives", as: world.alice)
            for batch in 0..<5 {
                let operations = (0..<200).map { operation("create", "drive-\(batch)-\($0)", fields: #"{"route":{"value":"\#(route)"}}"#) }
                #expect(try await client.modify(operations, zone: "Drives", as: .user(world.alice)).status == 200)
            }
        }
        let logger = Logger(label: "test")
        let account = try #require(try await world.store.user(userRecordName: world.alice.userRecordName, logger: logger))
        let export = UserExport(store: world.store, assets: nil)
        var pieces: [[UInt8]] = []
        try await export.write(for: account, at: 42, logger: logger) { pieces.append($0) }
        #expect(pieces.count >= 4, "1,000 records of 1 KB: \(pieces.count) pieces")
        #expect(pieces.map(\.count).max() ?? 0 < UserExport.pieceSize + 100_000, "\(pieces.map(\.count))")
        let whole = try await export.document(for: account, at: 42, logger: logger)
        #expect(Array(pieces.joined()) == whole)
        let zones = try JSONValue(parsing: whole)["environments"]?[0]?["zones"]?.arrayValue ?? []
        #expect(zones.first { $0["zoneName"]?.stringValue == "Drives" }?["records"]?.arrayValue?.count == 1_000)
    }

    /// At most two exports run at once on an instance, whoever asks; a third is told to retry (its user's interval is
    /// not spent), and a place comes back when an export's body is written or dropped.
    @Test func anInstanceRunsAFewExportsAtOnce() throws {
        let throttle = ExportThrottle(interval: 600_000, maximumRunning: 2)
        var first: ExportThrottle.Place? = try throttle.admit("_alice", now: 0)
        let second = try throttle.admit("_bob", now: 0)
        do {
            _ = try throttle.admit("_carol", now: 0)
            Issue.record("a third export ran at once")
        } catch {
            #expect(error.code == .unavailable && error.retryAfter == 30)
        }
        first = nil
        #expect(first == nil)
        let carol = try throttle.admit("_carol", now: 1)
        withExtendedLifetime((second, carol)) {}
    }
}
