import CumulusModel

/// The OpenAPI 3.1 description of Cumulus's HTTP API, served at `/openapi.json`.
///
/// It is built here, next to the routes it describes, rather than kept as a file: the server is one binary, and a test
/// (`OpenAPITests`) checks that every route of the router is described and every description has a route. Schemas
/// describe what Cumulus answers exactly and what it accepts leniently (unknown members are ignored, as CloudKit's
/// clients send different ones): required members are the ones a request cannot do without.
enum OpenAPIDocument {
    /// The document as compact JSON.
    static let json: [UInt8] = document(version: CumulusVersion.current).jsonBytes

    static func document(version: String) -> JSONValue {
        var paths = Paths()
        describeDatabase(&paths)
        describeOthers(&paths)
        describeConsole(&paths)
        return [
            "openapi": "3.1.0",
            "info": [
                "title": "Cumulus",
                "version": .string(version),
                "description": """
                The HTTP API of Cumulus: CloudKit Web Services (databases, push, sharing) and Cumulus's own accounts, \
                share-a-copy links, schemas and operations endpoints. Requests carry ckAPIToken (and ckWebAuthToken for a \
                signed-in user) in the query, or a server-to-server key's signature headers. Errors are CloudKit's envelope.
                """,
                "license": ["name": "Apache-2.0", "identifier": "Apache-2.0"],
            ],
            "servers": [["url": "/"]],
            "tags": .array(Tag.allCases.map { ["name": .string($0.rawValue)] }),
            "security": clientSecurity,
            "paths": .object(paths.items),
            "components": ["schemas": .object(schemas), "securitySchemes": securitySchemes],
        ]
    }

    enum Tag: String, CaseIterable {
        case database = "CloudKit Web Services"
        case push = "Push"
        case sharing = "Sharing"
        case schema = "Schema"
        case accounts = "Accounts"
        case links = "Links"
        case operations = "Operations"
        case console = "Console"
    }

    /// The `paths` object, built one operation at a time.
    struct Paths {
        var items: [String: JSONValue] = [:]

        mutating func add(
            _ method: String, _ path: String, id: String, summary: String, tag: Tag, parameters: [JSONValue],
            request: JSONValue? = nil, requestRequired: Bool = true, responses: [String: JSONValue], security: JSONValue
        ) {
            var operation: [String: JSONValue] = [
                "operationId": .string(id), "summary": .string(summary), "tags": [.string(tag.rawValue)], "security": security,
            ]
            if !parameters.isEmpty { operation["parameters"] = .array(parameters) }
            if let request {
                var body = request.objectValue ?? [:]
                body["required"] = .bool(requestRequired)
                operation["requestBody"] = .object(body)
            }
            var answers = responses
            answers["default"] = errorResponse
            operation["responses"] = .object(answers)
            var item = items[path]?.objectValue ?? [:]
            item[method] = .object(operation)
            items[path] = .object(item)
        }
    }

    // MARK: - Building blocks

    static func ref(_ name: String) -> JSONValue { ["$ref": .string("#/components/schemas/\(name)")] }
    static let string: JSONValue = ["type": "string"]
    static let boolean: JSONValue = ["type": "boolean"]
    static let integer: JSONValue = ["type": "integer"]
    static let number: JSONValue = ["type": "number"]
    static let anyObject: JSONValue = ["type": "object"]

    static func array(_ items: JSONValue) -> JSONValue { ["type": "array", "items": items] }

    static func object(_ properties: [String: JSONValue], required: [String] = [], description: String? = nil) -> JSONValue {
        var schema: [String: JSONValue] = ["type": "object", "properties": .object(properties)]
        if !required.isEmpty { schema["required"] = .array(required.map { .string($0) }) }
        if let description { schema["description"] = .string(description) }
        return .object(schema)
    }

    static func json(_ schema: JSONValue) -> JSONValue { ["content": ["application/json": ["schema": schema]]] }
    static func ok(_ schema: JSONValue, _ description: String = "OK") -> JSONValue {
        ["description": .string(description), "content": ["application/json": ["schema": schema]]]
    }
    static let plainText: JSONValue = ["description": "OK", "content": ["text/plain": ["schema": ["type": "string"]]]]

    static func pathParameter(_ name: String, _ description: String, oneOf values: [String]? = nil) -> JSONValue {
        var schema: [String: JSONValue] = ["type": "string"]
        if let values { schema["enum"] = .array(values.map { .string($0) }) }
        return ["name": .string(name), "in": "path", "required": true, "description": .string(description), "schema": .object(schema)]
    }

    static let container = pathParameter("container", "The container's identifier, such as iCloud.com.example.app.")
    static let environment = pathParameter("environment", "development or production.", oneOf: ["development", "production"])
    static let database = pathParameter("database", "public, private or shared.", oneOf: ["public", "private", "shared"])

    static let errorResponse: JSONValue = [
        "description": "CloudKit's error envelope, with the status CloudKit answers (400, 401, 403, 404, 409, 413, 421, 429, 503, …).",
        "content": ["application/json": ["schema": ref("ErrorResponse")]],
    ]

    static let clientSecurity: JSONValue = [["ckAPIToken": []], ["ckAPIToken": [], "ckWebAuthToken": []], ["serverToServerKey": []]]
    static let apiTokenSecurity: JSONValue = [["ckAPIToken": []]]
    static let noSecurity: JSONValue = []

