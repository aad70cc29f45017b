import CumulusClient
import CumulusModel
import Foundation
import Testing

/// Answers every request with one canned body: the client's reading of `changes/zone` answers, alone.
private struct CannedTransport: Transport {
    let body: String

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        TransportResponse(status: 200, headers: ["content-type": "application/json"], body: Data(body.utf8))
    }
}

@Suite("Client: change feed pages read straight from their bytes", .timeLimit(.minutes(10)))
struct FeedReadingTests {
    private let zone = ZoneID(zoneName: "Drives")

    private func page(_ body: String) async throws(CloudError) -> ZoneChanges {
        let container = CloudContainer(
            serverURL: URL(string: "http://127.0.0.1:1")!, containerIdentifier: "iCloud.test", apiToken: "token", webAuthToken: "web",
            transport: CannedTransport(body: body))
        return try await container.privateCloudDatabase.zoneChanges(zone, since: nil)
    }

    @Test func readsRecordsTombstonesAndTheTokenWhateverTheKeyOrder() async throws {
        let changes = try await page(
            #"""
            {"zones": [{"moreComing": true, "records": [
                {"fields": {"route": {"value": "AAEC/w==", "type": "BYTES"}, "name": {"type": "STRING", "value": "Morning \"commute\""},
                            "at": {"value": 1700000000000, "type": "TIMESTAMP"}, "cleared": {"value": null},
                            "owner": {"value": {"recordName": "u1", "action": "NONE"}, "type": "REFERENCE"},
                            "tags": {"value": ["a", "b"], "type": "STRING_LIST"}},
                 "recordType": "Drive", "recordName": "d1", "recordChangeTag": "t1", "parent": {"recordName": "p"},
                 "created": {"timestamp": 5, "userRecordName": "u1", "deviceID": "phone"}, "pluginFields": {}, "share": null},
                {"recordName": "d2", "deleted": true, "recordType": "Drive"}
            ], "zoneID": {"zoneName": "Drives"}, "syncToken": "token-2", "future": [1, {"x": null}]}], "other": "ignored"}
            """#)
        #expect(changes.syncToken == "token-2")
        #expect(changes.moreComing)
        #expect(changes.deletions.map(\.recordID.recordName) == ["d2"])
        let record = try #require(changes.records.first)
        #expect(changes.records.count == 1)
        #expect(record.recordType == "Drive")
        #expect(record.recordChangeTag == "t1")
        #expect(record.parent == "p")
        #expect(record.share == nil)
        #expect(record.created == RecordStamp(timestamp: 5, userRecordName: "u1", deviceID: "phone"))
        #expect(
            record.fields == [
                "route": .bytes(Data([0, 1, 2, 255])), "name": .string("Morning \"commute\""), "at": .timestamp(1_700_000_000_000),
                "owner": .reference(Reference(recordName: "u1")), "tags": .list(.string, [.string("a"), .string("b")]),
            ])
    }

    /// An expired token is known by its code, whatever the reason's words (a server in another language, or a proxy
    /// that rewrites reasons); a `BAD_REQUEST` without the code stays a bad request.
    @Test func anExpiredTokenIsKnownByItsCodeNotItsWords() async {
        let expired = await #expect(throws: CloudError.self) {
            try await page(
                #"{"zones": [{"zoneID": {"zoneName": "Drives"}, "serverErrorCode": "BAD_REQUEST", "reason": "jeton périmé", "ckErrorCode": "CHANGE_TOKEN_EXPIRED"}]}"#
            )
        }
        #expect(expired?.code == .changeTokenExpired)
        #expect(expired?.isTransient == false)
        let plain = await #expect(throws: CloudError.self) {
            try await page(#"{"zones": [{"zoneID": {"zoneName": "Drives"}, "serverErrorCode": "BAD_REQUEST", "reason": "syncToken: bad"}]}"#)
        }
        #expect(plain?.code == .server(.badRequest))
    }

    /// A record the client cannot read fails the page loudly, naming the field, instead of vanishing from the sync.
    @Test func anUnreadableRecordFailsThePageNamingTheField() async {
        let error = await #expect(throws: CloudError.self) {
            try await page(
                #"{"zones": [{"records": [{"recordName": "d1", "recordType": "Drive", "fields": {"route": {"value": "!!", "type": "BYTES"}}}], "syncToken": "t"}]}"#
            )
        }
        #expect(error?.code == .invalidResponse)
        #expect(error?.reason.contains("record.fields.route.value") == true)
    }

    @Test func aZoneErrorIsTheServersError() async {
        let error = await #expect(throws: CloudError.self) {
            try await page(
                #"{"zones": [{"zoneID": {"zoneName": "Drives"}, "serverErrorCode": "ZONE_NOT_FOUND", "reason": "no zone named Drives"}]}"#)
        }
        #expect(error?.code == .server(.zoneNotFound))
    }

    @Test func truncatedAnswersAreInvalidResponses() async {
        let error = await #expect(throws: CloudError.self) { try await page(#"{"zones": [{"records": [{"recordName": "d1""#) }
        #expect(error?.code == .invalidResponse)
    }
}
