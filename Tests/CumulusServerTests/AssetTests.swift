import AsyncHTTPClient
import Crypto
import CumulusCore
import CumulusModel
import CumulusStore
import CumulusStorePostgres
import Foundation
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import Testing

@testable import CumulusServer

/// Assets through real HTTP, as a CloudKit Web Services client sends them: ask for an upload URL, POST the bytes,
/// save the answered dictionary in a record, fetch the record, download from its `downloadURL`.
@Suite("Assets", .timeLimit(.minutes(10)))
struct AssetTests {
    let logger = Logger(label: "test")

    /// A world whose clock the test moves, with the store's own asset storage: files for SQLite, chunks in PostgreSQL.
    struct AssetWorld {
        var world: TestWorld
        let time: LockedTime
        let storage: any AssetStorage
        /// How many asset files the storage holds.
        let fileCount: @Sendable () async throws -> Int

        init(_ store: TestStore, maximumSize: Int64 = 250 * 1024 * 1024) async throws {
            let time = LockedTime(Date())
            var world = try await TestWorld.make(store: store, clock: WallClock { time.now })
            if let postgres = world.store as? PostgresRecordStore {
                let client = postgres.client
                storage = PostgresAssetStorage(client: client)
                fileCount = {
                    var count = 0
                    for try await value in try await client.query("SELECT count(*) FROM asset_files", logger: Logger(label: "test")).decode(Int.self)
                    {
                        count = value
                    }
                    return count
                }
            } else {
                let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-asset-test-\(UUID().uuidString)")
                storage = try FileAssetStorage(directory: directory)
                fileCount = {
                    let enumerator = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)
                    return (enumerator?.allObjects as? [URL] ?? []).filter { !$0.hasDirectoryPath && $0.pathExtension.isEmpty }.count
                }
            }
            world.configuration.assetStorage = storage
            world.configuration.assetLimits.maximumSize = maximumSize
            self.world = world
            self.time = time
        }
    }

    static let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))

    /// The port of the server under test: the URLs it answers name the `Host` the test client sent, without a port.
    @TaskLocal static var port: Int?

    static func local(_ url: String) -> String {
        guard let port, let path = url.range(of: "/assets/1/") else { return url }
        return "http://127.0.0.1:\(port)" + url[path.lowerBound...]
    }

    static func request(_ url: String, method: HTTPMethod = .GET, body: [UInt8]? = nil, headers: [(String, String)] = []) async throws
        -> (status: Int, headers: HTTPHeaders, body: [UInt8])
    {
        var request = HTTPClientRequest(url: local(url))
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await client.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return (Int(response.status.code), response.headers, Array(bytes.readableBytesView))
    }

    /// Asks for an upload URL and uploads the bytes; answers the `singleFile` dictionary, as JSON text.
    static func upload(
        _ bytes: [UInt8], record: String, field: String = "photo", zone: String = "Z", as user: TestUser, client: CloudKitTestClient,
        database: String = "private", zoneID: String? = nil
    ) async throws -> (status: Int, singleFile: JSONValue?, reason: String?) {
        let zoneJSON = zoneID ?? #"{"zoneName":"\#(zone)"}"#
        let tokens = try await client.send(
            "assets/upload", as: .user(user), database: database,
            body: #"{"zoneID":\#(zoneJSON),"tokens":[{"recordName":"\#(record)","recordType":"Note","fieldName":"\#(field)"}]}"#)
        guard let url = tokens.json["tokens"]?[0]?["url"]?.stringValue else { return (tokens.status, nil, tokens.json["reason"]?.stringValue) }
        let answer = try await request(url, method: .POST, body: bytes)
        let json = try? JSONValue(parsing: answer.body)
        return (answer.status, json?["singleFile"], json?["reason"]?.stringValue)
    }

    static func assetField(_ singleFile: JSONValue) -> String {
        #"{"photo":{"type":"ASSETID","value":\#(String(decoding: singleFile.jsonBytes, as: UTF8.self))}}"#
    }

    /// Records answered whole outside a lookup carry their assets' download URLs as a lookup does: the server's record
    /// of a `CONFLICT` (a client merges from it) and the root record of a resolved share link (an invitee previews it).
    @Test(arguments: TestStore.all)
    func conflictsAndResolvedSharesCarryDownloadURLs(_ store: TestStore) async throws {
        let setup = try await AssetWorld(store)
        let world = setup.world
        try await world.test { client in
            try await Self.$port.withValue(client.client.port) {
                try await client.createZone("Z", as: world.alice)
                let bytes = Array("the album's cover".utf8)
                let uploaded = try await Self.upload(bytes, record: "list", as: world.alice, client: client)
                let singleFile = try #require(uploaded.singleFile)
                let saved = try await client.modify(
                    [operation("create", "list", fields: Self.assetField(singleFile))], zone: "Z", as: .user(world.alice))
                #expect(saved.records.first?["serverErrorCode"] == nil, "\(saved.json)")
                func expectDownload(_ record: JSONValue?, _ answer: CloudKitResponse) async throws {
                    let url = try #require(record?["fields"]?["photo"]?["value"]?["downloadURL"]?.stringValue, "\(answer.json)")
                    let download = try await Self.request(url)
                    #expect(download.status == 200)
                    #expect(download.body == bytes)
                }

                // An edit from a device that never saw that save, with no fields asked back.
                let stale = try await client.send(
                    "records/modify", as: .user(world.alice),
                    body: #"{"zoneID":{"zoneName":"Z"},"desiredKeys":[],"operations":[\#(operation("update", "list", tag: "stale"))]}"#)
                #expect(stale.records.first?["serverErrorCode"]?.stringValue == "CONFLICT", "\(stale.json)")
                try await expectDownload(stale.records.first?["serverRecord"], stale)

                let share = try await client.modify(
                    [shareOperation(participants: [("bob@example.com", "READ_ONLY")])], zone: "Z", as: .user(world.alice))
                let guid = try #require(share.records.first?["shortGUID"]?.stringValue, "\(share.json)")
                let resolved = try await client.resolve(guid, as: .user(world.bob), fetchRoot: true)
                try await expectDownload(resolved.json["results"]?[0]?["rootRecord"], resolved)
            }
        }
    }

    /// MistKit's `uploadAssets(data:recordType:fieldName:)` names no record: the server names one, answers it with the
    /// URL, and the receipt is saved (here without `type`, as MistKit sends it) in that record or one the client names.
    @Test(arguments: TestStore.all)
    func aTokenThatNamesOnlyItsFieldIsUploadedSavedAndDownloaded(_ store: TestStore) async throws {
        let setup = try await AssetWorld(store)
        let world = setup.world
        try await world.test { client in
            try await Self.$port.withValue(client.client.port) {
                try await client.createZone("Z", as: world.alice)
                let tokens = try await client.send(
                    "assets/upload", as: .user(world.alice),
                    body: #"{"zoneID":{"zoneName":"Z"},"tokens":[{"fieldName":"photo","recordType":"Note"},{"fieldName":"photo"}]}"#)
                #expect(tokens.status == 200, "\(tokens.json)")
                let answered = try #require(tokens.json["tokens"]?.arrayValue)
                let names = answered.compactMap { $0["recordName"]?.stringValue }
                #expect(names.count == 2 && Set(names).count == 2 && names.allSatisfy { UUID(uuidString: $0) != nil }, "\(tokens.json)")
                #expect(answered.allSatisfy { $0["fieldName"]?.stringValue == "photo" })
                // The first is saved in the record it named, the second in one of the client's own naming.
                for (index, recordName) in [names[0], "my-own-name"].enumerated() {
                    let bytes = Array("photo \(index)".utf8)
                    let url = try #require(answered[index]["url"]?.stringValue)
                    let uploaded = try await Self.request(url, method: .POST, body: bytes)
                    #expect(uploaded.status == 200)
                    let singleFile = try #require(try JSONValue(parsing: uploaded.body)["singleFile"])
                    let untyped = #"{"photo":{"value":\#(String(decoding: singleFile.jsonBytes, as: UTF8.self))}}"#
                    let saved = try await client.modify([operation("create", recordName, fields: untyped)], zone: "Z", as: .user(world.alice))
                    #expect(saved.records.first?["serverErrorCode"] == nil, "\(saved.json)")
                    let fetched = try await client.lookup([recordName], zone: "Z", as: .user(world.alice))
                    #expect(fetched.records.first?["fields"]?["photo"]?["type"]?.stringValue == "ASSETID")
                    let downloadURL = try #require(
                        fetched.records.first?["fields"]?["photo"]?["value"]?["downloadURL"]?.stringValue, "\(fetched.json)")
                    let download = try await Self.request(downloadURL)
                    #expect(download.status == 200)
                    #expect(download.body == bytes)
                }
                // Such a receipt is still the uploader's, for its zone and field: another field refuses it.
                let another = try await client.send(
                    "assets/upload", as: .user(world.alice), body: #"{"zoneID":{"zoneName":"Z"},"tokens":[{"fieldName":"photo"}]}"#)
                let url = try #require(another.json["tokens"]?[0]?["url"]?.stringValue)
                let singleFile = try #require(try JSONValue(parsing: try await Self.request(url, method: .POST, body: [1, 2, 3]).body)["singleFile"])
                let elsewhere = #"{"cover":{"type":"ASSETID","value":\#(String(decoding: singleFile.jsonBytes, as: UTF8.self))}}"#
                let refused = try await client.modify([operation("create", "x", fields: elsewhere)], zone: "Z", as: .user(world.alice))
                #expect(refused.records.first?["serverErrorCode"]?.stringValue == "BAD_REQUEST", "\(refused.json)")
            }
        }
    }

    @Test(arguments: TestStore.all)
    func smallEmptyAndLargeFilesMakeTheRoundTripWithRangesAndETags(_ store: TestStore) async throws {
        let setup = try await AssetWorld(store)
        let world = setup.world
        try await world.test { client in
            try await Self.$port.withValue(client.client.port) {
                try await client.createZone("Z", as: world.alice)
                let large = (0..<(3 * 1024 * 1024 + 17)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
                for (name, bytes) in [("small", Array("a receipt photo".utf8)), ("empty", []), ("large", large)] {
                    let uploaded = try await Self.upload(bytes, record: name, as: world.alice, client: client)
                    #expect(uploaded.status == 200, "\(name): \(uploaded.reason ?? "")")
                    let singleFile = try #require(uploaded.singleFile)
                    #expect(singleFile["size"] == .number(String(bytes.count)))
                    #expect(singleFile["fileChecksum"]?.stringValue == Data(SHA256.hash(data: bytes)).base64EncodedString())
                    let saved = try await client.modify(
                        [operation("create", name, fields: Self.assetField(singleFile))], zone: "Z", as: .user(world.alice))
                    #expect(saved.records.first?["serverErrorCode"] == nil, "\(saved.json)")

                    let fetched = try await client.lookup([name], zone: "Z", as: .user(world.alice))
                    let downloadURL = try #require(
                        fetched.records.first?["fields"]?["photo"]?["value"]?["downloadURL"]?.stringValue, "\(fetched.json)")
                    let download = try await Self.request(downloadURL)
                    #expect(download.status == 200)
                    #expect(download.body == bytes, "\(name): the same bytes back")
                    #expect(download.headers["Content-Length"].first == String(bytes.count))
                    #expect(download.headers["Content-Type"].first == "application/octet-stream")
                    let etag = try #require(download.headers["ETag"].first)
                    #expect(try await Self.request(downloadURL, headers: [("If-None-Match", etag)]).status == 304)
                    if bytes.count > 100 {
                        let partial = try await Self.request(downloadURL, headers: [("Range", "bytes=10-99")])
                        #expect(partial.status == 206)
                        #expect(partial.body == Array(bytes[10..<100]))
                        #expect(partial.headers["Content-Range"].first == "bytes 10-99/\(bytes.count)")
                        let tail = try await Self.request(downloadURL, headers: [("Range", "bytes=-5")])
                        #expect(tail.body == Array(bytes.suffix(5)))
                        #expect(try await Self.request(downloadURL, headers: [("Range", "bytes=\(bytes.count)-")]).status == 416)
                    }
                }
                // A form body (multipart), as some clients send an asset, is read for its file part.
                let tokens = try await client.send(
                    "assets/upload", as: .user(world.alice),
                    body: #"{"zoneID":{"zoneName":"Z"},"tokens":[{"recordName":"form","fieldName":"photo"}]}"#)
                let url = try #require(tokens.json["tokens"]?[0]?["url"]?.stringValue)
                let file = Array("bytes sent as a form".utf8)
                let form = MultipartFileTests.form(file)
                let uploaded = try await Self.request(
                    url, method: .POST, body: form, headers: [("Content-Type", "multipart/form-data; boundary=\(MultipartFileTests.boundary)")])
                #expect(uploaded.status == 200, "\(String(decoding: uploaded.body, as: UTF8.self))")
                let singleFile = try JSONValue(parsing: uploaded.body)["singleFile"]
                #expect(singleFile?["size"] == .number(String(file.count)))
                #expect(singleFile?["fileChecksum"]?.stringValue == Data(SHA256.hash(data: file)).base64EncodedString())

                // The change feed carries download URLs too.
                let feed = try await client.send("changes/zone", as: .user(world.alice), body: #"{"zones":[{"zoneID":{"zoneName":"Z"}}]}"#)
                let records = feed.zones.first?["records"]?.arrayValue ?? []
                #expect(records.count == 3 && records.allSatisfy { $0["fields"]?["photo"]?["value"]?["downloadURL"]?.stringValue != nil })
            }
        }
    }

    @Test(arguments: TestStore.all)
    func alteredTruncatedOverLimitAndForeignUploadsAreRefused(_ store: TestStore) async throws {
        let setup = try await AssetWorld(store, maximumSize: 64 * 1024)
        let world = setup.world
        try await world.test { client in
            try await Self.$port.withValue(client.client.port) {
                for user in [world.alice, world.bob] { try await client.createZone("Z", as: user) }
                // Over the limit: 413 QUOTA_EXCEEDED.
                let tooLarge = try await Self.upload(Array(repeating: 7, count: 64 * 1024 + 1), record: "big", as: world.alice, client: client)
                #expect(tooLarge.status == 413, "\(tooLarge)")

                // Bytes other than the client announced: refused, nothing kept.
                let tokens = try await client.send(
                    "assets/upload", as: .user(world.alice),
                    body: #"{"zoneID":{"zoneName":"Z"},"tokens":[{"recordName":"r","fieldName":"photo"}]}"#)
                let url = try #require(tokens.json["tokens"]?[0]?["url"]?.stringValue)
                let altered = try await Self.request(
                    url, method: .POST, body: Array("tampered".utf8),
                    headers: [("X-Cumulus-Checksum", Data(SHA256.hash(data: Data("original".utf8))).base64EncodedString())])
                #expect(altered.status == 400 && String(decoding: altered.body, as: UTF8.self).contains("SHA-256"))
                // The URL's own signature guards it.
                #expect(
                    try await Self.request(url.replacingOccurrences(of: "signature=", with: "signature=x"), method: .POST, body: [1]).status == 403)
                // The receipt has no bytes: a record cannot hold it.
                let receipt = try #require(url.split(separator: "/upload/").last?.split(separator: "?").first.map(String.init))
                let unfilled = try await client.modify(
                    [operation("create", "r", fields: #"{"photo":{"type":"ASSETID","value":{"receipt":"\#(receipt)"}}}"#)], zone: "Z",
                    as: .user(world.alice))
                #expect(unfilled.records.first?["serverErrorCode"] == "BAD_REQUEST", "\(unfilled.json)")

                // A receipt is for its caller, zone, record and field only.
                let good = try #require(try await Self.upload(Array("mine".utf8), record: "mine", as: world.alice, client: client).singleFile)
                let theft = try await client.modify([operation("create", "mine", fields: Self.assetField(good))], zone: "Z", as: .user(world.bob))
                #expect(theft.records.first?["serverErrorCode"] == "BAD_REQUEST", "Bob saves Alice's receipt: \(theft.json)")
                let elsewhere = try await client.modify(
                    [operation("create", "other", fields: Self.assetField(good))], zone: "Z", as: .user(world.alice))
                #expect(elsewhere.records.first?["serverErrorCode"] == "BAD_REQUEST", "another record: \(elsewhere.json)")
                var wrongChecksum = good.objectValue ?? [:]
                wrongChecksum["fileChecksum"] = "AAAA"
                let mismatch = try await client.modify(
                    [operation("create", "mine", fields: Self.assetField(.object(wrongChecksum)))], zone: "Z", as: .user(world.alice))
                #expect(mismatch.records.first?["serverErrorCode"] == "BAD_REQUEST", "\(mismatch.json)")
                let saved = try await client.modify([operation("create", "mine", fields: Self.assetField(good))], zone: "Z", as: .user(world.alice))
                #expect(saved.records.first?["serverErrorCode"] == nil, "\(saved.json)")

                // A download URL altered, or past its hour, is refused.
                let fetched = try await client.lookup(["mine"], zone: "Z", as: .user(world.alice))
                let downloadURL = try #require(fetched.records.first?["fields"]?["photo"]?["value"]?["downloadURL"]?.stringValue)
                #expect(try await Self.request(downloadURL).status == 200)
                let otherFile = downloadURL.replacingOccurrences(of: "/download/", with: "/download/x")
                #expect(try await Self.request(otherFile).status == 403)
                setup.time.advance(by: 3601)
                #expect(try await Self.request(downloadURL).status == 403)
                let fresh = try await client.lookup(["mine"], zone: "Z", as: .user(world.alice))
                let freshURL = try #require(fresh.records.first?["fields"]?["photo"]?["value"]?["downloadURL"]?.stringValue)
                #expect(try await Self.request(freshURL).body == Array("mine".utf8), "a new fetch gives a new URL")
            }
        }
    }

    @Test(arguments: TestStore.all)
    func anUploaderHoldsFewUnsavedUploadsAtOnce(_ store: TestStore) async throws {
        var setup = try await AssetWorld(store)
        setup.world.configuration.assetLimits.maximumPendingUploads = 3
        setup.world.configuration.assetLimits.maximumPendingBytes = 100
        let world = setup.world
        try await world.test { client in
            try await Self.$port.withValue(client.client.port) {
                try await client.createZone("Z", as: world.alice)
                let first = try await Self.upload(Array(repeating: 1, count: 150), record: "a", as: world.alice, client: client)
                #expect(first.status == 200)
                // Over the bytes waiting to be saved: the next upload is refused before its bytes are read.
                let second = try await Self.upload(Array(repeating: 2, count: 10), record: "b", as: world.alice, client: client)
                #expect(second.status == 413 && second.reason?.contains("waiting to be saved") == true, "\(second)")
                // Two receipts wait (a and b): two more would make four, over the three allowed.
                let third = try await client.send(
                    "assets/upload", as: .user(world.alice),
                    body: #"{"zoneID":{"zoneName":"Z"},"tokens":[{"recordName":"c","fieldName":"photo"},{"recordName":"d","fieldName":"photo"}]}"#)
                #expect(third.status == 413 && third.serverErrorCode == "QUOTA_EXCEEDED", "\(third.json)")
                // Saving the first in a record frees its place and its bytes; another user has places of their own.
                let saved = try await client.modify(
                    [operation("create", "a", fields: Self.assetField(try #require(first.singleFile)))], zone: "Z", as: .user(world.alice))
                #expect(saved.records.first?["serverErrorCode"] == nil)
                #expect(try await Self.upload(Array(repeating: 3, count: 10), record: "c", as: world.alice, client: client).status == 200)
                try await client.createZone("Z", as: world.bob)
                #expect(try await Self.upload(Array(repeating: 4, count: 10), record: "e", as: world.bob, client: client).status == 200)
            }
        }
    }

    @Test(arguments: TestStore.all)
    func anUploaderKeepsAssetsUpToAQuotaAndDeletingRecordsMakesRoom(_ store: TestStore) async throws {
        var setup = try await AssetWorld(store)
        setup.world.configuration.assetLimits.maximumStoredBytes = 100
        let world = setup.world
        let time = setup.time
        let cleanup = AssetCleanup(
            database: DatabaseService(store: world.store, clock: world.clock), storage: setup.storage, clock: world.clock,
            limits: world.configuration.assetLimits)
        try await world.test { client in
            try await Self.$port.withValue(client.client.port) {
                try await client.createZone("Z", as: world.alice)
                let first = try #require(
                    try await Self.upload(Array(repeating: 1, count: 120), record: "a", as: world.alice, client: client).singleFile)
                _ = try await client.modify([operation("create", "a", fields: Self.assetField(first))], zone: "Z", as: .user(world.alice))
                // 120 bytes kept, over the quota of 100: the next upload is refused.
                let refused = try await Self.upload(Array(repeating: 2, count: 10), record: "b", as: world.alice, client: client)
                #expect(refused.status == 413 && refused.reason?.contains("quota") == true, "\(refused)")
                // Deleting the record lets the cleanup delete the file, and the room comes back.
                _ = try await client.modify([operation("forceDelete", "a")], zone: "Z", as: .user(world.alice))
                time.advance(by: 2 * 3600)
                try await cleanup.run(logger: logger)
                #expect(try await Self.upload(Array(repeating: 3, count: 10), record: "c", as: world.alice, client: client).status == 200)
            }
        }
    }

    @Test(arguments: TestStore.all)
    func aParticipantDownloadsASharedAssetAndARemovedOneGetsNoURL(_ store: TestStore) async throws {
        let setup = try await AssetWorld(store)
        let world = setup.world
        try await world.test { client in
            try await Self.$port.withValue(client.client.port) {
                try await client.createZone("Lists", as: world.alice)
                let photo = try #require(
                    try await Self.upload(Array("receipt.jpg".utf8), record: "item", zone: "Lists", as: world.alice, client: client).singleFile)
                _ = try await client.modify([operation("create", "list", type: "List")], zone: "Lists", as: .user(world.alice))
                let item = try await client.modify(
                    [operation("create", "item", type: "Note", fields: Self.assetField(photo), extra: #","parent":{"recordName":"list"}"#)],
                    zone: "Lists",
                    as: .user(world.alice))
                #expect(item.records.first?["serverErrorCode"] == nil, "\(item.json)")
                let shared = try await client.modify(
                    [shareOperation(participants: [("bob@example.com", "READ_ONLY")])], zone: "Lists", as: .user(world.alice))
                let guid = try #require(shared.records.first?["shortGUID"]?.stringValue)
                _ = try await client.resolve(guid, as: .user(world.bob), accept: true)

                let zone = client.ownerZone("Lists", owner: world.alice)
                let seen = try await client.send(
                    "records/lookup", as: .user(world.bob), database: "shared", body: #"{\#(zone),"records":[{"recordName":"item"}]}"#)
                let url = try #require(seen.records.first?["fields"]?["photo"]?["value"]?["downloadURL"]?.stringValue, "\(seen.json)")
                #expect(try await Self.request(url).body == Array("receipt.jpg".utf8))

                // Bob may write: an edit of another field sends the record back with Alice's asset in it, unchanged.
                let shareTag = try #require(
                    try await client.lookup(["share-1"], zone: "Lists", as: .user(world.alice)).records.first?["recordChangeTag"]?.stringValue)
                _ = try await client.modify(
                    [shareOperation("update", tag: shareTag, participants: [("bob@example.com", "READ_WRITE")])], zone: "Lists",
                    as: .user(world.alice))
                let itemTag = try #require(seen.records.first?["recordChangeTag"]?.stringValue)
                var fields = try #require(seen.records.first?["fields"]?.objectValue)
                fields["note"] = ["value": "paid", "type": "STRING"]
                let fieldsJSON = String(decoding: JSONValue.object(fields).jsonBytes, as: UTF8.self)
                let edit = try await client.send(
                    "records/modify", as: .user(world.bob), database: "shared",
                    body:
                        #"{\#(zone),"operations":[{"operationType":"update","record":{"recordName":"item","recordType":"Note","recordChangeTag":"\#(itemTag)","fields":\#(fieldsJSON)}}]}"#
                )
                #expect(edit.records.first?["serverErrorCode"] == nil, "\(edit.json)")
                // But the receipt goes nowhere else: not into another record.
                let photoJSON = String(decoding: try #require(fields["photo"]).jsonBytes, as: UTF8.self)
                let elsewhere = try await client.send(
                    "records/modify", as: .user(world.bob), database: "shared",
                    body:
                        #"{\#(zone),"operations":[{"operationType":"create","record":{"recordName":"copy","recordType":"Note","parent":{"recordName":"list"},"fields":{"photo":\#(photoJSON)}}}]}"#
                )
                #expect(elsewhere.records.first?["serverErrorCode"] == "BAD_REQUEST", "\(elsewhere.json)")

                // Alice stops sharing with Bob: he can no longer read the record, so he gets no new URL.
                let tag = try #require(
                    try await client.lookup(["share-1"], zone: "Lists", as: .user(world.alice)).records.first?["recordChangeTag"]?.stringValue)
                _ = try await client.modify([shareOperation("update", tag: tag, participants: [])], zone: "Lists", as: .user(world.alice))
                let after = try await client.send(
                    "records/lookup", as: .user(world.bob), database: "shared", body: #"{\#(zone),"records":[{"recordName":"item"}]}"#)
                #expect(!"\(after.json)".contains("downloadURL"), "\(after.json)")
            }
        }
    }

    @Test(arguments: TestStore.all)
    func theCleanupDeletesUnattachedUploadsAndFilesNoRecordHolds(_ store: TestStore) async throws {
        let setup = try await AssetWorld(store)
        let world = setup.world
        let database = DatabaseService(store: world.store, clock: world.clock)
        let cleanup = AssetCleanup(database: database, storage: setup.storage, clock: world.clock, limits: world.configuration.assetLimits)
        let zone = DatabaseRef(
            container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: world.alice.userRecordName)
        try await world.test { client in
            try await Self.$port.withValue(client.client.port) {
                try await client.createZone("Z", as: world.alice)
                var files: [String: JSONValue] = [:]
                for name in ["kept", "dropped", "back"] {
                    let file = try #require(try await Self.upload(Array(name.utf8), record: name, as: world.alice, client: client).singleFile)
                    files[name] = file
                }
                _ = try #require(try await Self.upload(Array("never saved".utf8), record: "never", as: world.alice, client: client).singleFile)
                for name in ["kept", "dropped", "back"] {
                    let saved = try await client.modify(
                        [operation("create", name, fields: Self.assetField(try #require(files[name])))], zone: "Z", as: .user(world.alice))
                    #expect(saved.records.first?["serverErrorCode"] == nil)
                }
                #expect(try await setup.fileCount() == 4)
                #expect(try await cleanup.run(logger: logger) == 0, "nothing is old enough yet")

                // A deleted record's file stays while the history can bring the record back; one undeleted is held again.
                _ = try await client.modify(
                    [operation("forceDelete", "dropped"), operation("forceDelete", "back")], zone: "Z", as: .user(world.alice))
                setup.time.advance(by: 2 * 3600)
                #expect(try await cleanup.run(logger: logger) == 0, "kept for the history")
                _ = try await database.history.undeleteRecords(["back"], zoneName: "Z", in: zone, logger: logger)
                setup.time.advance(by: 23 * 3600)
                #expect(try await cleanup.run(logger: logger) == 1, "the upload never saved, after a day")
                setup.time.advance(by: 7 * 24 * 3600)
                #expect(try await cleanup.run(logger: logger) == 1, "the deleted record's file, once the history no longer reaches it")
                #expect(try await setup.fileCount() == 2)
                for name in ["kept", "back"] {
                    let fetched = try await client.lookup([name], zone: "Z", as: .user(world.alice))
                    let url = try #require(fetched.records.first?["fields"]?["photo"]?["value"]?["downloadURL"]?.stringValue)
                    #expect(try await Self.request(url).body == Array(name.utf8), "a file a record holds stays")
                }

                // Deleting the zone lets its files go too, after the history's window.
                _ = try await client.send(
                    "zones/modify", as: .user(world.alice), body: #"{"operations":[{"operationType":"delete","zone":{"zoneID":{"zoneName":"Z"}}}]}"#)
                setup.time.advance(by: 2 * 3600)
                #expect(try await cleanup.run(logger: logger) == 0)
                setup.time.advance(by: 8 * 24 * 3600)
                #expect(try await cleanup.run(logger: logger) == 2)
                #expect(try await setup.fileCount() == 0)
            }
        }
    }

    /// Without history, a file no record holds goes after the grace period.
    @Test func withoutHistoryADeletedRecordsFileGoesAfterTheGracePeriod() async throws {
        let setup = try await AssetWorld(.sqlite)
        let world = setup.world
        let cleanup = AssetCleanup(
            database: DatabaseService(store: world.store, clock: world.clock, historyRetention: .zero), storage: setup.storage, clock: world.clock,
            limits: world.configuration.assetLimits)
        try await world.test { client in
            try await Self.$port.withValue(client.client.port) {
                try await client.createZone("Z", as: world.alice)
                let file = try #require(try await Self.upload(Array("gone".utf8), record: "gone", as: world.alice, client: client).singleFile)
                _ = try await client.modify([operation("create", "gone", fields: Self.assetField(file))], zone: "Z", as: .user(world.alice))
                _ = try await client.modify([operation("forceDelete", "gone")], zone: "Z", as: .user(world.alice))
                setup.time.advance(by: 2 * 3600)
                #expect(try await cleanup.run(logger: logger) == 1)
                #expect(try await setup.fileCount() == 0)
            }
        }
    }
}