    static let securitySchemes: JSONValue = [
        "ckAPIToken": [
            "type": "apiKey", "in": "query", "name": "ckAPIToken", "description": "The app's API token (`cumulus tokens create`).",
        ],
        "ckWebAuthToken": [
            "type": "apiKey", "in": "query", "name": "ckWebAuthToken",
            "description": "A signed-in user's token (`auth/1/…/signin`, `cumulus users token`).",
        ],
        "consoleSession": [
            "type": "apiKey", "in": "cookie", "name": "cumulus_console",
            "description": "A web console session, started by a sign-in link `cumulus console` prints.",
        ],
        "serverToServerKey": [
            "type": "apiKey", "in": "header", "name": "X-Apple-CloudKit-Request-KeyID",
            "description": """
            A server-to-server key's ID, with X-Apple-CloudKit-Request-ISO8601Date and \
            X-Apple-CloudKit-Request-SignatureV1 (ECDSA P-256 over date:body-hash:path), as CloudKit signs requests.
            """,
        ],
    ]

    // MARK: - Schemas

    static let schemas: [String: JSONValue] = [
        "ErrorResponse": object(
            [
                "uuid": ["type": "string", "description": "The request ID, also in the X-Request-ID header and the access log."],
                "serverErrorCode": ref("ServerErrorCode"),
                "reason": ["type": "string", "description": "What was wrong, naming the field."],
                "retryAfter": ["type": "number", "description": "Seconds to wait before retrying (THROTTLED, TRY_AGAIN_LATER)."],
                "redirectURL": string,
                "ckErrorCode": ref("CKErrorCode"),
            ], required: ["uuid", "serverErrorCode", "reason"], description: "CloudKit's error envelope."),
        "ServerErrorCode": ["type": "string", "enum": .array(ServerErrorCode.allCases.map { .string($0.rawValue) })],
        "CKErrorCode": [
            "type": "string", "enum": .array(CKErrorCode.allCases.map { .string($0.rawValue) }),
            "description": """
            Cumulus extension: a finer code beside serverErrorCode where CloudKit's native API has one and Web Services \
            none. CHANGE_TOKEN_EXPIRED (with BAD_REQUEST): fetch the feed again without a syncToken.
            """,
        ],
        "ZoneID": object(
            ["zoneName": string, "ownerRecordName": string, "zoneType": string], description: "A zone; the default zone is _defaultZone."),
        "FieldValue": object(
            [
                "value": [:],
                "type": [
                    "type": "string",
                    "description": """
                    STRING, INT64, DOUBLE, TIMESTAMP, BYTES, REFERENCE, ASSETID, LOCATION, and their _LIST forms; inferred \
                    from the value when absent.
                    """,
                ],
            ], required: ["value"]),
        "Fields": ["type": "object", "additionalProperties": ref("FieldValue")],
        "Reference": object(["recordName": string, "zoneID": ref("ZoneID"), "action": string]),
        "Stamp": object(["timestamp": integer, "userRecordName": string, "deviceID": string]),
        "RecordInput": object(
            [
                "recordName": string, "recordType": string, "recordChangeTag": string, "fields": ref("Fields"), "parent": ref("Reference"),
                "createShortGUID": boolean, "forRecord": ref("Reference"), "publicPermission": string,
                "participants": array(
                    object([
                        "type": string, "permission": string, "acceptanceStatus": string,
                        "userIdentity": object([
                            "userRecordName": string, "lookupInfo": object(["emailAddress": string, "userRecordName": string]),
                        ]),
                    ])),
            ],
            description: "A record to save; a share (recordType cloudkit.share) carries forRecord, publicPermission and participants."),
        "Participant": object([
            "participantId": string,
            "userIdentity": object([
                "userRecordName": string, "lookupInfo": object(["userRecordName": string, "emailAddress": string]),
            ]),
            "permission": string, "type": string, "acceptanceStatus": string,
        ]),
        "Record": object(
            [
                "recordName": string, "recordType": string, "recordChangeTag": string, "fields": ref("Fields"), "created": ref("Stamp"),
                "modified": ref("Stamp"), "deleted": boolean, "zoneID": ref("ZoneID"), "parent": ref("Reference"), "share": ref("Reference"),
                "shortGUID": string, "url": string, "stableUrl": string, "participants": array(ref("Participant")),
                "owner": ref("Participant"), "currentUserParticipant": ref("Participant"), "publicPermission": string,
                "serverErrorCode": ref("ServerErrorCode"), "reason": string, "uuid": string, "serverRecord": ref("Record"),
            ],
            description: """
                A record, a tombstone (deleted: true), or a per-record error (serverErrorCode, reason, uuid; on CONFLICT and \
                EXISTS the server's record); a share record carries its participants and link.
                """),
        "RecordsResponse": object(["records": array(ref("Record"))], required: ["records"]),
        "RecordOperation": object(
            [
                "operationType": [
                    "type": "string", "enum": ["create", "update", "forceUpdate", "replace", "forceReplace", "delete", "forceDelete"],
                ],
                "record": ref("RecordInput"), "desiredKeys": array(string),
            ], required: ["operationType", "record"]),
        "ModifyRecordsRequest": object(
            [
                "operations": array(ref("RecordOperation")), "zoneID": ref("ZoneID"), "atomic": boolean, "desiredKeys": array(string),
                "numbersAsStrings": boolean,
            ], required: ["operations"]),
        "LookupRecordsRequest": object(
            [
                "records": array(object(["recordName": string, "desiredKeys": array(string)], required: ["recordName"])), "zoneID": ref("ZoneID"),
                "desiredKeys": array(string), "numbersAsStrings": boolean,
            ], required: ["records"]),
        "QueryRequest": object(
            [
                "query": object(
                    [
                        "recordType": string,
                        "filterBy": array(
                            object([
                                "fieldName": string, "comparator": string, "fieldValue": ref("FieldValue"), "systemFieldName": string,
                                "distance": number,
                            ])),
                        "sortBy": array(
                            object([
                                "fieldName": string, "systemFieldName": string, "ascending": boolean, "relativeLocation": ref("FieldValue"),
                            ])),
                    ], required: ["recordType"]),
                "zoneID": ref("ZoneID"), "resultsLimit": integer, "continuationMarker": string, "desiredKeys": array(string),
                "zoneWide": boolean, "numbersAsStrings": boolean,
            ], required: ["query"]),
        "QueryResponse": object(["records": array(ref("Record")), "continuationMarker": string], required: ["records"]),
        "Zone": object([
            "zoneID": ref("ZoneID"), "syncToken": string, "atomic": boolean, "deleted": boolean, "serverErrorCode": ref("ServerErrorCode"),
            "reason": string, "uuid": string,
        ]),
        "ZonesResponse": object(["zones": array(ref("Zone"))], required: ["zones"]),
        "LookupZonesRequest": object(["zones": array(ref("ZoneID"))], required: ["zones"]),
        "ModifyZonesRequest": object(
            [
                "operations": array(
                    object(
                        [
                            "operationType": ["type": "string", "enum": ["create", "delete"]],
                            "zone": object(["zoneID": ref("ZoneID")], required: ["zoneID"]),
                        ], required: ["operationType", "zone"]))
            ], required: ["operations"]),
        "DatabaseChangesRequest": object(["syncToken": string, "resultsLimit": integer]),
        "DatabaseChangesResponse": object(
            ["zones": array(ref("Zone")), "syncToken": string, "moreComing": boolean], required: ["zones", "syncToken", "moreComing"]),
        "ZoneChangesRequest": object(
            [
                "zones": array(
                    object(
                        [
                            "zoneID": ref("ZoneID"), "syncToken": string, "desiredKeys": array(string), "resultsLimit": integer,
                            "desiredRecordTypes": array(string),
                        ],
                        required: ["zoneID"])),
                "resultsLimit": integer, "numbersAsStrings": boolean,
            ], required: ["zones"]),
        "ZoneChangesResponse": object(
            [
                "zones": array(
                    object([
                        "zoneID": ref("ZoneID"), "syncToken": string, "moreComing": boolean, "records": array(ref("Record")),
                        "zoneDigest": ref("ZoneDigest"), "serverErrorCode": ref("ServerErrorCode"), "reason": string, "uuid": string,
                        "ckErrorCode": ref("CKErrorCode"),
                    ]))
            ], required: ["zones"]),
        "ZoneDigest": object(
            ["fingerprint": string, "recordCount": integer], required: ["fingerprint", "recordCount"],
            description: "Cumulus: the digest of a zone's records, on the page that ends a feed (docs/API.md)."),
        "RangeDigest": object(
            ["lowerBound": string, "upperBound": string, "fingerprint": string, "recordCount": integer], required: ["fingerprint", "recordCount"]),
        "ReconcileRequest": object(["zoneID": ref("ZoneID"), "ranges": array(ref("RangeDigest"))], required: ["zoneID", "ranges"]),
        "ReconcileResponse": object(
            [
                "zoneID": ref("ZoneID"),
                "ranges": array(
                    object(
                        [
                            "lowerBound": string, "upperBound": string, "status": ["type": "string", "enum": ["MATCH", "SPLIT", "LIST"]],
                            "subranges": array(ref("RangeDigest")),
                            "records": array(
                                object(["recordName": string, "recordChangeTag": string], required: ["recordName", "recordChangeTag"])),
                        ], required: ["status"])),
            ], required: ["zoneID", "ranges"]),
        "VerificationReport": object(
            [
                "zones": array(
                    object(
                        [
                            "zoneID": ref("ZoneID"), "missing": ["type": "integer", "minimum": 0, "maximum": 2_147_483_647],
                            "extra": ["type": "integer", "minimum": 0, "maximum": 2_147_483_647],
                            "stale": ["type": "integer", "minimum": 0, "maximum": 2_147_483_647],
                        ], required: ["zoneID"]))
            ], required: ["zones"],
            description: "Cumulus: what a device found when it verified its zones; the device is X-Cumulus-Device (docs/API.md)."),
        "VerificationResponse": object(["inSync": boolean, "verifiedAt": integer], required: ["inSync", "verifiedAt"]),
        "RecordChangesRequest": object(["zoneID": ref("ZoneID"), "syncToken": string, "resultsLimit": integer, "desiredKeys": array(string)]),
        "RecordChangesResponse": object(
            ["records": array(ref("Record")), "syncToken": string, "moreComing": boolean, "reverse": boolean, "zoneDigest": ref("ZoneDigest")],
            required: ["records", "syncToken", "moreComing"]),
        "ShortGUIDsRequest": object(
            [
                "shortGUIDs": array(
                    object(["value": string, "shouldFetchRootRecord": boolean, "rootRecordDesiredKeys": array(string)], required: ["value"]))
            ], required: ["shortGUIDs"]),
        "ShareLinkResult": object(
            [
                "containerIdentifier": string, "environment": string, "databaseScope": string, "zoneID": ref("ZoneID"), "shortGUID": string,
                "rootRecordName": string, "rootRecord": ref("Record"), "share": ref("Record"),
                "ownerIdentity": object(["userRecordName": string, "nameComponents": object(["givenName": string])]),
                "participantPermission": string, "participantStatus": string, "participantType": string, "webpageURL": string,
                "serverErrorCode": ref("ServerErrorCode"), "reason": string, "uuid": string,
            ], description: "What a share's link leads to, or the error of a link that leads nowhere (shortGUID, serverErrorCode)."),
        "ShareResultsResponse": object(["results": array(ref("ShareLinkResult"))], required: ["results"]),
        "Subscription": object([
            "subscriptionID": string, "subscriptionType": ["type": "string", "enum": ["zone", "query", "database"]], "zoneID": ref("ZoneID"),
            "zoneWide": boolean, "query": anyObject, "firesOn": array(string), "firesOnce": boolean, "notificationInfo": anyObject,
            "deleted": boolean, "serverErrorCode": ref("ServerErrorCode"), "reason": string, "uuid": string,
        ]),
        "SubscriptionsResponse": object(["subscriptions": array(ref("Subscription"))], required: ["subscriptions"]),
        "LookupSubscriptionsRequest": object(
            ["subscriptions": array(object(["subscriptionID": string], required: ["subscriptionID"]))], required: ["subscriptions"]),
        "ModifySubscriptionsRequest": object(
            [
                "operations": array(
                    object(
                        [
                            "operationType": ["type": "string", "enum": ["create", "update", "delete"]], "subscription": ref("Subscription"),
                        ], required: ["operationType", "subscription"]))
            ], required: ["operations"]),
        "UserExport": object(
            [
                "format": string, "version": integer, "exportedAt": integer, "container": string, "user": anyObject,
                "environments": array(anyObject), "assets": array(anyObject),
            ], required: ["format", "version", "user", "environments", "assets"],
            description: "Cumulus: a user's export (docs/OPERATIONS.md, \"Export a user\")."),
        "UserIdentity": object([
            "userRecordName": string, "nameComponents": anyObject, "firstName": string, "lookupInfo": anyObject, "emailAddress": string,
            "users": [
                "type": "array", "items": ["type": "object"],
                "description": "users/caller only: the same identity, for clients built from Apple's page.",
            ],
        ]),
        "UsersResponse": object(["users": array(ref("UserIdentity"))], required: ["users"]),
        "UsersLookupRequest": object(["users": array(object(["emailAddress": string, "userRecordName": string, "phoneNumber": string]))]),
        "PushToken": object(
            ["apnsEnvironment": string, "apnsToken": string, "webcourierURL": string], required: ["apnsEnvironment", "apnsToken", "webcourierURL"]
        ),
        "TokenRegisterRequest": object(["apnsToken": string, "apnsEnvironment": string], required: ["apnsToken"]),
        "Notification": object(
            [
                "aps": anyObject,
                "ck": object(["nid": string, "ce": integer, "cid": string, "ckuserid": string, "qry": anyObject, "met": anyObject]),
            ], description: "A notification, as CloudKit's courier sends it."),
        "SignUpRequest": object(["name": string, "password": string, "email": string, "discoverable": boolean], required: ["name", "password"]),
        "SignInRequest": object(["name": string, "password": string], required: ["name", "password"]),
        "SignOutRequest": object(["ckWebAuthToken": string]),
        "SignInResponse": object(["ckWebAuthToken": string, "userRecordName": string], required: ["ckWebAuthToken", "userRecordName"]),
        "DiscoverabilityRequest": object(["discoverable": boolean], required: ["discoverable"]),
        "DiscoverabilityResponse": object(["userRecordName": string, "discoverable": boolean], required: ["userRecordName", "discoverable"]),
        "SchemaDeployment": object(
            ["additions": array(string), "problems": array(string), "deployed": boolean], required: ["additions", "problems", "deployed"]),
        "DriveUpload": object(
            [
                "drives": array(
                    object([
                        "startTime": string, "duration": number, "distance": number, "averageSpeed": number, "maxSpeed": number,
                        "points": array(object(["lat": number, "lon": number])), "customName": string,
                    ]))
            ], required: ["drives"]),
        "RecordsUpload": object(["records": array(anyObject)], required: ["records"]),
        "Asset": object(
            [
                "fileChecksum": string, "receipt": string, "referenceChecksum": string, "wrappingKey": string, "size": integer,
                "downloadURL": ["type": "string", "description": "In fetched records: a signed URL that works without credentials for an hour."],
            ], description: "An ASSETID field's value."),
        "AssetUploadRequest": object(
            [
                "zoneID": ref("ZoneID"),
                "tokens": array(object(["recordName": string, "recordType": string, "fieldName": string], required: ["fieldName"])),
            ], required: ["tokens"]),
        "AssetUploadResponse": object(
            ["tokens": array(object(["recordName": string, "fieldName": string, "url": string], required: ["recordName", "fieldName", "url"]))],
            required: ["tokens"]),
        "AssetRereferenceRequest": object(
            ["zoneID": ref("ZoneID"), "assets": array(object(["recordName": string, "fieldName": string], required: ["recordName", "fieldName"]))],
            required: ["assets"]),
        "AssetRereferenceResponse": object(
            ["assets": array(object(["recordName": string, "fieldName": string, "value": ref("Asset")]))], required: ["assets"]),
        "SingleFile": object(["singleFile": ref("Asset")], required: ["singleFile"]),
        "LinksResponse": object(
            ["links": array(object(["id": string, "url": string, "expiresAt": string], required: ["id", "url", "expiresAt"]))], required: ["links"]),
        "LinkSnapshot": object(
            [
                "id": string, "kind": ["type": "string", "enum": ["drive", "records"]], "expiresAt": string, "drive": anyObject,
                "records": array(anyObject),
            ],
            required: ["id", "kind", "expiresAt"], description: "A share-a-copy snapshot as the app downloads it: a drive, or records."),
    ]

