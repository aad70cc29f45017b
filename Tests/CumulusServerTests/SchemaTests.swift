import Crypto
import CumulusClient
import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import CumulusSyncGRDB
import Foundation
import GhostCarExample
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import Testing

/// Schemas that fail loudly: development grows from writes with fixed types; production is declared and deployed.
@Suite("Schemas: development, production and deploys", .timeLimit(.minutes(10)))
struct SchemaTests {
    static let schemaFile = """
        DEFINE SCHEMA

            RECORD TYPE Note (
                "___createTime" TIMESTAMP SORTABLE,
                title   STRING QUERYABLE SORTABLE,
                count   INT64,
                tags    LIST<STRING> QUERYABLE,
                GRANT WRITE TO "_creator",
                GRANT READ TO "_world"
            );
        """

    func signer(_ world: TestWorld, environment: ContainerEnvironment) async throws -> AuthenticationTests.Signer {
        var signer = AuthenticationTests.Signer()
        signer.keyID = try await world.accounts.addServerKey(
            container: TestWorld.container, environment: environment, publicKeyPEM: signer.key.publicKey.pemRepresentation,
            logger: Logger(label: "test"))
        return signer
    }

    func schemaRequest(_ action: String, _ body: String, environment: String, signer: AuthenticationTests.Signer, client: CloudKitTestClient)
        async throws -> CloudKitResponse
    {
        let path = "/schema/1/\(TestWorld.container)/\(environment)/\(action)"
        return try await client.raw(path, body: body, headers: try signer.headers(body: body, subpath: path))
    }

