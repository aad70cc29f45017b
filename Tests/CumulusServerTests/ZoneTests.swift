import CumulusCore
import CumulusModel
import CumulusStore
import HTTPTypes
import Testing

@Suite("zones/list, zones/lookup, zones/modify", .timeLimit(.minutes(10)))
struct ZoneTests {
    @Test(arguments: TestStore.all) func customZonesAreCreatedLookedUpAndDeleted(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let created = try await client.send(
                "zones/modify", as: .user(world.alice),
                body:
                    #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Drives"}}},{"operationType":"create","zone":{"zoneID":{"zoneName":"Lists"}}}]}"#
            )
            #expect(created.status == 200)
            #expect(created.zones.map { $0["zoneID"]?["zoneName"]?.stringValue } == ["Drives", "Lists"])
            #expect(created.zones[0]["zoneID"]?["ownerRecordName"]?.stringValue == world.alice.userRecordName)
            #expect(created.zones[0]["atomic"] == .bool(true))

            let list = try await client.send("zones/list", as: .user(world.alice), method: .get)
            #expect(list.zones.map { $0["zoneID"]?["zoneName"]?.stringValue } == ["_defaultZone", "Drives", "Lists"])

            let lookup = try await client.send(
                "zones/lookup", as: .user(world.alice), body: #"{"zones":[{"zoneName":"Drives"},{"zoneName":"Nope"}]}"#)
            #expect(lookup.zones[0]["zoneID"]?["zoneName"]?.stringValue == "Drives")
            #expect(lookup.zones[1]["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND")

            _ = try await client.modify([operation("create", "r")], zone: "Drives", as: .user(world.alice))
            let deleted = try await client.send(
                "zones/modify", as: .user(world.alice),
                body:
                    #"{"operations":[{"operationType":"delete","zone":{"zoneID":{"zoneName":"Drives"}}},{"operationType":"delete","zone":{"zoneID":{"zoneName":"Nope"}}}]}"#
            )
            #expect(deleted.zones[0]["deleted"] == .bool(true))
            #expect(deleted.zones[1]["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND")
            let gone = try await client.lookup(["r"], zone: "Drives", as: .user(world.alice))
            #expect(gone.status == 404)
            #expect(gone.serverErrorCode == "ZONE_NOT_FOUND")

            // Created again, the zone is empty.
            try await client.createZone("Drives", as: world.alice)
            #expect(try await client.lookup(["r"], zone: "Drives", as: .user(world.alice)).records[0]["serverErrorCode"]?.stringValue == "NOT_FOUND")
        }
    }

    @Test(arguments: TestStore.all) func theDefaultZoneCannotBeCreatedOrDeleted(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let response = try await client.send(
                "zones/modify", as: .user(world.alice),
                body: #"{"operations":[{"operationType":"delete","zone":{"zoneID":{"zoneName":"_defaultZone"}}}]}"#)
            #expect(response.status == 400)
            #expect(response.reason?.contains("operations[0].zone.zoneID.zoneName") == true)
        }
    }

    @Test(arguments: TestStore.all) func customZonesLiveOnlyInThePrivateDatabase(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            for database in ["public", "shared"] {
                let response = try await client.send(
                    "zones/modify", as: .user(world.alice), database: database,
                    body: #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Z"}}}]}"#
                )
                #expect(response.status == 400, "\(database)")
            }
            let shared = try await client.send("zones/list", as: .user(world.alice), database: "shared", method: .get)
            #expect(shared.status == 200)
            #expect(shared.zones.isEmpty)
            let publicZones = try await client.send("zones/list", as: .anonymous, database: "public", method: .get)
            #expect(publicZones.zones.map { $0["zoneID"]?["zoneName"]?.stringValue } == ["_defaultZone"])
        }
    }

    @Test(arguments: TestStore.all) func unknownPathsAndDatabasesAreCloudKitErrors(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            let badDatabase = try await client.send("zones/list", as: .user(world.alice), database: "secret", method: .get)
            #expect(badDatabase.status == 400)
            #expect(badDatabase.reason?.contains("database") == true)
            let badEnvironment = try await client.send("zones/list", as: .user(world.alice), environment: "staging", method: .get)
            #expect(badEnvironment.status == 400)
            let unknown = try await client.send("records/teleport", as: .user(world.alice))
            #expect(unknown.status == 404)
            #expect(unknown.serverErrorCode == "NOT_FOUND")
        }
    }
}
