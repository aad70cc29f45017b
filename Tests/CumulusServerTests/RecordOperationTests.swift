import CumulusCore
import CumulusModel
import CumulusStore
import HTTPTypes
import Testing

@Suite("records/modify and records/lookup over HTTP", .timeLimit(.minutes(10)))
struct RecordOperationTests {
    @Test(arguments: [
        // (operation, send the current tag?, record exists first?, expected per-item code or nil for success)
        ("create", false, false, nil as String?),
        ("create", false, true, "EXISTS"),
        ("update", true, true, nil),
        ("update", false, true, "CONFLICT"),
        ("forceUpdate", false, true, nil),
        ("forceUpdate", false, false, nil),
        ("replace", true, true, nil),
        ("replace", false, true, "CONFLICT"),
        ("forceReplace", false, true, nil),
        ("forceReplace", false, false, nil),
        ("delete", true, true, nil),
        ("delete", false, true, "CONFLICT"),
        ("forceDelete", false, true, nil),
    ])
    func operationTypesWithMatchingAndStaleTags(_ type: String, _ currentTag: Bool, _ exists: Bool, _ expected: String?) async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            var tag = "stale"
            if exists {
                let created = try await client.modify(
                    [operation("create", "r", fields: #"{"a":{"value":1},"b":{"value":2}}"#)], as: .user(world.alice))
                tag = try #require(created.records.first?["recordChangeTag"]?.stringValue)
            }
            let response = try await client.modify(
                [
                    operation(
                        type, "r", tag: type == "create" || type.hasPrefix("force") ? nil : (currentTag ? tag : "stale"),
                        fields: #"{"a":{"value":7}}"#)
                ],
                as: .user(world.alice)
            )
            // Per-item outcomes come back inside records[] with HTTP 200.
            #expect(response.status == 200)
            let item = try #require(response.records.first)
            #expect(item["serverErrorCode"]?.stringValue == expected)
            if expected == "CONFLICT" {
                // The server's record comes with the conflict, so the client can merge.
                #expect(item["serverRecord"]?["recordChangeTag"]?.stringValue == tag)
                #expect(item["serverRecord"]?["fields"]?["a"]?["value"] == .number("1"))
            }
            let after = try await client.lookup(["r"], as: .user(world.alice)).records[0]
            switch (type, expected) {
            case (_, "CONFLICT"), (_, "EXISTS"):
                #expect(after["fields"]?["a"]?["value"] == .number("1"))
            case ("delete", nil), ("forceDelete", nil):
                #expect(item["deleted"] == .bool(true))
                #expect(after["serverErrorCode"]?.stringValue == "NOT_FOUND")
            case ("update", nil),
                ("forceUpdate", nil) where exists:
                #expect(after["fields"]?["a"]?["value"] == .number("7"))
                #expect(after["fields"]?["b"]?["value"] == .number("2"), "update merges")
                #expect(after["recordChangeTag"]?.stringValue != tag)
            case ("replace", nil),
                ("forceReplace", nil) where exists:
                #expect(after["fields"]?["a"]?["value"] == .number("7"))
                #expect(after["fields"]?["b"] == nil, "replace clears fields not sent")
            default:
                #expect(after["fields"]?["a"]?["value"] == .number("7"))
            }
        }
    }

    @Test(arguments: TestStore.allAndSharded) func missingChangeTagIsABadRequest(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let response = try await client.modify([operation("update", "r", tag: nil)], as: .user(world.alice))
            #expect(response.status == 400)
            #expect(response.serverErrorCode == "BAD_REQUEST")
            #expect(response.reason?.contains("operations[0].record.recordChangeTag") == true)
        }
    }

    @Test(arguments: TestStore.allAndSharded) func atomicBatchesAreAllOrNothingInCustomZones(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            _ = try await client.modify([operation("create", "taken")], as: .user(world.alice))
            let response = try await client.modify(
                [operation("create", "a"), operation("create", "taken"), operation("create", "b")], as: .user(world.alice))
            #expect(response.status == 200)
            #expect(response.records.map { $0["serverErrorCode"]?.stringValue } == ["ATOMIC_ERROR", "EXISTS", "ATOMIC_ERROR"])
            #expect(
                try await client.lookup(["a", "b"], as: .user(world.alice)).records.allSatisfy { $0["serverErrorCode"]?.stringValue == "NOT_FOUND" })

            let nonAtomic = try await client.modify(
                [operation("create", "a"), operation("create", "taken")], as: .user(world.alice), extra: #""atomic":false,"#)
            #expect(nonAtomic.records.map { $0["serverErrorCode"]?.stringValue } == [nil, "EXISTS"])
            #expect(try await client.lookup(["a"], as: .user(world.alice)).records[0]["recordName"]?.stringValue == "a")
        }
    }

