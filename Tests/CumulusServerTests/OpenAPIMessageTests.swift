import CumulusModel
import Testing

@testable import CumulusServer

/// `/openapi.json` against the wire message types: every member a message writes is described, and every member the
/// description names is written by some sample of the message. A field added to one and not the other fails here.
@Suite("OpenAPI description of the wire messages", .timeLimit(.minutes(10)))
struct OpenAPIMessageTests {
    static let lists = ZoneID(zoneName: "Lists", ownerRecordName: "_4a1b")
    static let error = ItemError(code: .zoneNotFound, reason: "zone Gone does not exist")
    static let digest = ZoneDigest(recordName: "n", changeTag: "2f")

    /// Each described message with samples covering its cases.
    static let messages: [(component: String, samples: [any WireMessage])] = [
        (
            "ZonesResponse",
            [
                ZonesResponse(zones: [
                    .zone(ZoneInfo(zoneID: lists, syncToken: "AAAA")), .deleted(lists), .failed(ZoneID(zoneName: "Gone"), error),
                ])
            ]
        ),
        (
            "DatabaseChangesResponse",
            [DatabaseChangesResponse(zones: [.zone(ZoneInfo(zoneID: lists, syncToken: "BBBB")), .deleted(lists)], syncToken: "C", moreComing: true)]
        ),
        ("ModifyZonesRequest", [ZonesModifyRequest(operations: [ZoneOperation(operationType: .delete, zoneID: lists)])]),
        ("LookupZonesRequest", [ZonesLookupRequest(zones: [lists])]),
        ("DatabaseChangesRequest", [DatabaseChangesRequest(syncToken: "C", resultsLimit: 5)]),
        (
            "SubscriptionsResponse",
            [
                SubscriptionsResponse(subscriptions: [
                    .subscription(zoneSubscription), .subscription(querySubscription), .deleted(subscriptionID: "old"),
                    .failed(subscriptionID: "gone", ItemError(code: .notFound, reason: "subscription gone does not exist")),
                ])
            ]
        ),
        ("LookupSubscriptionsRequest", [SubscriptionsLookupRequest(subscriptionIDs: ["a"])]),
        (
            "PushToken",
            [PushTokenResponse(apnsEnvironment: "development", apnsToken: "t", webcourierURL: "https://example.com/courier/1/c/development/t")]
        ),
        ("TokenRegisterRequest", [PushTokenRegisterRequest(apnsToken: "t", apnsEnvironment: "development")]),
        (
            "UserIdentity",
            [CallerResponse(identity: UserIdentity(userRecordName: "_a", emailAddress: "alice@example.com", name: "alice"))]
        ),
        (
            "UsersResponse",
            [
                UsersResponse(users: [
                    UserIdentity(userRecordName: "_b", emailAddress: "bob@example.com", name: "bob", emailAtTopLevel: true)
                ])
            ]
        ),
        ("UsersLookupRequest", [UserLookupRequest(keys: [.emailAddress("bob@example.com"), .userRecordName("_b"), .phoneNumber("+44")])]),
        (
            "ErrorResponse",
            [
                ErrorResponse(uuid: "u", serverErrorCode: .throttled, reason: "too many requests", retryAfter: 3),
                ErrorResponse(uuid: "u", serverErrorCode: .authenticationRequired, reason: "sign in", redirectURL: "https://example.com/signin"),
                ErrorResponse(uuid: "u", serverErrorCode: .badRequest, reason: "syncToken: has expired", ckErrorCode: .changeTokenExpired),
            ]
        ),
        ("RecordsResponse", [RecordsResponse(records: records)]),
        (
            "DriveUpload",
            [
                DriveLinksRequest(drives: [
                    SharedDrive(
                        startTime: 1_700_000_000_000, duration: 60, distance: 1000, averageSpeed: 16, maxSpeed: 20,
                        points: [DrivePoint(lat: 51.5, lon: -0.1)], customName: "Commute")
                ])
            ]
        ),
        ("RecordsUpload", [RecordsLinkRequest(records: [RecordDraft(recordName: "a", recordType: "Item", fields: ["n": .string("x")])])]),
        ("LinksResponse", [CreatedLinksResponse(links: [.init(id: "abc", url: "https://example.com/s/abc", expiresAt: 1_800_000_000_000)])]),
        (
            "LinkSnapshot",
            [
                LinkSnapshotResponse(
                    id: "abc", expiresAt: 1_800_000_000_000,
                    content: .drive(
                        SharedDrive(
                            startTime: 1_700_000_000_000, duration: 60, distance: 1000, averageSpeed: 16, maxSpeed: 20, points: [],
                            customName: "Commute"))),
                LinkSnapshotResponse(
                    id: "def", expiresAt: 1_800_000_000_000,
                    content: .records([RecordDraft(recordName: "a", recordType: "Item", fields: ["n": .string("x")])])),
            ]
        ),
        (
            "AssetUploadRequest",
            [AssetUploadRequest(zoneID: lists, tokens: [AssetUploadToken(recordName: "r", recordType: "Car", fieldName: "photo")])]
        ),
        ("AssetUploadResponse", [AssetUploadResponse(tokens: [.init(recordName: "r", fieldName: "photo", url: "https://example.com/assets/1/u")])]),
        ("SingleFile", [AssetUploadedResponse(singleFile: uploaded)]),
        ("AssetRereferenceRequest", [AssetRereferenceRequest(zoneID: lists, assets: [.init(recordName: "r", fieldName: "photo")])]),
        ("AssetRereferenceResponse", [AssetRereferenceResponse(assets: [.init(recordName: "r", fieldName: "photo", value: uploaded)])]),
        (
            "ShareResultsResponse",
            [
                ShareLinksResponse(results: [
                    .resolved(
                        ShareLinkMetadata(
                            containerIdentifier: "iCloud.com.example", environment: "development", databaseScope: "SHARED", zoneID: lists,
                            shortGUID: "g", rootRecordName: "p", rootRecord: shared, share: shared,
                            owner: OwnerIdentity(userRecordName: "_a", name: "alice"),
                            participantPermission: .readOnly, participantStatus: .invited, participantType: .publicUser,
                            webpageURL: "https://example.com/share/g")),
                    .failed(shortGUID: "nope", ItemError(code: .notFound, reason: "no share has this link")),
                ])
            ]
        ),
        ("ShortGUIDsRequest", [ShortGUIDRequest(entries: [.init(value: "g", shouldFetchRootRecord: true, rootRecordDesiredKeys: ["name"])])]),
        (
            "ModifyRecordsRequest",
            [
                RecordsModifyRequest(
                    operations: [
                        RecordOperation(
                            operationType: .create,
                            record: RecordDraft(
                                recordName: "r", recordType: "Drive", recordChangeTag: "t", fields: ["name": .string("Commute")],
                                parent: .set("p"), createShortGUID: true)),
                        RecordOperation(
                            operationType: .create,
                            record: RecordDraft(
                                recordName: "s", recordType: "cloudkit.share",
                                otherKeys: [
                                    "forRecord": ["recordName": "p"], "publicPermission": "NONE",
                                    "participants": [
                                        [
                                            "type": "USER", "permission": "READ_ONLY", "acceptanceStatus": "INVITED",
                                            "userIdentity": [
                                                "userRecordName": "_b", "lookupInfo": ["emailAddress": "bob@example.com", "userRecordName": "_b"],
                                            ],
                                        ]
                                    ],
                                ]),
                            desiredKeys: ["name"]),
                    ], zoneID: lists, atomic: true, desiredKeys: [], numbersAsStrings: true)
            ]
        ),
        (
            "LookupRecordsRequest",
            [RecordsLookupRequest(records: [.init(recordName: "r", desiredKeys: ["name"])], zoneID: lists, desiredKeys: [], numbersAsStrings: true)]
        ),
        (
            "QueryRequest",
            [
                RecordsQueryRequest(
                    recordType: "Drive",
                    filters: [
                        QueryFilter(comparator: .near, field: .field("at"), value: .location(Location(latitude: 1, longitude: 2)), distance: 5),
                        QueryFilter(comparator: .equals, field: .system(.recordName), value: .string("r")),
                    ],
                    sorts: [
                        QuerySort(field: .field("at"), relativeLocation: Location(latitude: 1, longitude: 2)),
                        QuerySort(field: .system(.modifiedTimestamp), ascending: false),
                    ], zoneID: lists, zoneWide: true, resultsLimit: 5, continuationMarker: "M", desiredKeys: [], numbersAsStrings: true)
            ]
        ),
        (
            "ZoneChangesRequest",
            [
                ZoneChangesRequest(
                    zones: [ZoneChangesEntry(zoneID: lists, syncToken: "T", resultsLimit: 5, desiredKeys: [], desiredRecordTypes: ["Drive"])],
                    numbersAsStrings: true)
            ]
        ),
        ("QueryResponse", [RecordsResponse(records: records, continuationMarker: "M1")]),
        (
            "ZoneChangesResponse",
            [
                ZoneChangesResponse(zones: [
                    .page(zoneID: lists, syncToken: "T", moreComing: true, records: records),
                    .page(zoneID: lists, syncToken: "U", moreComing: false, records: [], zoneDigest: digest),
                    .failed(ZoneID(zoneName: "Gone"), error),
                    .failed(
                        ZoneID(zoneName: "Again"),
                        ItemError(code: .badRequest, reason: "zones[3].syncToken: has expired", ckErrorCode: .changeTokenExpired)),
                ])
            ]
        ),
        ("RecordChangesResponse", [RecordChangesResponse(records: records, syncToken: "T", moreComing: false, zoneDigest: digest)]),
        (
            "ReconcileRequest",
            [
                RecordsReconcileRequest(
                    zoneID: lists, ranges: [RangeDigest(range: RecordNameRange(lowerBound: "a", upperBound: "m"), digest: digest)])
            ]
        ),
        (
            "ReconcileResponse",
            [
                RecordsReconcileResponse(
                    zoneID: lists,
                    ranges: [
                        .match(RecordNameRange(upperBound: "a")),
                        .split(
                            RecordNameRange(lowerBound: "a", upperBound: "m"), [RangeDigest(range: RecordNameRange(lowerBound: "a"), digest: digest)]),
                        .list(RecordNameRange(lowerBound: "m"), [RecordVersion(recordName: "n", recordChangeTag: "2f")]),
                    ])
            ]
        ),
        (
            "ModifySubscriptionsRequest",
            [
                SubscriptionsModifyRequest(operations: [
                    .init(.create, querySubscription), .init(.delete, Subscription(subscriptionID: "old", kind: .zone)),
                ])
            ]
        ),
    ]