    // MARK: - Operations

    private static func describeDatabase(_ paths: inout Paths) {
        let prefix = "/database/1/{container}/{environment}/{database}"
        let parameters = [container, environment, database]
        // The GET operations also answer POST, as some clients send POST.
        let reads: [(String, String, String, String)] = [
            ("zones/list", "listZones", "Every zone of the database.", "ZonesResponse"),
            ("users/caller", "callerUser", "The caller's user identity.", "UserIdentity"),
            ("users/current", "currentUser", "The caller's user identity (the older path).", "UserIdentity"),
            ("subscriptions/list", "listSubscriptions", "The caller's subscriptions in the database.", "SubscriptionsResponse"),
            (
                "users/export", "exportUser", "Cumulus: everything of the signed-in user, one document (assets without bytes); one every 10 minutes.",
                "UserExport"
            ),
        ]
        for (path, id, summary, answer) in reads {
            for method in ["get", "post"] {
                paths.add(
                    method, "\(prefix)/\(path)", id: method == "get" ? id : id + "Post", summary: summary, tag: .database,
                    parameters: parameters, responses: ["200": ok(ref(answer))], security: clientSecurity)
            }
        }
        let operations: [(String, String, String, String?, String)] = [
            ("subscriptions/lookup", "lookupSubscriptions", "Subscriptions by ID.", "LookupSubscriptionsRequest", "SubscriptionsResponse"),
            (
                "subscriptions/modify", "modifySubscriptions", "Create, update and delete subscriptions.", "ModifySubscriptionsRequest",
                "SubscriptionsResponse"
            ),
            ("zones/lookup", "lookupZones", "Zones by ID.", "LookupZonesRequest", "ZonesResponse"),
            ("zones/modify", "modifyZones", "Create and delete zones.", "ModifyZonesRequest", "ZonesResponse"),
            ("records/lookup", "lookupRecords", "Records by name.", "LookupRecordsRequest", "RecordsResponse"),
            (
                "records/modify", "modifyRecords", "Save and delete records; atomic in a custom zone by default.", "ModifyRecordsRequest",
                "RecordsResponse"
            ),
            ("records/query", "queryRecords", "Records of a type matching filters, sorted, page by page.", "QueryRequest", "QueryResponse"),
            ("records/resolve", "resolveShares", "What shares' short GUIDs point to.", "ShortGUIDsRequest", "ShareResultsResponse"),
            ("records/accept", "acceptShares", "Accept shares by short GUID.", "ShortGUIDsRequest", "ShareResultsResponse"),
            (
                "changes/database", "databaseChanges", "Zones changed or deleted since a sync token.", "DatabaseChangesRequest",
                "DatabaseChangesResponse"
            ),
            (
                "zones/changes", "databaseChangesOlderPath", "The database change feed, at the older path.", "DatabaseChangesRequest",
                "DatabaseChangesResponse"
            ),
            (
                "changes/zone", "zoneChanges", "Records changed or deleted in zones since their sync tokens.", "ZoneChangesRequest",
                "ZoneChangesResponse"
            ),
            (
                "records/changes", "recordChanges", "One zone's change feed, in the older single-zone form.", "RecordChangesRequest",
                "RecordChangesResponse"
            ),
            (
                "records/reconcile", "reconcileRecords", "Cumulus: which ranges of a zone's record names differ from a device's digests.",
                "ReconcileRequest", "ReconcileResponse"
            ),
            (
                "devices/verification", "reportVerification", "Cumulus: a device's report of its last verification, for the operator.",
                "VerificationReport", "VerificationResponse"
            ),
            ("users/discover", "discoverUsers", "Discoverable users by email or userRecordName.", "UsersLookupRequest", "UsersResponse"),
            ("users/lookup/email", "lookupUsersByEmail", "Discoverable users by email.", "UsersLookupRequest", "UsersResponse"),
            ("users/lookup/id", "lookupUsersByID", "Discoverable users by userRecordName.", "UsersLookupRequest", "UsersResponse"),
            ("users/lookup/contacts", "lookupContacts", "Every discoverable user.", nil, "UsersResponse"),
            ("tokens/create", "createPushTokenInDatabase", "A courier address for this device (the path of Apple's page).", nil, "PushToken"),
            ("tokens/register", "registerPushTokenInDatabase", "Binds a push token to the signed-in user.", "TokenRegisterRequest", "PushToken"),
            (
                "assets/upload", "requestAssetUploads", "An upload URL per asset to save in a record's field.", "AssetUploadRequest",
                "AssetUploadResponse"
            ),
            (
                "assets/rereference", "rereferenceAssets", "New receipts for assets records hold, to save in other records.",
                "AssetRereferenceRequest", "AssetRereferenceResponse"
            ),
        ]
        // These read their body if there is one: an empty body asks for everything.
        let optionalBodies: Set<String> = ["changes/database", "zones/changes", "records/changes"]
        for (path, id, summary, request, answer) in operations {
            paths.add(
                "post", "\(prefix)/\(path)", id: id, summary: summary, tag: .database, parameters: parameters, request: request.map { json(ref($0)) },
                requestRequired: !optionalBodies.contains(path), responses: ["200": ok(ref(answer))], security: clientSecurity)
        }
        paths.add(
            "get", "\(prefix)/users/discover", id: "discoverAllUsers", summary: "Every discoverable user.", tag: .database, parameters: parameters,
            responses: ["200": ok(ref("UsersResponse"))], security: clientSecurity)
    }