    @Test(arguments: TestStore.allAndSharded) func theDefaultZoneIsNeverAtomic(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            _ = try await client.modify([operation("create", "taken")], zone: nil, as: .user(world.alice))
            let response = try await client.modify(
                [operation("create", "a"), operation("create", "taken")], zone: nil, as: .user(world.alice), extra: #""atomic":true,"#)
            #expect(response.records.map { $0["serverErrorCode"]?.stringValue } == [nil, "EXISTS"])
        }
    }

    @Test(arguments: TestStore.allAndSharded) func deleteSelfReferencesDeleteTheirRecordsInTheSameTransaction(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let ref = #"{"list":{"value":{"recordName":"list","action":"DELETE_SELF"},"type":"REFERENCE"}}"#
            _ = try await client.modify(
                [operation("create", "list"), operation("create", "item1", fields: ref), operation("create", "item2", fields: ref)],
                as: .user(world.alice))
            let deleted = try await client.modify([operation("forceDelete", "list")], as: .user(world.alice))
            #expect(deleted.records[0]["deleted"] == .bool(true))
            let lookup = try await client.lookup(["item1", "item2"], as: .user(world.alice))
            #expect(lookup.records.map { $0["serverErrorCode"]?.stringValue } == ["NOT_FOUND", "NOT_FOUND"])
        }
    }

    @Test(arguments: TestStore.allAndSharded) func desiredKeysNarrowTheFieldsReturned(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let fields = #"{"a":{"value":1},"b":{"value":"x"},"c":{"value":2.5}}"#
            let saved = try await client.modify(
                [
                    operation("create", "r1", fields: fields),
                    #"{"operationType":"create","desiredKeys":["c"],"record":{"recordName":"r2","recordType":"T","fields":\#(fields)}}"#,
                ],
                as: .user(world.alice), extra: #""desiredKeys":["a","b"],"#
            )
            #expect(saved.records[0]["fields"]?.objectValue?.keys.sorted() == ["a", "b"])
            #expect(saved.records[1]["fields"]?.objectValue?.keys.sorted() == ["c"])

            let systemOnly = try await client.lookup(["r1"], as: .user(world.alice), extra: #""desiredKeys":[],"#)
            #expect(systemOnly.records[0]["fields"] == .object([:]))
            #expect(systemOnly.records[0]["recordChangeTag"] != nil)
            let full = try await client.lookup(["r1"], as: .user(world.alice))
            #expect(full.records[0]["fields"]?.objectValue?.count == 3)
        }
    }

    /// Every field type but assets, which need an upload first (AssetTests).
    @Test(arguments: TestStore.allAndSharded) func everyFieldTypeRoundTripsExactly(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let fields = #"""
            {"string":{"value":"Morning commute ☀️","type":"STRING"},
             "int":{"value":9223372036854775807,"type":"INT64"},
             "double":{"value":31.25,"type":"DOUBLE"},
             "timestamp":{"value":1700000000123,"type":"TIMESTAMP"},
             "bytes":{"value":"AAEC+v8=","type":"BYTES"},
             "reference":{"value":{"recordName":"other","action":"NONE"},"type":"REFERENCE"},
             "location":{"value":{"latitude":51.5,"longitude":-0.125,"horizontalAccuracy":5.0,"altitude":11.0,"speed":13.5,"course":90.0,"timestamp":1700000000000},"type":"LOCATION"},
             "strings":{"value":["a","b"],"type":"STRING_LIST"},
             "ints":{"value":[1,-2],"type":"INT64_LIST"},
             "doubles":{"value":[1.5,-2.25],"type":"DOUBLE_LIST"},
             "timestamps":{"value":[1,2],"type":"TIMESTAMP_LIST"},
             "bytesList":{"value":["AQ==",""],"type":"BYTES_LIST"},
             "references":{"value":[{"recordName":"other","action":"NONE"}],"type":"REFERENCE_LIST"},
             "locations":{"value":[{"latitude":1.0,"longitude":2.0}],"type":"LOCATION_LIST"},
             "empty":{"value":[],"type":"UNKNOWN_LIST"}}
            """#
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let saved = try await client.modify([operation("create", "other"), operation("create", "r", fields: fields)], as: .user(world.alice))
            #expect(saved.records.count == 2)
            let fetched = try await client.lookup(["r"], as: .user(world.alice)).records[0]
            let sent = try JSONValue(parsing: fields)
            #expect(fetched["fields"] == sent)
            for (name, field) in sent.objectValue! {
                #expect(fetched["fields"]?[name] == field, "field \(name)")
            }
        }
    }

    @Test(arguments: TestStore.allAndSharded) func numbersAsStringsWritesNumbersAsStrings(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            _ = try await client.modify(
                [operation("create", "r", fields: #"{"n":{"value":5},"d":{"value":1.5}}"#)], zone: nil, as: .user(world.alice))
            let record = try await client.lookup(["r"], zone: nil, as: .user(world.alice), extra: #""numbersAsStrings":true,"#).records[0]
            #expect(record["fields"]?["n"]?["value"] == .string("5"))
            #expect(record["fields"]?["d"]?["value"] == .string("1.5"))
        }
    }

    @Test(arguments: TestStore.allAndSharded) func systemFieldsAreReturned(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            _ = try await client.modify([operation("create", "parent")], as: .user(world.alice))
            let response = try await client.send(
                "records/modify", as: .user(world.alice),
                body:
                    #"{"zoneID":{"zoneName":"Z"},"operations":[{"operationType":"create","record":{"recordName":"child","recordType":"Note","parent":{"recordName":"parent"},"createShortGUID":true}}]}"#,
                headers: [.init("X-Cumulus-Device")!: "phone-1"]
            )
            let record = response.records[0]
            #expect(record["parent"]?["recordName"]?.stringValue == "parent")
            #expect(record["shortGUID"]?.stringValue?.count == 22)
            #expect(record["created"]?["userRecordName"]?.stringValue == world.alice.userRecordName)
            #expect(record["created"]?["deviceID"]?.stringValue == "phone-1")
            #expect(record["modified"]?["timestamp"] != nil)
            #expect(record["zoneID"]?["zoneName"]?.stringValue == "Z")
            #expect(record["zoneID"]?["ownerRecordName"]?.stringValue == world.alice.userRecordName)

            let orphan = try await client.modify(
                [operation("create", "orphan", extra: #","parent":{"recordName":"missing"}"#)], as: .user(world.alice))
            #expect(orphan.records[0]["serverErrorCode"]?.stringValue == "VALIDATING_REFERENCE_ERROR")
        }
    }

    @Test(arguments: TestStore.allAndSharded) func bodiesAreJSONWhateverTheContentType(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            for contentType in ["text/plain", "application/json", "application/x-www-form-urlencoded"] {
                let response = try await client.send(
                    "records/modify", as: .user(world.alice), body: #"{"operations":[\#(operation("forceUpdate", "r"))]}"#,
                    headers: [.contentType: contentType]
                )
                #expect(response.status == 200, "content type \(contentType)")
            }
            let noType = try await client.send("records/lookup", as: .user(world.alice), body: #"{"records":[{"recordName":"r"}]}"#)
            #expect(noType.records[0]["recordName"]?.stringValue == "r")
            let malformed = try await client.send("records/lookup", as: .user(world.alice), body: #"{"records":[{"recordName":"r"}"#)
            #expect(malformed.status == 400)
            #expect(malformed.reason?.hasPrefix("body: invalid JSON") == true)
        }
    }
}