    /// Every kind of element of a `records` array: a share record (every key a record can carry), a tombstone, a
    /// conflict with the server's record.
    static let uploaded = UploadedAsset(Asset(fileChecksum: "c", size: 3, referenceChecksum: "c", receipt: "rc"))

    static let shared: ResponseRecord = {
        guard case .record(let record) = records[0] else { fatalError("the first sample is a record") }
        return record
    }()

    static let records: [RecordResult] = {
        let stamp = RecordStamp(timestamp: 1, userRecordName: "_a", deviceID: "phone")
        let owner = ShareParticipant(
            userRecordName: "_a", emailAddress: "alice@example.com", permission: .readWrite, type: .owner, acceptanceStatus: .accepted)
        let header = RecordHeader(
            recordName: "r", recordType: "Drive", recordChangeTag: "t", created: stamp, modified: stamp, parent: "p",
            share: Reference(recordName: "s"), zoneID: lists, shortGUID: "g")
        let record = ResponseRecord(
            header: header, fields: .values(["name": .string("Commute")]),
            share: ShareMembers(
                publicPermission: .none, participants: [owner], owner: owner, currentUserParticipant: owner, url: "https://example.com/share/g"))
        return [
            .record(record), .deleted(recordName: "old", recordType: "Drive"),
            .failed(recordName: "r", ItemError(code: .conflict, reason: "changed"), serverRecord: record),
        ]
    }()