    private static func describeConsole(_ paths: inout Paths) {
        let page: JSONValue = ["description": "The page", "content": ["text/html": ["schema": string]]]
        let signIn: JSONValue = ["description": "No session: a page that says how to sign in", "content": ["text/html": ["schema": string]]]
        let redirect: JSONValue = ["description": "Where to go next", "headers": ["Location": ["schema": string]]]
        let session: JSONValue = [["consoleSession": []]]
        let environment = pathParameter("environment", "development or production.", oneOf: ["development", "production"])
        paths.add(
            "get", "/console/signin", id: "consoleSignIn", summary: "Uses a sign-in link (once) and starts a session in a cookie.", tag: .console,
            parameters: [
                [
                    "name": "token", "in": "query", "required": true, "schema": string,
                    "description": "The token of the link `cumulus console` printed.",
                ],
                ["name": "next", "in": "query", "required": false, "schema": string, "description": "A console page to land on."],
            ],
            responses: ["303": redirect, "401": signIn], security: noSecurity)
        paths.add(
            "post", "/console/signout", id: "consoleSignOut", summary: "Ends the session.", tag: .console, parameters: [],
            request: ["content": ["application/x-www-form-urlencoded": ["schema": object(["csrf": string], required: ["csrf"])]]],
            responses: ["200": page, "401": signIn, "403": errorResponse], security: session)
        paths.add(
            "get", "/console", id: "console", summary: "Goes to the development environment's overview.", tag: .console, parameters: [],
            responses: ["303": redirect], security: noSecurity)
        let pages: [(String, String, String, [JSONValue])] = [
            ("", "consoleOverview", "Counts of users, credentials, zones, links and record types.", []),
            ("/users", "consoleUsers", "The container's users.", []),
            ("/users/{user}", "consoleUser", "A user's private zones and subscriptions.", [pathParameter("user", "A userRecordName.")]),
            ("/credentials", "consoleCredentials", "API tokens, by fingerprint, and server-to-server keys.", []),
            ("/links", "consoleLinks", "Live share-a-copy links.", []),
            ("/schema", "consoleSchema", "The schema, in CloudKit's schema language.", []),
            ("/indexes", "consoleIndexes", "The field indexes the container's queries use, and a form to drop one only it uses.", []),
            (
                "/zones/{scope}/{owner}", "consoleZones", "A database's zones.",
                [pathParameter("scope", "public or private.", oneOf: ["public", "private"]), pathParameter("owner", "The database's owner.")]
            ),
            (
                "/zones/{scope}/{owner}/{zone}", "consoleRecords", "A zone's records, 200 changes at a time, filtered by type or a field's value.",
                [
                    pathParameter("scope", "public or private.", oneOf: ["public", "private"]), pathParameter("owner", "The database's owner."),
                    pathParameter("zone", "The zone's name."),
                    ["name": "after", "in": "query", "required": false, "schema": integer, "description": "Where the previous page ended."],
                    ["name": "type", "in": "query", "required": false, "schema": string, "description": "Only records of this type."],
                    ["name": "field", "in": "query", "required": false, "schema": string, "description": "Only records holding this field."],
                    [
                        "name": "value", "in": "query", "required": false, "schema": string,
                        "description": "With field: only records whose field's value, as text, contains this (ignoring case).",
                    ],
                ]
            ),
            (
                "/zones/{scope}/{owner}/{zone}/{record}", "consoleRecord", "A record: system fields, fields, participants of a share, and forms.",
                [
                    pathParameter("scope", "public or private.", oneOf: ["public", "private"]), pathParameter("owner", "The database's owner."),
                    pathParameter("zone", "The zone's name."), pathParameter("record", "The record's name."),
                ]
            ),
        ]
        for (path, id, summary, parameters) in pages {
            paths.add(
                "get", "/console/{environment}\(path)", id: id, summary: summary, tag: .console, parameters: [environment] + parameters,
                responses: ["200": page, "401": signIn], security: session)
        }
        if let record = pages.last {
            paths.add(
                "post", "/console/{environment}\(record.0)", id: "consoleChangeRecord",
                summary: "Saves a record's fields (replacing them, with its change tag) or deletes it.", tag: .console,
                parameters: [environment] + record.3,
                request: [
                    "content": [
                        "application/x-www-form-urlencoded": [
                            "schema": object(
                                [
                                    "csrf": string, "recordChangeTag": string, "action": ["type": "string", "enum": ["save", "delete"]],
                                    "fields": ["type": "string", "description": "The fields, as JSON."],
                                ], required: ["csrf", "recordChangeTag", "action"])
                        ]
                    ]
                ],
                responses: [
                    "303": redirect,
                    "400": [
                        "description": "The fields were refused (the page says why), or the form lacks a field (the error envelope names it)",
                        "content": ["text/html": ["schema": string], "application/json": ["schema": ref("ErrorResponse")]],
                    ],
                    "401": signIn,
                    "409": ["description": "The record changed since the page was shown", "content": ["text/html": ["schema": string]]],
                    "default": errorResponse,
                ], security: session)
        }
        let zonePage = pages[pages.count - 2]
        paths.add(
            "post", "/console/{environment}\(zonePage.0)", id: "consoleChangeZone",
            summary: "Undeletes a record deleted within the history window, or restores the zone to a moment (with dryRun, shows what would change).",
            tag: .console, parameters: [environment] + zonePage.3.filter { $0["in"]?.stringValue == "path" },
            request: [
                "content": [
                    "application/x-www-form-urlencoded": [
                        "schema": object(
                            [
                                "csrf": string, "action": ["type": "string", "enum": ["undelete", "restore"]],
                                "recordName": ["type": "string", "description": "undelete: the record to bring back."],
                                "to": ["type": "string", "description": "restore: ISO 8601, or milliseconds since 1970; without a zone, UTC."],
                                "dryRun": ["type": "string", "enum": ["1"], "description": "restore: only show the differences."],
                            ], required: ["csrf", "action"])
                    ]
                ]
            ],
            responses: [
                "200": page, "303": redirect,
                "400": [
                    "description": "The record was not deleted within the window, or the moment is outside it (the page or envelope says why)",
                    "content": ["text/html": ["schema": string], "application/json": ["schema": ref("ErrorResponse")]],
                ],
                "401": signIn, "default": errorResponse,
            ], security: session)
        paths.add(
            "post", "/console/{environment}/indexes", id: "consoleDropIndex",
            summary: "Drops a field's index that only this container uses; a shared one is the operator's (`cumulus indexes drop`).",
            tag: .console, parameters: [environment],
            request: [
                "content": [
                    "application/x-www-form-urlencoded": ["schema": object(["csrf": string, "field": string], required: ["csrf", "field"])]
                ]
            ],
            responses: [
                "200": page, "401": signIn,
                "default": [
                    "description":
                        "CloudKit's error envelope: 400 without a field, 403 for a form not from this session or an index another container uses, 404 for no index of this container's on that field.",
                    "content": ["application/json": ["schema": ref("ErrorResponse")]],
                ],
            ], security: session)
    }

