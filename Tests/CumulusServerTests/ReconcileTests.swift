import CumulusModel
import Foundation
import Testing

/// `records/reconcile` and the zone digest over HTTP: what the feed hands each caller, what the comparison answers, what
/// it refuses, and what a caller without access learns from it (nothing).
@Suite("Zone digests and records/reconcile over HTTP", .timeLimit(.minutes(10)))
struct ReconcileTests {
    /// The digest of records as a device computes it from the feed's names and tags.
    static func digest(_ records: [JSONValue]) -> ZoneDigest {
        ZoneDigest(
            records: records.compactMap { record in
                guard record["deleted"] != .bool(true), let name = record["recordName"]?.stringValue,
                    let tag = record["recordChangeTag"]?.stringValue
                else { return nil }
                return (recordName: name, changeTag: tag)
            })
    }

    static func digest(of zone: JSONValue?) -> ZoneDigest? {
        guard let object = zone?["zoneDigest"], let fingerprint = object["fingerprint"]?.stringValue,
            case .number(let count)? = object["recordCount"]
        else { return nil }
        return ZoneDigest(fingerprint: fingerprint, recordCount: Int64(count) ?? -1)
    }

    @Test(arguments: TestStore.all)
    func theFeedEndsWithTheDigestOfWhatEachCallerSees(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let (alice, bob) = (world.alice, world.bob)
        try await world.test { client in
            try await client.createZone("Lists", as: alice)
            _ = try await client.modify(
                [
                    operation("create", "list", type: "List"), operation("create", "milk", type: "Item", extra: #","parent":{"recordName":"list"}"#),
                    operation("create", "diary", type: "Note"),
                ], zone: "Lists", as: .user(alice))
            _ = try await client.modify([shareOperation(participants: [("bob@example.com", "READ_ONLY")])], zone: "Lists", as: .user(alice))
            let guid = try #require(try await client.lookup(["share-1"], zone: "Lists", as: .user(alice)).records.first?["shortGUID"]?.stringValue)
            _ = try await client.resolve(guid, as: .user(bob), accept: true)

            // Paged: only the last page carries the digest, and it is the digest of every record delivered.
            var all: [JSONValue] = []
            var token: String?
            var last: JSONValue?
            repeat {
                let tokenPart = token.map { #","syncToken":"\#($0)""# } ?? ""
                let page = try await client.send(
                    "changes/zone", as: .user(alice), body: #"{"zones":[{"zoneID":{"zoneName":"Lists"},"resultsLimit":2\#(tokenPart)}]}"#)
                let zone = try #require(page.zones.first)
                all += zone["records"]?.arrayValue ?? []
                token = zone["syncToken"]?.stringValue
                last = zone
                if zone["moreComing"] == .bool(true) { #expect(zone["zoneDigest"] == nil) }
            } while last?["moreComing"] == .bool(true)
            var held: [String: JSONValue] = [:]
            ChangeFeedTests.apply(all, to: &held)
            #expect(Self.digest(of: last) == Self.digest(Array(held.values)))
            #expect(Self.digest(of: last)?.recordCount == 4, "list, milk, diary and the share")

            // Bob sees the shared hierarchy and its share, and is handed their digest, not the zone's.
            let bobs = try await client.sharedChanges(zone: "Lists", owner: alice, as: bob)
            let bobZone = try #require(bobs.zones.first)
            let bobRecords = bobZone["records"]?.arrayValue ?? []
            #expect(Set(bobRecords.compactMap { $0["recordName"]?.stringValue }) == ["list", "milk", "share-1"])
            #expect(Self.digest(of: bobZone) == Self.digest(bobRecords))

            // The older records/changes carries it too; a page filtered by type does not.
            let legacy = try await client.send("records/changes", as: .user(alice), body: #"{"zoneID":{"zoneName":"Lists"}}"#)
            #expect(Self.digest(of: legacy.json) == Self.digest(of: last))
            let filtered = try await client.send(
                "changes/zone", as: .user(alice), body: #"{"zones":[{"zoneID":{"zoneName":"Lists"},"desiredRecordTypes":["Item"]}]}"#)
            #expect(filtered.zones.first?["zoneDigest"] == nil)

            // Reconciling: Bob's copy lacks milk; he is told so, and never learns of the diary.
            let bobHeld = bobRecords.filter { $0["recordName"]?.stringValue != "milk" }
            let request = RecordsReconcileRequest(
                zoneID: ZoneID(zoneName: "Lists", ownerRecordName: alice.userRecordName),
                ranges: [RangeDigest(range: .all, digest: Self.digest(bobHeld))])
            let answer = try await client.shared(
                "records/reconcile", as: bob, body: String(decoding: request.wireBytes, as: UTF8.self))
            #expect(answer.status == 200, "\(answer.json)")
            let reconciled = try RecordsReconcileResponse(wire: WireObject(answer.json, path: ""))
            guard case .list(_, let records) = reconciled.ranges.first else {
                Issue.record("expected a list, got \(reconciled)")
                return
            }
            #expect(Set(records.map(\.recordName)) == ["list", "milk", "share-1"])
        }
    }

    @Test func reconcileRefusesWhatItCannotReadAndStrangersLearnNothing() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            try await client.createZone("Lists", as: world.alice)
            let valid = #"{"fingerprint":"\#(String(repeating: "0", count: 64))","recordCount":0}"#
            func reconcile(_ body: String, as identity: Identity = .user(world.alice)) async throws -> CloudKitResponse {
                try await client.send("records/reconcile", as: identity, body: body)
            }
            let cases: [(String, String)] = [
                (#"{"ranges":[\#(valid)]}"#, "zoneID"),
                (#"{"zoneID":{"zoneName":"Lists"}}"#, "ranges"),
                (#"{"zoneID":{"zoneName":"Lists"},"ranges":[]}"#, "ranges"),
                (#"{"zoneID":{"zoneName":"Lists"},"ranges":[{"fingerprint":"00","recordCount":0}]}"#, "ranges[0].fingerprint"),
                (
                    #"{"zoneID":{"zoneName":"Lists"},"ranges":[{"lowerBound":"m","upperBound":"a","fingerprint":"\#(String(repeating: "0", count: 64))","recordCount":0}]}"#,
                    "ranges[0].upperBound"
                ),
                (
                    #"{"zoneID":{"zoneName":"Lists"},"ranges":[{"upperBound":"m",\#(valid.dropFirst().dropLast())},{"lowerBound":"k",\#(valid.dropFirst().dropLast())}]}"#,
                    "ranges[1]"
                ),
                (
                    #"{"zoneID":{"zoneName":"Lists"},"ranges":[\#(Array(repeating: valid, count: 65).joined(separator: ","))]}"#,
                    "ranges"
                ),
            ]
            for (body, field) in cases {
                let answer = try await reconcile(body)
                #expect(answer.status == 400, "\(body)")
                #expect(answer.json["serverErrorCode"]?.stringValue == "BAD_REQUEST")
                #expect(answer.reason?.contains(field) == true, "\(answer.reason ?? "") should name \(field)")
            }
            // Another user has no such zone; a stranger without a user is refused before anything is read.
            let bobs = try await reconcile(#"{"zoneID":{"zoneName":"Lists"},"ranges":[\#(valid)]}"#, as: .user(world.bob))
            #expect(bobs.status == 404 && bobs.json["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND")
            let stranger = try await reconcile(#"{"zoneID":{"zoneName":"Lists"},"ranges":[\#(valid)]}"#, as: .none)
            #expect(stranger.status == 401 || stranger.status == 403)
            // The public database has no change feeds to verify: refused, to a user and to an anonymous caller alike.
            for identity in [Identity.user(world.alice), .anonymous] {
                let publicAnswer = try await client.send(
                    "records/reconcile", as: identity, database: "public", body: #"{"zoneID":{"zoneName":"_defaultZone"},"ranges":[\#(valid)]}"#)
                #expect(publicAnswer.status == 400 && publicAnswer.json["serverErrorCode"]?.stringValue == "BAD_REQUEST")
                #expect(publicAnswer.reason?.contains("public database") == true, "\(publicAnswer.reason ?? "")")
            }
        }
    }
}