    static let zoneSubscription = Subscription(subscriptionID: "lists", kind: .zone, zoneID: lists, firesOnce: true)
    static let querySubscription = Subscription(
        subscriptionID: "drives", kind: .query, zoneID: lists, zoneWide: false, queryJSON: ["recordType": "Drive"], firesOn: [.create, .update],
        notificationInfo: ["shouldSendContentAvailable": true])

    /// Walks a written value beside its schema, recording each described member it met and each it wrote without a
    /// description.
    struct Walk {
        let schemas: [String: JSONValue]
        var undescribed: [String] = []
        var met: Set<String> = []

        mutating func visit(_ value: JSONValue, _ schema: JSONValue, at path: String, in component: String) {
            if case .string(let reference)? = schema["$ref"] {
                let name = String(reference.split(separator: "/").last ?? "")
                visit(value, schemas[name] ?? .null, at: path, in: name)
                return
            }
            switch value {
            case .object(let members):
                let properties = schema["properties"]?.objectValue
                for (key, member) in members {
                    guard let properties else { continue }  // an object described as any object
                    guard let described = properties[key] else {
                        undescribed.append("\(path).\(key) (\(component))")
                        continue
                    }
                    met.insert("\(component).\(key)")
                    visit(member, described, at: "\(path).\(key)", in: component)
                }
            case .array(let elements):
                for (index, element) in elements.enumerated() { visit(element, schema["items"] ?? .null, at: "\(path)[\(index)]", in: component) }
            default:
                break
            }
        }
    }

    @Test func everyMemberAMessageWritesIsDescribedAndEveryDescribedMemberIsWritten() throws {
        let document = try JSONValue(parsing: OpenAPIDocument.json)
        let schemas = try #require(document["components"]?["schemas"]?.objectValue)
        var walk = Walk(schemas: schemas)
        var components: Set<String> = []
        for (component, samples) in Self.messages {
            let schema = try #require(schemas[component], "no component \(component)")
            for sample in samples {
                let value = try JSONValue(parsing: sample.wireBytes)
                walk.visit(value, schema, at: component, in: component)
            }
            components.insert(component)
        }
        #expect(walk.undescribed.isEmpty, "written but not described: \(walk.undescribed.sorted())")
        // Every member of the messages' own components (not shared ones such as ZoneID) is written by some sample.
        for component in components {
            for key in schemas[component]?["properties"]?.objectValue?.keys ?? [:].keys {
                #expect(walk.met.contains("\(component).\(key)"), "described but never written: \(component).\(key)")
            }
        }
        for item in ["Zone", "Subscription", "Record", "Participant", "ShareLinkResult"] {
            for key in schemas[item]?["properties"]?.objectValue?.keys ?? [:].keys {
                #expect(walk.met.contains("\(item).\(key)"), "described but never written: \(item).\(key)")
            }
        }
    }
}