    private static func describeOthers(_ paths: inout Paths) {
        let app = [container, environment]
        // The same two operations at three paths: CloudKit JS's, the reference's (no database segment) and Apple's page's
        // (with one, described with the database operations).
        for (prefix, idSuffix, whose) in [
            ("/device/1/{container}/{environment}", "", "CloudKit JS"), ("/database/1/{container}/{environment}", "AtReferencePath", "the reference"),
        ] {
            paths.add(
                "post", "\(prefix)/tokens/create", id: "createPushToken\(idSuffix)",
                summary: "A courier address for this device (the path \(whose) uses).",
                tag: .push, parameters: app, responses: ["200": ok(ref("PushToken"))], security: clientSecurity)
            paths.add(
                "post", "\(prefix)/tokens/register", id: "registerPushToken\(idSuffix)",
                summary: "Binds a push token to the signed-in user (the path \(whose) uses).", tag: .push,
                parameters: app, request: json(ref("TokenRegisterRequest")), responses: ["200": ok(ref("PushToken"))], security: clientSecurity)
        }
        paths.add(
            "get", "/courier/1/{container}/{environment}/{token}", id: "courier",
            summary: "Long-polls for the next notification; with Accept: text/event-stream, a Server-Sent Events stream.", tag: .push,
            parameters: app + [
                pathParameter("token", "The apnsToken tokens/create answered."),
                [
                    "name": "timeout", "in": "query", "required": false, "schema": ["type": "integer", "minimum": 0, "maximum": 60],
                    "description": "Seconds to wait for a notification, 0 to 60 (30 by default).",
                ],
                [
                    "name": "stream", "in": "query", "required": false, "schema": string,
                    "description": "Present: answer a Server-Sent Events stream, as Accept: text/event-stream does.",
                ],
                [
                    "name": "lastEventID", "in": "query", "required": false, "schema": string,
                    "description": "Resume a stream after this event, as the Last-Event-ID header does.",
                ],
                [
                    "name": "Last-Event-ID", "in": "header", "required": false, "schema": string,
                    "description": "Resume a stream after this event (browsers send it when they reconnect).",
                ],
            ],
            responses: [
                "200": [
                    "description": "One notification, or an empty body when none came in time; a stream with Accept: text/event-stream.",
                    "content": ["application/json": ["schema": ref("Notification")], "text/event-stream": ["schema": string]],
                ]
            ], security: noSecurity)

        let signed: [JSONValue] = [
            ["name": "expires", "in": "query", "required": true, "schema": integer, "description": "When the URL stops working (Unix seconds)."],
            ["name": "signature", "in": "query", "required": true, "schema": string, "description": "The server's signature of the URL."],
        ]
        paths.add(
            "post", "/assets/1/{container}/{environment}/upload/{receipt}", id: "uploadAsset",
            summary: "The bytes of an asset, raw, streamed; answers the dictionary to save in the record's ASSETID field.", tag: .database,
            parameters: app + [pathParameter("receipt", "The receipt the upload URL names.")] + signed,
            request: [
                "content": [
                    "application/octet-stream": ["schema": ["type": "string", "format": "binary"]],
                    "multipart/form-data": ["schema": object(["file": ["type": "string", "format": "binary"]], required: ["file"])],
                ]
            ],
            responses: ["200": ok(ref("SingleFile"))], security: noSecurity)
        paths.add(
            "get", "/assets/1/{container}/{environment}/download/{file}", id: "downloadAsset",
            summary: "An asset's bytes, from a fetched record's downloadURL; Range, ETag and If-None-Match work.", tag: .database,
            parameters: app + [
                pathParameter("file", "The file the download URL names."),
                ["name": "Range", "in": "header", "required": false, "schema": string, "description": "bytes=a-b, bytes=a- or bytes=-n"],
                ["name": "If-None-Match", "in": "header", "required": false, "schema": string],
            ] + signed,
            responses: [
                "200": ["description": "The bytes", "content": ["application/octet-stream": ["schema": ["type": "string", "format": "binary"]]]],
                "206": ["description": "The range", "content": ["application/octet-stream": ["schema": ["type": "string", "format": "binary"]]]],
                "304": ["description": "Not modified"], "416": ["description": "The range is outside the file"],
            ], security: noSecurity)

        let schema = "/schema/1/{container}/{environment}"
        let schemaText: JSONValue = [
            "content": ["text/plain": ["schema": string], "application/json": ["schema": object(["schema": string], required: ["schema"])]]
        ]
        paths.add(
            "get", schema, id: "exportSchemaAtRoot", summary: "The container's schema in CloudKit's schema language.", tag: .schema,
            parameters: app, responses: ["200": plainText], security: clientSecurity)
        paths.add(
            "get", "\(schema)/export", id: "exportSchema", summary: "The container's schema in CloudKit's schema language.", tag: .schema,
            parameters: app, responses: ["200": plainText], security: clientSecurity)
        for (path, id, summary) in [
            ("diff", "diffSchema", "What deploying a schema would add, and what it refuses; needs a server-to-server key."),
            ("deploy", "deploySchema", "Adds record types, fields and indexes, never changes or removes them; needs a server-to-server key."),
        ] {
            paths.add(
                "post", "\(schema)/\(path)", id: id, summary: summary, tag: .schema, parameters: app, request: schemaText,
                responses: ["200": ok(ref("SchemaDeployment"))], security: [["serverToServerKey": []]])
        }

        let auth = "/auth/1/{container}/{environment}"
        paths.add(
            "post", "\(auth)/signup", id: "signUp", summary: "Creates a user and signs in.", tag: .accounts, parameters: app,
            request: json(ref("SignUpRequest")), responses: ["201": ok(ref("SignInResponse"), "Signed up")], security: apiTokenSecurity)
        paths.add(
            "post", "\(auth)/signin", id: "signIn", summary: "Signs in with a name and a password.", tag: .accounts, parameters: app,
            request: json(ref("SignInRequest")), responses: ["200": ok(ref("SignInResponse"))], security: apiTokenSecurity)
        paths.add(
            "post", "\(auth)/signout", id: "signOut", summary: "Revokes a web auth token.", tag: .accounts, parameters: app,
            request: json(ref("SignOutRequest")), requestRequired: false, responses: ["204": ["description": "Signed out"]],
            security: apiTokenSecurity)
        paths.add(
            "post", "\(auth)/discoverability", id: "setDiscoverability", summary: "Whether other users can find the signed-in user.",
            tag: .accounts, parameters: app, request: json(ref("DiscoverabilityRequest")), responses: ["200": ok(ref("DiscoverabilityResponse"))],
            security: [["ckAPIToken": [], "ckWebAuthToken": []]])

        let links = "/links/1/{container}/{environment}"
        let deviceHeader: JSONValue = [
            "name": "X-Cumulus-Device", "in": "header", "required": false, "schema": string,
            "description": "A stable device identifier: upload quotas count per device.",
        ]
        for (path, id, what, request) in [
            ("drives", "uploadDrives", "drives", "DriveUpload"), ("records", "uploadRecords", "records", "RecordsUpload"),
        ] {
            paths.add(
                "post", "\(links)/\(path)", id: id, summary: "Shares \(what) as a copy: a link to a snapshot, for 24 hours.", tag: .links,
                parameters: app + [deviceHeader], request: json(ref(request)), responses: ["200": ok(ref("LinksResponse"))],
                security: apiTokenSecurity)
        }
        let pageOrJSON: JSONValue = ["text/html": ["schema": string], "application/json": ["schema": anyObject]]
        paths.add(
            "get", "/s/{id}", id: "linkPage",
            summary: "A share-a-copy link: a web page, or the snapshot as JSON (Accept: application/json, or a .json suffix).", tag: .links,
            parameters: [pathParameter("id", "The link's ID.")],
            responses: [
                "200": [
                    "description": "The page or the snapshot",
                    "content": ["text/html": ["schema": string], "application/json": ["schema": ref("LinkSnapshot")]],
                ],
                "404": ["description": "An expired or unknown link: a page that says so", "content": pageOrJSON],
            ], security: noSecurity)
        paths.add(
            "get", "/share/{shortGUID}", id: "sharePage", summary: "A live share's URL: a page for browsers, JSON for clients.", tag: .sharing,
            parameters: [pathParameter("shortGUID", "The share's short GUID.")],
            responses: [
                "200": ["description": "The page or the share's preview", "content": pageOrJSON],
                "404": ["description": "An unknown share: a page that says so", "content": pageOrJSON],
            ], security: noSecurity)
        paths.add(
            "get", "/.well-known/apple-app-site-association", id: "appleAppSiteAssociation",
            summary: "The apple-app-site-association file given to cumulus serve.", tag: .links, parameters: [],
            responses: ["200": ok(anyObject)], security: noSecurity)

        paths.add(
            "get", "/", id: "landingPage", summary: "A page linking the console, this description, /health and /metrics.", tag: .operations,
            parameters: [], responses: ["200": ["description": "The page", "content": ["text/html": ["schema": string]]]], security: noSecurity)
        paths.add(
            "get", "/health", id: "health", summary: "ok while the instance serves.", tag: .operations, parameters: [],
            responses: ["200": plainText], security: noSecurity)
        paths.add(
            "get", "/metrics", id: "metrics", summary: "Prometheus's text format; on --metrics-port instead when it is set.", tag: .operations,
            parameters: [], responses: ["200": plainText], security: noSecurity)
        paths.add(
            "get", "/openapi.json", id: "openAPI", summary: "This description.", tag: .operations, parameters: [],
            responses: ["200": ok(anyObject)], security: noSecurity)
    }
}