    @Test(arguments: TestStore.all)
    func aFieldsTypeIsFixedByItsFirstWriteInDevelopment(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let first = try await client.modify([operation("create", "a", fields: #"{"count":{"value":3}}"#)], as: .user(world.alice))
            #expect(first.records.first?["serverErrorCode"] == nil)
            // Another record, the same field, another type: refused, naming the record type, field and both types.
            let second = try await client.modify(
                [operation("create", "b", fields: #"{"count":{"value":"three"}}"#), operation("create", "c", fields: #"{"count":{"value":4}}"#)],
                as: .user(world.alice), extra: #""atomic":false,"#)
            #expect(second.status == 200)
            #expect(second.records[0]["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            let reason = try #require(second.records[0]["reason"]?.stringValue)
            #expect(reason.contains("'count'") && reason.contains("'Note'") && reason.contains("INT64") && reason.contains("STRING"), "\(reason)")
            #expect(second.records[1]["recordName"]?.stringValue == "c")
            #expect(second.records[1]["serverErrorCode"] == nil)
            // In an atomic batch the refusal fails the others, and nothing is written.
            let atomic = try await client.modify(
                [
                    operation("create", "d", fields: #"{"count":{"value":5}}"#),
                    operation("update", "a", tag: "x", fields: #"{"count":{"value":1.5}}"#),
                ],
                as: .user(world.alice))
            #expect(atomic.records.map { $0["serverErrorCode"]?.stringValue } == ["ATOMIC_ERROR", "BAD_REQUEST"])
            #expect(
                try await client.lookup(["b", "d"], as: .user(world.alice)).records.allSatisfy { $0["serverErrorCode"]?.stringValue == "NOT_FOUND" })
            // An update that leaves the record type to the stored record is checked against that type.
            let untyped = try await client.send(
                "records/modify", as: .user(world.alice),
                body:
                    #"{"zoneID":{"zoneName":"Z"},"operations":[{"operationType":"forceUpdate","record":{"recordName":"a","fields":{"count":{"value":"x"}}}}]}"#
            )
            #expect(untyped.records.first?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            // The schema read back holds the type of the first write.
            let exported = try await client.client.execute(
                uri: "/schema/1/\(TestWorld.container)/development?ckAPIToken=\(client.apiToken)", method: .get, headers: [:], body: nil)
            #expect(exported.status == .ok)
            let text = String(buffer: exported.body)
            #expect(text.contains("RECORD TYPE Note (") && text.contains("count INT64"), "\(text)")
        }
    }

    /// The typed fields of ``untypedValuesAreReadAsTheirFieldsTypeInTheSchema(_:_:)``, as a deploy declares them.
    static let typedSchemaFile = """
        RECORD TYPE Item (
            ratio   DOUBLE,
            whenAt  TIMESTAMP,
            blob    BYTES,
            owner   REFERENCE,
            place   LOCATION,
            ratios  LIST<DOUBLE>,
            whens   LIST<TIMESTAMP>,
            blobs   LIST<BYTES>,
            owners  LIST<REFERENCE>,
            places  LIST<LOCATION>,
            count   INT64
        );
        """

    /// Clients such as MistKit never send `type`: a value is read as its field's type in the schema, in development
    /// once a typed write fixed it and in production once deployed, and refused per item, naming both types, only when
    /// its JSON cannot be read so.
    @Test(arguments: TestStore.all, ["development", "production"])
    func untypedValuesAreReadAsTheirFieldsTypeInTheSchema(_ store: TestStore, _ environment: String) async throws {
        let world = try await TestWorld.make(store: store)
        let identity = Identity.apiTokenAndUser(environment == "production" ? world.productionToken : world.apiToken, world.alice)
        try await world.test { client in
            func modify(_ operations: [String], atomic: Bool = false) async throws -> CloudKitResponse {
                try await client.send(
                    "records/modify", as: identity, environment: environment,
                    body: #"{"zoneID":{"zoneName":"Z"},"atomic":\#(atomic),"operations":[\#(operations.joined(separator: ","))]}"#)
            }
            _ = try await client.send(
                "zones/modify", as: identity, environment: environment,
                body: #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Z"}}}]}"#)
            if environment == "production" {
                let deployed = try await schemaRequest(
                    "deploy", Self.typedSchemaFile, environment: "production", signer: try await signer(world, environment: .production),
                    client: client)
                #expect(deployed.json["deployed"] == .bool(true), "\(deployed.json)")
            } else {
                // Development: a typed write fixes each field's type.
                let typed = try await modify([
                    operation(
                        "create", "typed", type: "Item",
                        fields: #"""
                            {"ratio":{"value":0.5,"type":"DOUBLE"},"whenAt":{"value":1,"type":"TIMESTAMP"},"blob":{"value":"AA==","type":"BYTES"},
                             "owner":{"value":{"recordName":"typed"},"type":"REFERENCE"},"place":{"value":{"latitude":1,"longitude":2},"type":"LOCATION"},
                             "ratios":{"value":[0.5],"type":"DOUBLE_LIST"},"whens":{"value":[1],"type":"TIMESTAMP_LIST"},
                             "blobs":{"value":["AA=="],"type":"BYTES_LIST"},"owners":{"value":[{"recordName":"typed"}],"type":"REFERENCE_LIST"},
                             "places":{"value":[{"latitude":1,"longitude":2}],"type":"LOCATION_LIST"},"count":{"value":1,"type":"INT64"}}
                            """#)
                ])
                #expect(typed.records.first?["serverErrorCode"] == nil, "\(typed.json)")
            }
            // Every shape without `type`: whole numbers into DOUBLE and TIMESTAMP, base64 into BYTES, objects into
            // REFERENCE and LOCATION, arrays into the lists, an empty array, and a whole-number fraction into INT64.
            let untypedFields = #"""
                {"ratio":{"value":1},"whenAt":{"value":1700000000000},"blob":{"value":"aGVsbG8="},
                 "owner":{"value":{"recordName":"untyped"}},"place":{"value":{"latitude":48.8,"longitude":2.3}},
                 "ratios":{"value":[1,2]},"whens":{"value":[1700000000000]},"blobs":{"value":["aGk=","aGVsbG8="]},
                 "owners":{"value":[{"recordName":"untyped"}]},"places":{"value":[]},"count":{"value":2.0}}
                """#
            // Two records of one shape (checked as one) and an update that leaves the record type to the stored record.
            let saved = try await modify([
                operation("create", "untyped", type: "Item", fields: untypedFields),
                operation("create", "untyped2", type: "Item", fields: untypedFields),
            ])
            #expect(saved.records.map { $0["serverErrorCode"]?.stringValue } == [nil, nil], "\(saved.json)")
            let updated = try await modify([
                operation("forceUpdate", "untyped2", type: nil, fields: #"{"ratio":{"value":3},"blob":{"value":"AAEC"}}"#)
            ])
            #expect(updated.records.first?["serverErrorCode"] == nil, "\(updated.json)")

            let expected: [String: String] = [
                "ratio": "DOUBLE", "whenAt": "TIMESTAMP", "blob": "BYTES", "owner": "REFERENCE", "place": "LOCATION", "ratios": "DOUBLE_LIST",
                "whens": "TIMESTAMP_LIST", "blobs": "BYTES_LIST", "owners": "REFERENCE_LIST", "count": "INT64",
            ]
            let read = try await client.send(
                "records/lookup", as: identity, environment: environment,
                body: #"{"zoneID":{"zoneName":"Z"},"records":[{"recordName":"untyped"},{"recordName":"untyped2"}]}"#)
            for record in read.records {
                let fields = try #require(record["fields"], "\(read.json)")
                for (name, type) in expected {
                    #expect(fields[name]?["type"]?.stringValue == type, "\(name): \(fields[name] ?? .null)")
                }
            }
            let first = try #require(read.records.first?["fields"])
            #expect(first["blob"]?["value"]?.stringValue == "aGVsbG8=")
            #expect(first["whenAt"]?["value"] == .number("1700000000000"))
            #expect(first["count"]?["value"] == .number("2"))
            #expect(first["blobs"]?["value"]?.arrayValue?.count == 2)
            #expect(read.records.last?["fields"]?["blob"]?["value"]?.stringValue == "AAEC")
            // The schema was not changed by them: development still holds the typed write's types.
            let schema = try await world.store.schema(
                container: TestWorld.container, environment: ContainerEnvironment(rawValue: environment)!, logger: Logger(label: "t"))
            #expect(schema.field("blob", of: "Item")?.type == SchemaFieldType(.bytes))
            #expect(schema.field("whenAt", of: "Item")?.type == SchemaFieldType(.timestamp))

            // No conversion: refused per item, naming the field and both types; the others in the batch are saved.
            let refusals: [(fields: String, reason: String)] = [
                (#"{"ratio":{"value":"fast"}}"#, "field 'ratio' of record type 'Item' is DOUBLE in the \(environment) schema"),
                (#"{"blob":{"value":"not base64!"}}"#, "field 'blob' of record type 'Item' is BYTES"),
                (#"{"count":{"value":2.5}}"#, "reads as DOUBLE, not as INT64"),
                (#"{"ratios":{"value":["x"]}}"#, "reads as LIST<STRING>, not as LIST<DOUBLE>"),
                (#"{"ratio":{"value":[1]}}"#, "reads as LIST<INT64>, not as DOUBLE"),
                (#"{"owner":{"value":{"latitude":1,"longitude":2}}}"#, "reads as LOCATION, not as REFERENCE"),
            ]
            let batch = try await modify(
                refusals.enumerated().map { operation("create", "bad\($0.offset)", type: "Item", fields: $0.element.fields) }
                    + [operation("create", "good", type: "Item", fields: #"{"ratio":{"value":4}}"#)])
            for (index, refusal) in refusals.enumerated() {
                #expect(batch.records[index]["serverErrorCode"]?.stringValue == "BAD_REQUEST", "\(batch.json)")
                #expect(batch.records[index]["reason"]?.stringValue?.contains(refusal.reason) == true, "\(batch.records[index])")
            }
            #expect(batch.records.last?["serverErrorCode"] == nil, "\(batch.json)")
            // Records of one shape are checked as one, yet each value is read on its own.
            let alike = try await modify([
                operation("create", "s1", type: "Item", fields: #"{"blob":{"value":"aGk="}}"#),
                operation("create", "s2", type: "Item", fields: #"{"blob":{"value":"%%"}}"#),
                operation("create", "s3", type: "Item", fields: #"{"blob":{"value":"aGVsbG8="}}"#),
            ])
            #expect(alike.records.map { $0["serverErrorCode"]?.stringValue } == [nil, "BAD_REQUEST", nil], "\(alike.json)")
            #expect(alike.records[1]["recordName"]?.stringValue == "s2")
            // A typed value of another type is refused as before: `type` is never overridden.
            let typedWrong = try await modify([operation("create", "t", type: "Item", fields: #"{"ratio":{"value":1,"type":"INT64"}}"#)])
            #expect(typedWrong.records.first?["reason"]?.stringValue?.contains("this record sends INT64") == true, "\(typedWrong.json)")
        }
    }

    @Test(arguments: TestStore.all)
    func exportDeployAndProductionRefusesWhatIsNotDeclared(_ store: TestStore) async throws {
        let world = try await TestWorld.make(store: store)
        let development = try await signer(world, environment: .development)
        let production = try await signer(world, environment: .production)
        let asAlice = Identity.apiTokenAndUser(world.productionToken, world.alice)
        try await world.test { client in
            // Development learns the shape from writes and a query; its export is the file to deploy.
            try await client.createZone("Z", as: world.alice)
            _ = try await client.modify(
                [operation("create", "a", fields: #"{"title":{"value":"hi"},"count":{"value":1},"tags":{"value":["x"]}}"#)], as: .user(world.alice))
            let query =
                #"{"zoneID":{"zoneName":"Z"},"query":{"recordType":"Note","filterBy":[{"fieldName":"title","comparator":"EQUALS","fieldValue":{"value":"hi"}}]}}"#
            #expect(try await client.send("records/query", as: .user(world.alice), body: query).records.count == 1)
            let exported = try await world.store.schema(container: TestWorld.container, environment: .development, logger: Logger(label: "t"))
            let text = SchemaLanguage.write(exported)
            #expect(try SchemaLanguage.read(text) == exported)
            #expect(exported.field("title", of: "Note")?.isQueryable == true)
            #expect(exported.field("tags", of: "Note")?.type == SchemaFieldType(.string, isList: true))

            // Before a deploy, production knows nothing: writes and queries are refused by name.
            _ = try await client.send(
                "zones/modify", as: asAlice, environment: "production",
                body: #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Z"}}}]}"#)
            let early = try await client.send(
                "records/modify", as: asAlice, environment: "production",
                body: #"{"zoneID":{"zoneName":"Z"},"operations":[\#(operation("create", "p", fields: #"{"title":{"value":"hi"}}"#))]}"#)
            #expect(early.records.first?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
            #expect(early.records.first?["reason"]?.stringValue?.contains("record type 'Note' is not in the production schema") == true)

            // A diff tells what a deploy adds; the API token alone may not deploy.
            let diff = try await schemaRequest("diff", Self.schemaFile, environment: "production", signer: production, client: client)
            #expect(diff.status == 200)
            #expect(diff.json["additions"]?.arrayValue?.count == 4)
            #expect(diff.json["deployed"] == .bool(false))
            let byToken = try await client.raw(
                "/schema/1/\(TestWorld.container)/production/deploy?ckAPIToken=\(world.productionToken)", body: Self.schemaFile)
            #expect(byToken.status == 403)
            #expect(byToken.serverErrorCode == "ACCESS_DENIED")
            // A development key does not deploy to production.
            let wrongKey = try await client.raw(
                "/schema/1/\(TestWorld.container)/production/deploy", body: Self.schemaFile,
                headers: try development.headers(body: Self.schemaFile, subpath: "/schema/1/\(TestWorld.container)/production/deploy"))
            #expect(wrongKey.status == 401)
            let deployed = try await schemaRequest("deploy", Self.schemaFile, environment: "production", signer: production, client: client)
            #expect(deployed.status == 200)
            #expect(deployed.json["deployed"] == .bool(true))

            // The declared shape is accepted.
            let ok = try await client.send(
                "records/modify", as: asAlice, environment: "production",
                body:
                    #"{"zoneID":{"zoneName":"Z"},"operations":[\#(operation("create", "p", fields: #"{"title":{"value":"hi"},"count":{"value":2}}"#))]}"#
            )
            #expect(ok.records.first?["serverErrorCode"] == nil, "\(ok.json)")
            // Each kind of undeclared write is refused with its name.
            let refusedWrites = [
                (operation("create", "q", type: "Photo", fields: "{}"), "record type 'Photo' is not in the production schema"),
                (
                    operation("create", "r", fields: #"{"colour":{"value":"red"}}"#),
                    "field 'colour' of record type 'Note' is not in the production schema"
                ),
                (
                    operation("create", "s", fields: #"{"count":{"value":"two"}}"#),
                    "field 'count' of record type 'Note' is INT64 in the production schema"
                ),
            ]
            for (write, reason) in refusedWrites {
                let answer = try await client.send(
                    "records/modify", as: asAlice, environment: "production", body: #"{"zoneID":{"zoneName":"Z"},"operations":[\#(write)]}"#)
                #expect(answer.records.first?["serverErrorCode"]?.stringValue == "BAD_REQUEST")
                #expect(answer.records.first?["reason"]?.stringValue?.contains(reason) == true, "\(answer.json)")
            }
            // In one batch, records shaped alike are judged alike, each refusal under its own record's name, and a
            // record shaped otherwise between them is judged on its own.
            let fine = #"{"title":{"value":"in a batch"}}"#
            let colour = #"{"colour":{"value":"red"}}"#
            let batch = [
                operation("create", "b1", fields: colour), operation("create", "b2", fields: colour), operation("create", "b3", fields: fine),
                operation("create", "b4", fields: fine), operation("create", "b5", fields: colour),
            ]
            let mixed = try await client.send(
                "records/modify", as: asAlice, environment: "production",
                body: #"{"zoneID":{"zoneName":"Z"},"atomic":false,"operations":[\#(batch.joined(separator: ","))]}"#)
            #expect(mixed.records.map { $0["recordName"]?.stringValue } == ["b1", "b2", "b3", "b4", "b5"], "\(mixed.json)")
            #expect(mixed.records.map { $0["serverErrorCode"]?.stringValue } == ["BAD_REQUEST", "BAD_REQUEST", nil, nil, "BAD_REQUEST"])
            #expect(mixed.records[1]["reason"]?.stringValue?.contains("field 'colour' of record type 'Note'") == true, "\(mixed.json)")
            // Queries: a queryable field works; others are BAD_REQUEST naming the field.
            #expect(try await client.send("records/query", as: asAlice, environment: "production", body: query).records.count == 1)
            let refusedQueries = [
                (
                    #"{"query":{"recordType":"Note","filterBy":[{"fieldName":"count","comparator":"EQUALS","fieldValue":{"value":2}}]}}"#,
                    "query.filterBy[0].fieldName: field 'count'"
                ),
                (
                    #"{"query":{"recordType":"Note","sortBy":[{"fieldName":"tags"}]}}"#,
                    "query.sortBy[0].fieldName: field 'tags' of record type 'Note' is not marked SORTABLE"
                ),
                (#"{"query":{"recordType":"Photo"}}"#, "query.recordType: record type 'Photo'"),
            ]
            for (body, reason) in refusedQueries {
                let answer = try await client.send("records/query", as: asAlice, environment: "production", body: body)
                #expect(answer.status == 400)
                #expect(answer.serverErrorCode == "BAD_REQUEST")
                #expect(answer.reason?.contains(reason) == true, "\(answer.json)")
            }

            // A deploy that changes a type, or leaves out a field, is refused with every offending change.
            let changed = """
                RECORD TYPE Note (
                    title STRING QUERYABLE SORTABLE,
                    count DOUBLE
                );
                """
            let refused = try await schemaRequest("deploy", changed, environment: "production", signer: production, client: client)
            #expect(refused.status == 400)
            #expect(refused.serverErrorCode == "BAD_REQUEST")
            #expect(refused.reason?.contains("field Note.count: type INT64 cannot change to DOUBLE") == true, "\(refused.json)")
            #expect(refused.reason?.contains("field Note.tags: missing from the new schema") == true)
            let after = try await world.store.schema(container: TestWorld.container, environment: .production, logger: Logger(label: "t"))
            #expect(after.field("count", of: "Note")?.type == SchemaFieldType(.int64))
            // A file that cannot be read names its line.
            let broken = try await schemaRequest(
                "deploy", "RECORD TYPE Note (\n title TEXT\n);", environment: "production", signer: production, client: client)
            #expect(broken.status == 400)
            #expect(broken.reason?.contains("line 2") == true)
        }
    }

    @Test func developmentIndexesStopAtTheContainersLimit() async throws {
        let world = try await TestWorld.make(limits: Limits(maximumIndexedFieldsPerContainer: 1))
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            _ = try await client.modify([operation("create", "a", fields: #"{"title":{"value":"hi"},"count":{"value":1}}"#)], as: .user(world.alice))
            func query(_ field: String) -> String {
                #"{"zoneID":{"zoneName":"Z"},"query":{"recordType":"Note","filterBy":[{"fieldName":"\#(field)","comparator":"EQUALS","fieldValue":{"value":1}}]}}"#
            }
            #expect(try await client.send("records/query", as: .user(world.alice), body: query("count")).status == 200)
            let refused = try await client.send("records/query", as: .user(world.alice), body: query("title"))
            #expect(refused.status == 400)
            #expect(refused.reason?.contains("query.filterBy[0].fieldName: field 'title'") == true, "\(refused.json)")
            #expect(refused.reason?.contains("1 indexed fields") == true)
            // The indexed field goes on working, and a field no record holds is answered (with nothing), not indexed.
            #expect(try await client.send("records/query", as: .user(world.alice), body: query("count")).records.count == 1)
            #expect(try await client.send("records/query", as: .user(world.alice), body: query("nothing")).records.isEmpty)
        }
    }

    @Test func theClientFetchesTheSchemaAndTheLinterComparesItBeforeAnythingIsSent() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            try await client.createZone("Drives", as: world.alice)
            // Another app version wrote `distance` as a STRING.
            _ = try await client.modify(
                [operation("create", "d", type: "Drive", fields: #"{"distance":{"value":"12 km"}}"#)], zone: "Drives", as: .user(world.alice))
        }
        try await SyncEngineTests.live(world) { container in
            let schema = try await container(world.alice).fetchSchema()
            #expect(schema.field("distance", of: "Drive")?.type == SchemaFieldType(.string))
            let problems = ModelLinter.compare([GhostCar.drivesTable()], with: schema)
            #expect(problems.map(\.column) == ["distance"])
            #expect(problems.first?.rule == .serverSchema)
        }
    }

    @Test func madeUpFieldNamesStopAtTheSchemaLimit() async throws {
        let world = try await TestWorld.make(limits: Limits(maximumSchemaSize: 3))
        try await world.test { client in
            try await client.createZone("Z", as: world.alice)
            let first = try await client.modify([operation("create", "a", fields: #"{"x":{"value":1},"y":{"value":2}}"#)], as: .user(world.alice))
            #expect(first.records.first?["serverErrorCode"] == nil)
            let more = try await client.modify(
                [operation("create", "b", fields: #"{"z":{"value":1}}"#), operation("create", "c", fields: #"{"x":{"value":3}}"#)],
                as: .user(world.alice), extra: #""atomic":false,"#)
            #expect(more.records.map { $0["serverErrorCode"]?.stringValue } == ["QUOTA_EXCEEDED", nil])
            #expect(more.records.first?["reason"]?.stringValue?.contains("development schema holds 3 record types and fields") == true)
            let schema = try await world.store.schema(container: TestWorld.container, environment: .development, logger: Logger(label: "t"))
            #expect(schema.field("z", of: "Note") == nil)
        }
    }
}
