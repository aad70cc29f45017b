import CumulusModel
import CumulusStore
import Logging
import Testing

/// The behaviour every ``RecordStore`` must have, run against each store implementation.
@Suite("RecordStore conformance", .timeLimit(.minutes(10)))
struct RecordStoreConformanceTests {
    let logger = Logger(label: "test")
    static let container = "iCloud.com.example.store"
    let alice = DatabaseRef(container: container, environment: .development, scope: .private, ownerRecordName: "_alice")
    let bob = DatabaseRef(container: container, environment: .development, scope: .private, ownerRecordName: "_bob")

    private func prepared(_ factory: StoreFactory) async throws -> any RecordStore {
        let store = try await factory.make()
        try await store.createContainer(Self.container, createdAt: 0, logger: logger)
        return store
    }

    private func batch(
        _ database: DatabaseRef, zone: String = "Z", atomic: Bool = true, _ operations: [RecordModification], at time: Int64 = 1000
    ) -> RecordBatch {
        RecordBatch(
            database: database, zoneName: zone, atomic: atomic, operations: operations, author: database.ownerRecordName, deviceID: "d",
            timestamp: time)
    }

    private func createZone(_ store: any RecordStore, _ database: DatabaseRef, _ name: String = "Z") async throws {
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: name))], in: database, timestamp: 0, logger: logger)
    }

    /// Receipts are marked attached in the transaction that saves their records, and only for records it saved: an
    /// atomic batch that fails attaches nothing, so no crash between the two can leave a saved record whose file the
    /// cleanup would take, or a refused one whose receipt looks held.
    @Test(arguments: StoreFactory.all)
    func assetsAreAttachedInTheTransactionThatSavesTheirRecords(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        try await createZone(store, alice)
        let uploads = ["r1", "r2", "r3"].map {
            AssetUpload(receipt: $0, database: alice, zoneName: "Z", recordName: nil, fieldName: "photo", uploader: "_alice", createdAt: 1)
        }
        try await store.createAssetUploads(uploads, logger: logger)
        func attachment(_ receipt: String, _ record: String) -> AssetAttachment {
            AssetAttachment(receipt: receipt, zoneName: "Z", recordName: record, fieldName: "photo")
        }
        func attached() async throws -> [String: Bool] {
            Dictionary(
                uniqueKeysWithValues: try await store.assetUploads(receipts: ["r1", "r2", "r3"], logger: logger).map { ($0.receipt, $0.attached) })
        }
        // An atomic batch that fails (an update of a record that does not exist) saves nothing and attaches nothing.
        var failing = batch(
            alice,
            [
                RecordModification(operationType: .create, recordName: "a", recordType: "Photo"),
                RecordModification(operationType: .update, recordName: "missing", recordType: "Photo", recordChangeTag: "1"),
            ])
        failing.assetAttachments = ["a": [attachment("r1", "a")]]
        _ = try await store.modifyRecords(failing, logger: logger)
        #expect(try await attached() == ["r1": false, "r2": false, "r3": false])
        // A saved record's receipts are attached with it; a refused one's are not (a non-atomic batch).
        var mixed = batch(
            alice, atomic: false,
            [
                RecordModification(operationType: .create, recordName: "b", recordType: "Photo"),
                RecordModification(operationType: .update, recordName: "missing", recordType: "Photo", recordChangeTag: "1"),
            ])
        mixed.assetAttachments = ["b": [attachment("r2", "b")], "missing": [attachment("r3", "missing")]]
        let results = try await store.modifyRecords(mixed, logger: logger)
        guard case .saved = results.first else {
            Issue.record("\(factory.name): b was not saved: \(results)")
            return
        }
        #expect(try await attached() == ["r1": false, "r2": true, "r3": false], "\(factory.name)")
        #expect(try await store.assetUploads(receipts: ["r2"], logger: logger).first?.recordName == "b")
    }

    /// Every store refuses the same queries with the same words: the rules are ``QueryPlan``'s, not each compiler's
    /// (they once refused different things, and PostgreSQL answered one of them with a 500).
    @Test(arguments: StoreFactory.all)
    func everyStoreRefusesTheSameQueriesWithTheSameWords(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        try await createZone(store, alice)
        let here = Location(latitude: 51.5, longitude: -0.12)
        let refused: [(QueryFilter, String)] = [
            (
                QueryFilter(comparator: .equals, field: .system(.recordName), value: .int64(5)),
                "query.filterBy[0].fieldValue: a INT64 value cannot be compared with recordName"
            ),
            (
                QueryFilter(comparator: .lessThan, field: .system(.createdTimestamp), value: .string("yesterday")),
                "query.filterBy[0].fieldValue: a STRING value cannot be compared with createdTimestamp"
            ),
            (
                QueryFilter(comparator: .equals, field: .field("place"), value: .location(here)),
                "query.filterBy[0].fieldValue: EQUALS needs a single STRING, INT64, DOUBLE, TIMESTAMP, BYTES or REFERENCE value"
            ),
            (QueryFilter(comparator: .in, field: .field("n"), value: .int64(1)), "query.filterBy[0].fieldValue: IN needs a list value"),
            (
                QueryFilter(comparator: .in, field: .field("n"), value: .list(.location, [.location(here)])),
                "query.filterBy[0].fieldValue: IN cannot compare LOCATION values"
            ),
            (
                QueryFilter(comparator: .beginsWith, field: .field("title"), value: .int64(1)),
                "query.filterBy[0].fieldValue: BEGINS_WITH needs a STRING value"
            ),
            (
                QueryFilter(comparator: .listContains, field: .system(.recordName), value: .string("x")),
                "query.filterBy[0].systemFieldName: LIST_CONTAINS applies to list fields"
            ),
            (
                QueryFilter(comparator: .near, field: .field("place"), value: .string("x")),
                "query.filterBy[0].fieldValue: NEAR needs a LOCATION value"
            ),
            (
                QueryFilter(comparator: .near, field: .field("place"), value: .location(here), distance: -1),
                "query.filterBy[0].distance: NEAR needs a distance in metres"
            ),
            (
                QueryFilter(comparator: .containsAllTokens, field: .field("title"), value: .string("a b")),
                "query.filterBy[0].comparator: CONTAINS_ALL_TOKENS (full-text search) is not supported yet"
            ),
        ]
        for (filter, reason) in refused {
            let query = RecordQuery(database: alice, zoneName: "Z", recordType: "Note", filters: [filter], sorts: [], limit: 10)
            do {
                _ = try await store.queryRecords(query, logger: logger)
                Issue.record("\(factory.name) ran \(filter)")
            } catch let refusal as QueryPlan.Refusal {
                #expect(refusal.description == reason, "\(factory.name)")
            } catch {
                Issue.record("\(factory.name) refused \(filter) with \(error), not the plan's refusal")
            }
        }
        // What the plan accepts, every store runs.
        let accepted = [
            QueryFilter(comparator: .equals, field: .system(.recordName), value: .reference(Reference(recordName: "a"))),
            QueryFilter(comparator: .greaterThan, field: .system(.modifiedTimestamp), value: .timestamp(0)),
            QueryFilter(comparator: .in, field: .system(.recordName), value: .list(.string, [.string("a")])),
        ]
        for filter in accepted {
            let query = RecordQuery(database: alice, zoneName: "Z", recordType: "Note", filters: [filter], sorts: [], limit: 10)
            #expect(try await store.queryRecords(query, logger: logger).records.isEmpty, "\(factory.name): \(filter)")
        }
    }

    @Test(arguments: StoreFactory.all)
    func pushTokensAreSavedReboundAndTrimmedToTheNewest(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        func token(_ value: String, user: String?, at time: Int64) -> StoredPushToken {
            StoredPushToken(token: value, container: Self.container, environment: .development, userRecordName: user, createdAt: time)
        }
        for (index, value) in ["t1", "t2", "t3", "t4"].enumerated() {
            try await store.savePushToken(token(value, user: "_alice", at: Int64(index)), logger: logger)
        }
        try await store.savePushToken(token("b1", user: "_bob", at: 0), logger: logger)
        // Saving again replaces the user, the positions and the time it was bound.
        var rebound = token("t1", user: "_alice", at: 10)
        rebound.positions = Array(#"{"p":{}}"#.utf8)
        try await store.savePushToken(rebound, logger: logger)
        #expect(try await store.pushToken("t1", logger: logger) == rebound)

        // Alice keeps her two most recently bound tokens; Bob's are not hers to lose.
        let trimmed = try await store.trimPushTokens(of: "_alice", container: Self.container, environment: .development, keeping: 2, logger: logger)
        #expect(trimmed == 2)
        for (value, kept) in [("t1", true), ("t4", true), ("t2", false), ("t3", false), ("b1", true)] {
            #expect((try await store.pushToken(value, logger: logger) != nil) == kept, "\(value)")
        }
        #expect(try await store.trimPushTokens(of: "_alice", container: Self.container, environment: .development, keeping: 2, logger: logger) == 0)
    }

    /// A push token's look reads in one go what the separate reads answer: its user's subscriptions by database, the
    /// zones of the databases that have some (a database never written has its default zone at 0), and nothing for a
    /// token bound to nobody or a token that is not stored.
    @Test(arguments: StoreFactory.all)
    func aPushTokensFeedsAreWhatTheSeparateReadsAnswer(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        let publicDatabase = DatabaseRef.publicDatabase(container: Self.container, environment: .development)
        try await store.savePushToken(
            StoredPushToken(token: "alice", container: Self.container, environment: .development, userRecordName: "_alice", createdAt: 0),
            logger: logger)
        try await store.savePushToken(
            StoredPushToken(token: "nobody", container: Self.container, environment: .development, userRecordName: nil, createdAt: 0),
            logger: logger)
        #expect(try await store.pushTokenFeeds("missing", logger: logger) == nil)
        let anonymous = try #require(try await store.pushTokenFeeds("nobody", logger: logger))
        #expect(anonymous.token == (try await store.pushToken("nobody", logger: logger)) && anonymous.subscriptions.isEmpty)
        #expect(try await store.pushTokenFeeds("alice", logger: logger)?.subscriptions.isEmpty == true)

        func subscribe(_ scope: DatabaseScope, _ ids: [String]) async throws {
            let owner = SubscriptionOwner(container: Self.container, environment: .development, scope: scope, userRecordName: "_alice")
            let saving = ids.enumerated().map { StoredSubscription(subscriptionID: $1, json: Array("{}".utf8), createdAt: Int64(10 - $0)) }
            try await store.modifySubscriptions(of: owner, saving: saving, deleting: [], logger: logger)
        }
        func expectSeparateReads(_ sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let feeds = try #require(try await store.pushTokenFeeds("alice", logger: logger), sourceLocation: sourceLocation)
            #expect(feeds.token == (try await store.pushToken("alice", logger: logger)), sourceLocation: sourceLocation)
            for scope in [DatabaseScope.private, .shared, .public] {
                let owner = SubscriptionOwner(container: Self.container, environment: .development, scope: scope, userRecordName: "_alice")
                let separate = try await store.subscriptions(of: owner, ids: nil, logger: logger)
                #expect(feeds.subscriptions[scope] ?? [] == separate, "\(factory.name) \(scope)", sourceLocation: sourceLocation)
            }
            #expect(
                feeds.privateZones == (feeds.subscriptions[.private] == nil ? [] : try await store.zones(in: alice, logger: logger)),
                "\(factory.name)", sourceLocation: sourceLocation)
            #expect(
                feeds.publicZones == (feeds.subscriptions[.public] == nil ? [] : try await store.zones(in: publicDatabase, logger: logger)),
                "\(factory.name)", sourceLocation: sourceLocation)
            let shared = try await store.sharedZones(userRecordName: "_alice", container: Self.container, environment: .development, logger: logger)
            #expect(feeds.sharedZones == (feeds.subscriptions[.shared] == nil ? [] : shared), sourceLocation: sourceLocation)
        }

        // Never written: the default zone at 0, as `zones(in:)` says.
        try await subscribe(.private, ["b", "a"])
        try await expectSeparateReads()
        #expect(try await store.pushTokenFeeds("alice", logger: logger)?.privateZones.map(\.changeSequence) == [0])
        // Zones made and written, in `zones(in:)`'s order; the public database once subscribed.
        _ = try await store.modifyZones(
            [
                ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Zeta")),
                ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "Alpha")),
            ],
            in: alice, timestamp: 0, logger: logger)
        _ = try await store.modifyRecords(
            batch(alice, zone: "Alpha", [RecordModification(operationType: .create, recordName: "n", recordType: "Note")]), logger: logger)
        try await subscribe(.public, ["p"])
        try await subscribe(.shared, ["s"])
        try await expectSeparateReads()
        #expect(try await store.pushTokenFeeds("alice", logger: logger)?.privateZones.count == 3)
        // A deleted zone is gone from both.
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .delete, zoneID: ZoneID(zoneName: "Zeta"))], in: alice, timestamp: 0, logger: logger)
        try await expectSeparateReads()
    }

    /// A look that advances a token is given what `pushTokenFeeds` reads and stores the positions it answers, and only
    /// those: nothing when it answers none or throws, and it changes nothing else of the token.
    @Test(arguments: StoreFactory.all)
    func aLookThatAdvancesATokenSeesItsFeedsAndStoresOnlyItsPositions(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        let token = StoredPushToken(
            token: "alice", container: Self.container, environment: .development, userRecordName: "_alice", positions: Array("{}".utf8),
            createdAt: 7)
        try await store.savePushToken(token, logger: logger)
        let owner = SubscriptionOwner(container: Self.container, environment: .development, scope: .private, userRecordName: "_alice")
        try await store.modifySubscriptions(
            of: owner, saving: [StoredSubscription(subscriptionID: "all", json: Array("{}".utf8), createdAt: 1)], deleting: [], logger: logger)
        let expected = try await store.pushTokenFeeds("alice", logger: logger)

        // No such token: the look is told so, and nothing is stored.
        let missing = try await store.advancePushToken("missing", logger: logger) { feeds in (Array(#"{"n":1}"#.utf8), feeds == nil) }
        let stored = try await store.pushToken("missing", logger: logger)
        #expect(missing && stored == nil, "\(factory.name)")
        // The feeds as read alone; positions answered are stored, and nothing else of the token changes.
        let seen = try await store.advancePushToken("alice", logger: logger) { feeds in (Array(#"{"n":1}"#.utf8), feeds) }
        #expect(seen == expected, "\(factory.name)")
        var advanced = token
        advanced.positions = Array(#"{"n":1}"#.utf8)
        #expect(try await store.pushToken("alice", logger: logger) == advanced, "\(factory.name)")
        // No positions answered, or the look failing: the token stays as it was.
        _ = try await store.advancePushToken("alice", logger: logger) { _ in (nil, 0) }
        struct LookFailed: Error {}
        await #expect(throws: (any Error).self) {
            _ = try await store.advancePushToken("alice", logger: logger) { _ -> (positions: [UInt8]?, result: Int) in throw LookFailed() }
        }
        #expect(try await store.pushToken("alice", logger: logger) == advanced, "\(factory.name)")
    }

    /// Field indexes are a budget: container A's development queries fill the store's, yet container B's fields declared
    /// in production, and A's own, get their indexes; a container under its fair share takes a place from the one over
    /// it; an operator lists and drops them.
    @Test(arguments: StoreFactory.all)
    func productionIndexesAlwaysAndDevelopmentIndexesByFairShare(_ factory: StoreFactory) async throws {
        let store = try await factory.makeLimited(4)
        let logger = self.logger
        func database(_ container: String, _ environment: ContainerEnvironment) -> DatabaseRef {
            DatabaseRef(container: container, environment: environment, scope: .private, ownerRecordName: "_owner")
        }
        /// A container environment whose schema marks `fields` queryable, with a record holding each, queried once on each.
        func demand(_ container: String, _ environment: ContainerEnvironment, _ fields: [String]) async throws {
            let database = database(container, environment)
            try? await store.createContainer(container, createdAt: 0, logger: logger)
            _ = try await store.extendSchema(
                ContainerSchema(recordTypes: [
                    RecordTypeSchema(
                        name: "Note",
                        fields: fields.map { FieldSchema(name: $0, type: SchemaFieldType(.string), isQueryable: true, isSortable: true) })
                ]), container: container, environment: environment, logger: logger)
            try? await createZone(store, database)
            let record = RecordModification(
                operationType: .forceReplace, recordName: "r-\(fields.joined())", recordType: "Note",
                fields: Dictionary(uniqueKeysWithValues: fields.map { ($0, FieldValue.string("x")) }))
            _ = try await store.modifyRecords(batch(database, [record]), logger: logger)
            for field in fields {
                _ = try await store.queryRecords(
                    RecordQuery(
                        database: database, zoneName: "Z", recordType: "Note",
                        filters: [QueryFilter(comparator: .equals, field: .field(field), value: .string("x"))], sorts: [], limit: 10,
                        indexesRequired: environment == .production),
                    logger: logger)
            }
        }
        func indexed() async throws -> [String: FieldIndexState] {
            Dictionary(uniqueKeysWithValues: try await store.fieldIndexes(logger: logger).compactMap { state in state.field.map { ($0, state) } })
        }
        // Container A asks for six fields in development: four get indexes, the store's budget.
        try await demand("iCloud.a", .development, ["a1", "a2", "a3", "a4", "a5", "a6"])
        #expect(try await Set(indexed().keys) == ["a1", "a2", "a3", "a4"])
        // B's production fields get theirs past it, and so do A's own.
        try await demand("iCloud.b", .production, ["title"])
        try await demand("iCloud.a", .production, ["p1"])
        var states = try await indexed()
        #expect(Set(states.keys) == ["a1", "a2", "a3", "a4", "title", "p1"])
        #expect(states["title"]?.productionContainers == ["iCloud.b"])
        #expect(states["a1"]?.developmentContainers == ["iCloud.a"])
        // C, under its fair share (two of four), takes places from A, over its share; A's production index stays.
        try await demand("iCloud.c", .development, ["c1", "c2", "c3"])
        states = try await indexed()
        #expect(Set(states.keys).isSuperset(of: ["c1", "c2", "title", "p1"]), "\(states.keys.sorted())")
        #expect(!states.keys.contains("c3"), "C stops at its share")
        #expect(states.keys.filter { $0.hasPrefix("a") }.count == 2, "\(states.keys.sorted())")
        // A at its share takes nothing back.
        try await demand("iCloud.a", .development, ["a5"])
        #expect(try await indexed().keys.filter { $0.hasPrefix("a") }.count == 2)
        // An operator drops one; a field with no index is no drop.
        #expect(try await store.dropFieldIndex(field: "title", logger: logger))
        #expect(try await !store.dropFieldIndex(field: "title", logger: logger))
        #expect(try await indexed()["title"] == nil)
    }

    @Test(arguments: StoreFactory.all)
    func aSignatureIsUsedOnceUntilItExpires(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        let first: [UInt8] = Array(repeating: 1, count: 32)
        let second: [UInt8] = Array(repeating: 2, count: 32)
        #expect(try await store.useSignature(digest: first, expiresAt: 1_000, now: 0, logger: logger))
        #expect(try await store.useSignature(digest: first, expiresAt: 1_000, now: 10, logger: logger) == false)
        #expect(try await store.useSignature(digest: second, expiresAt: 1_000, now: 10, logger: logger))
        #expect(try await store.useSignature(digest: first, expiresAt: 2_000, now: 1_000, logger: logger) == false)
        // Once its window has passed, a use is forgotten (the date check refuses such a request before this).
        #expect(try await store.useSignature(digest: first, expiresAt: 3_000, now: 1_001, logger: logger))
    }

    @Test(arguments: StoreFactory.all)
    func attemptsAreCountedPerKeyAndWindow(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        #expect(try await store.countAttempts(keys: ["account:a", "address:1"], windowStart: 60, forgetBefore: 0, logger: logger) == [1, 1])
        #expect(try await store.countAttempts(keys: ["account:b", "address:1"], windowStart: 60, forgetBefore: 0, logger: logger) == [1, 2])
        #expect(try await store.countAttempts(keys: ["address:1", "account:a"], windowStart: 60, forgetBefore: 0, logger: logger) == [3, 2])
        // A new window counts from one; forgotten windows are gone.
        #expect(try await store.countAttempts(keys: ["address:1"], windowStart: 120, forgetBefore: 120, logger: logger) == [1])
        #expect(try await store.countAttempts(keys: ["account:a"], windowStart: 60, forgetBefore: 0, logger: logger) == [1])
    }

    @Test(arguments: StoreFactory.all)
    func administrationListsAndChangesCredentialsOfOneContainer(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        try await store.createContainer("iCloud.com.example.another", createdAt: 7, logger: logger)
        #expect(
            try await store.listContainers(logger: logger) == [
                StoredContainer(id: "iCloud.com.example.another", createdAt: 7), StoredContainer(id: Self.container, createdAt: 0),
            ])

        let tokens = [
            StoredAPIToken(tokenHash: [2], container: Self.container, environment: .production, createdAt: 20),
            StoredAPIToken(tokenHash: [1], container: Self.container, environment: .development, createdAt: 10),
            StoredAPIToken(tokenHash: [3], container: "iCloud.com.example.another", environment: .development, createdAt: 5),
        ]
        for token in tokens { try await store.saveAPIToken(token, logger: logger) }
        try await store.revokeAPIToken(hash: [2], logger: logger)
        var revoked = tokens[0]
        revoked.revoked = true
        #expect(try await store.listAPITokens(container: Self.container, logger: logger) == [tokens[1], revoked])

        let bob = UserAccount(userRecordName: "_b", container: Self.container, name: "bob", email: "b@example.com", passwordHash: "old", createdAt: 2)
        let alice = UserAccount(userRecordName: "_a", container: Self.container, name: "Alice", email: "a@example.com", createdAt: 1)
        let elsewhere = UserAccount(userRecordName: "_c", container: "iCloud.com.example.another", name: "carol", createdAt: 1)
        for user in [bob, alice, elsewhere] { try await store.createUser(user, logger: logger) }
        #expect(try await store.listUsers(container: Self.container, logger: logger).map(\.userRecordName) == ["_a", "_b"])

        // A new password signs the user out; a new email alone does not.
        try await store.saveWebAuthToken(StoredWebAuthToken(tokenHash: [8], userRecordName: "_b", createdAt: 1, expiresAt: 99), logger: logger)
        try await store.updateUser(userRecordName: "_b", email: "bob@example.com", passwordHash: "old", signOut: false, logger: logger)
        #expect(try await store.webAuthToken(hash: [8], logger: logger) != nil)
        try await store.updateUser(userRecordName: "_b", email: "bob@example.com", passwordHash: "new", signOut: true, logger: logger)
        #expect(try await store.webAuthToken(hash: [8], logger: logger) == nil)
        let updated = try await store.user(userRecordName: "_b", logger: logger)
        #expect(updated?.email == "bob@example.com" && updated?.passwordHash == "new")
        let taken = await #expect(throws: StoreError.self) {
            try await store.updateUser(userRecordName: "_b", email: "A@example.com", passwordHash: "new", signOut: false, logger: logger)
        }
        #expect(taken?.code == .duplicate)
        #expect(try await store.user(userRecordName: "_b", logger: logger)?.email == "bob@example.com", "nothing half-written")
        let missing = await #expect(throws: StoreError.self) {
            try await store.updateUser(userRecordName: "_nobody", email: nil, passwordHash: nil, signOut: true, logger: logger)
        }
        #expect(missing?.code == .notFound)

        let keys = [
            StoredServerKey(keyID: "k1", container: Self.container, environment: .development, publicKeyPEM: "pem1", createdAt: 1),
            StoredServerKey(keyID: "k2", container: Self.container, environment: .production, publicKeyPEM: "pem2", createdAt: 2),
            StoredServerKey(keyID: "k3", container: "iCloud.com.example.another", environment: .development, publicKeyPEM: "pem3", createdAt: 1),
        ]
        for key in keys { try await store.saveServerKey(key, logger: logger) }
        try await store.revokeServerKey(id: "k1", logger: logger)
        #expect(
            try await store.listServerKeys(container: Self.container, logger: logger).map { "\($0.keyID) \($0.revoked)" } == ["k1 true", "k2 false"])
        let noKey = await #expect(throws: StoreError.self) { try await store.revokeServerKey(id: "k9", logger: logger) }
        #expect(noKey?.code == .notFound)
    }

    @Test(arguments: StoreFactory.all)
    func containersAndCredentials(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        await #expect(throws: StoreError.self) { try await store.createContainer(Self.container, createdAt: 0, logger: logger) }
        #expect(try await store.containerExists(Self.container, logger: logger))
        #expect(try await !store.containerExists("other", logger: logger))

        let token = StoredAPIToken(tokenHash: [1, 2, 3], container: Self.container, environment: .production, createdAt: 5)
        try await store.saveAPIToken(token, logger: logger)
        #expect(try await store.apiToken(hash: [1, 2, 3], logger: logger) == token)
        try await store.revokeAPIToken(hash: [1, 2, 3], logger: logger)
        #expect(try await store.apiToken(hash: [1, 2, 3], logger: logger)?.revoked == true)
        #expect(try await store.apiToken(hash: [9], logger: logger) == nil)

        let user = UserAccount(
            userRecordName: "_u1", container: Self.container, name: "Alice", email: "a@example.com", passwordHash: "h", createdAt: 1)
        try await store.createUser(user, logger: logger)
        #expect(try await store.user(container: Self.container, name: "alice", logger: logger) == user)
        #expect(try await store.user(userRecordName: "_u1", logger: logger) == user)
        let duplicate = UserAccount(userRecordName: "_u2", container: Self.container, name: "ALICE", createdAt: 1)
        let error = await #expect(throws: StoreError.self) { try await store.createUser(duplicate, logger: logger) }
        #expect(error?.code == .duplicate)
        let orphan = UserAccount(userRecordName: "_u3", container: "nowhere", name: "Bob", createdAt: 1)
        let noContainer = await #expect(throws: StoreError.self) { try await store.createUser(orphan, logger: logger) }
        #expect(noContainer?.code == .notFound)
        try await store.setDiscoverable(userRecordName: "_u1", true, logger: logger)
        let discovered = try await store.users(container: Self.container, emails: ["A@EXAMPLE.COM"], userRecordNames: [], logger: logger)
        #expect(discovered.map(\.userRecordName) == ["_u1"] && discovered.first?.discoverable == true)

        try await store.saveWebAuthToken(StoredWebAuthToken(tokenHash: [7], userRecordName: "_u1", createdAt: 1, expiresAt: 99), logger: logger)
        let found = try await store.webAuthToken(hash: [7], logger: logger)
        #expect(found?.0.expiresAt == 99)
        #expect(found?.1.userRecordName == user.userRecordName && found?.1.discoverable == true)
        try await store.deleteWebAuthToken(hash: [7], logger: logger)
        #expect(try await store.webAuthToken(hash: [7], logger: logger) == nil)

        let key = StoredServerKey(keyID: "k", container: Self.container, environment: .development, publicKeyPEM: "pem", createdAt: 3)
        try await store.saveServerKey(key, logger: logger)
        #expect(try await store.serverKey(id: "k", logger: logger) == key)

        // Instances asking for the token secret at the same moment all get the first writer's.
        let secrets = try await withThrowingTaskGroup(of: [UInt8].self) { group in
            for _ in 0..<6 { group.addTask { try await store.serverSecret(logger: logger) } }
            return try await group.reduce(into: Set<[UInt8]>()) { $0.insert($1) }
        }
        #expect(secrets.count == 1 && secrets.first?.count == 32)
    }

    @Test(arguments: StoreFactory.all)
    func subscriptionsAreKeptPerUserAndDatabase(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        let owner = SubscriptionOwner(container: Self.container, environment: .development, scope: .private, userRecordName: "_alice")
        var shared = owner
        shared.scope = .shared
        let first = StoredSubscription(subscriptionID: "a", json: Array(#"{"subscriptionID":"a"}"#.utf8), createdAt: 1)
        let second = StoredSubscription(subscriptionID: "b", json: Array(#"{"subscriptionID":"b"}"#.utf8), createdAt: 2)
        try await store.modifySubscriptions(of: owner, saving: [second, first], deleting: [], logger: logger)
        try await store.modifySubscriptions(of: shared, saving: [first], deleting: [], logger: logger)
        #expect(try await store.subscriptions(of: owner, ids: nil, logger: logger) == [first, second], "oldest first")
        #expect(try await store.subscriptions(of: owner, ids: ["b", "zz"], logger: logger) == [second])

        // Saving again replaces the dictionary and keeps the creation time; deleting takes only the owner's.
        var changed = first
        changed.json = Array(#"{"subscriptionID":"a","firesOnce":true}"#.utf8)
        changed.createdAt = 9
        try await store.modifySubscriptions(of: owner, saving: [changed], deleting: ["b"], logger: logger)
        let after = try await store.subscriptions(of: owner, ids: nil, logger: logger)
        #expect(after.map(\.subscriptionID) == ["a"] && after.first?.json == changed.json && after.first?.createdAt == 1)
        #expect(try await store.subscriptions(of: shared, ids: nil, logger: logger) == [first])
        var bob = owner
        bob.userRecordName = "_bob"
        #expect(try await store.subscriptions(of: bob, ids: nil, logger: logger).isEmpty)
    }

    @Test(arguments: StoreFactory.all)
    func zonesAreCreatedListedAndDeletedPerDatabase(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        #expect(try await store.zones(in: alice, logger: logger).map(\.zoneID.zoneName) == ["_defaultZone"])
        let created = try await store.modifyZones(
            [
                ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "B")),
                ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "A")),
            ],
            in: alice, timestamp: 0, logger: logger
        )
        #expect(created.count == 2)
        // Creating an existing zone succeeds and returns it.
        let again = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "A"))], in: alice, timestamp: 0, logger: logger)
        guard case .saved(let zone) = again.first else { Issue.record("expected saved"); return }
        #expect(zone.zoneID == ZoneID(zoneName: "A", ownerRecordName: "_alice"))
        #expect(try await store.zones(in: alice, logger: logger).map(\.zoneID.zoneName) == ["_defaultZone", "A", "B"])
        #expect(try await store.zones(in: bob, logger: logger).map(\.zoneID.zoneName) == ["_defaultZone"])
        #expect(try await store.zones(named: ["A", "C"], in: alice, logger: logger).keys.sorted() == ["A"])

        let deleted = try await store.modifyZones(
            [
                ZoneOperation(operationType: .delete, zoneID: ZoneID(zoneName: "A")),
                ZoneOperation(operationType: .delete, zoneID: ZoneID(zoneName: "C")),
            ],
            in: alice, timestamp: 0, logger: logger
        )
        #expect(deleted.first == .deleted(ZoneID(zoneName: "A", ownerRecordName: "_alice")))
        guard case .failed(_, .zoneNotFound, _) = deleted.last else { Issue.record("expected ZONE_NOT_FOUND"); return }
        #expect(try await store.zones(in: alice, logger: logger).map(\.zoneID.zoneName) == ["_defaultZone", "B"])
    }

    @Test(arguments: StoreFactory.all)
    func recordsAreSavedReadAndIsolatedPerDatabase(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        try await createZone(store, alice)
        let results = try await store.modifyRecords(
            batch(alice, [RecordModification(operationType: .create, recordName: "r1", recordType: "Note", fields: ["title": .string("Hi")])]),
            logger: logger
        )
        guard case .saved(let saved) = results.first else { Issue.record("expected saved"); return }
        #expect(saved.header.recordChangeTag == "1")
        #expect(saved.header.created == RecordStamp(timestamp: 1000, userRecordName: "_alice", deviceID: "d"))

        let read = try await store.records(named: ["r1", "r2"], zoneName: "Z", in: alice, access: nil, logger: logger)
        #expect(read.keys.sorted() == ["r1"])
        #expect(try read["r1"]?.fields() == ["title": .string("Hi")])
        #expect(read["r1"] == saved)

        // Bob has no zone Z: nothing of Alice's is visible to him.
        let error = await #expect(throws: StoreError.self) {
            try await store.records(named: ["r1"], zoneName: "Z", in: bob, access: nil, logger: logger)
        }
        #expect(error?.code == .zoneNotFound)
        #expect(try await store.records(named: ["r1"], zoneName: "_defaultZone", in: bob, access: nil, logger: logger).isEmpty)
    }

    @Test(arguments: StoreFactory.all)
    func changeTagsGuardUpdatesAndSequencesAdvance(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        try await createZone(store, alice)
        _ = try await store.modifyRecords(
            batch(alice, [RecordModification(operationType: .create, recordName: "r", recordType: "T", fields: ["a": .int64(1), "b": .int64(2)])]),
            logger: logger)
        let stale = try await store.modifyRecords(
            batch(alice, [RecordModification(operationType: .update, recordName: "r", recordChangeTag: "0", fields: ["a": .int64(9)])]),
            logger: logger
        )
        guard case .failed(let failure) = stale.first else { Issue.record("expected CONFLICT"); return }
        #expect(failure.code == .conflict)
        #expect(failure.serverRecord?.header.recordChangeTag == "1")

        let merged = try await store.modifyRecords(
            batch(
                alice, [RecordModification(operationType: .update, recordName: "r", recordChangeTag: "1", fields: ["a": .int64(9), "b": nil])],
                at: 2000),
            logger: logger
        )
        guard case .saved(let record) = merged.first else { Issue.record("expected saved"); return }
        #expect(try record.fields() == ["a": .int64(9)])
        #expect(record.header.recordChangeTag == "2")
        #expect(record.header.created.timestamp == 1000)
        #expect(record.header.modified.timestamp == 2000)
        let zone = try await store.zones(named: ["Z"], in: alice, logger: logger)["Z"]
        #expect(zone?.changeSequence == 2)
    }

    @Test(arguments: StoreFactory.all)
    func atomicBatchesWriteNothingOnFailure(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        try await createZone(store, alice)
        _ = try await store.modifyRecords(
            batch(alice, [RecordModification(operationType: .create, recordName: "exists", recordType: "T")]), logger: logger)
        let results = try await store.modifyRecords(
            batch(
                alice,
                [
                    RecordModification(operationType: .create, recordName: "new", recordType: "T"),
                    RecordModification(operationType: .create, recordName: "exists", recordType: "T"),
                ]),
            logger: logger
        )
        #expect(results.map(\.errorCode) == [.atomicError, .exists])
        #expect(try await store.records(named: ["new"], zoneName: "Z", in: alice, access: nil, logger: logger).isEmpty)
        #expect(try await store.zones(named: ["Z"], in: alice, logger: logger)["Z"]?.changeSequence == 1)

        let partial = try await store.modifyRecords(
            batch(
                alice, atomic: false,
                [
                    RecordModification(operationType: .create, recordName: "new", recordType: "T"),
                    RecordModification(operationType: .create, recordName: "exists", recordType: "T"),
                ]),
            logger: logger
        )
        #expect(partial.map(\.errorCode) == [nil, .exists])
        #expect(try await store.records(named: ["new"], zoneName: "Z", in: alice, access: nil, logger: logger).keys.sorted() == ["new"])
    }

    @Test(arguments: StoreFactory.all)
    func deleteSelfReferencesCascade(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        try await createZone(store, alice)
        let owner = Reference(recordName: "list", action: .deleteSelf)
        _ = try await store.modifyRecords(
            batch(
                alice,
                [
                    RecordModification(operationType: .create, recordName: "list", recordType: "List"),
                    RecordModification(operationType: .create, recordName: "item", recordType: "Item", fields: ["list": .reference(owner)]),
                    RecordModification(
                        operationType: .create, recordName: "note", recordType: "Note",
                        fields: ["items": .list(.reference, [.reference(Reference(recordName: "item", action: .deleteSelf))])]
                    ),
                    RecordModification(
                        operationType: .create, recordName: "other", recordType: "Item", fields: ["list": .reference(Reference(recordName: "list"))]),
                ]),
            logger: logger
        )
        let deleted = try await store.modifyRecords(
            batch(alice, [RecordModification(operationType: .forceDelete, recordName: "list")]), logger: logger)
        #expect(deleted == [.deleted(recordName: "list")])
        let left = try await store.records(named: ["list", "item", "note", "other"], zoneName: "Z", in: alice, access: nil, logger: logger)
        #expect(left.keys.sorted() == ["other"])
        // Four creates and three deletions.
        #expect(try await store.zones(named: ["Z"], in: alice, logger: logger)["Z"]?.changeSequence == 7)
    }

    @Test(arguments: StoreFactory.all)
    func deletedZoneTakesItsRecordsAndIsNewWhenRecreated(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        try await createZone(store, alice)
        _ = try await store.modifyRecords(
            batch(alice, [RecordModification(operationType: .create, recordName: "r", recordType: "T")]), logger: logger)
        let before = try await store.zones(named: ["Z"], in: alice, logger: logger)["Z"]
        _ = try await store.modifyZones(
            [ZoneOperation(operationType: .delete, zoneID: ZoneID(zoneName: "Z"))], in: alice, timestamp: 0, logger: logger)
        let error = await #expect(throws: StoreError.self) {
            try await store.modifyRecords(
                batch(alice, [RecordModification(operationType: .create, recordName: "r2", recordType: "T")]), logger: logger)
        }
        #expect(error?.code == .zoneNotFound)
        try await createZone(store, alice)
        let after = try await store.zones(named: ["Z"], in: alice, logger: logger)["Z"]
        #expect(after?.incarnation != before?.incarnation)
        #expect(try await store.records(named: ["r"], zoneName: "Z", in: alice, access: nil, logger: logger).isEmpty)
    }

    @Test(arguments: StoreFactory.all)
    func schemasGrowKeepTheirTypesAndStayPerEnvironment(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        #expect(try await store.schema(container: Self.container, environment: .development, logger: logger) == ContainerSchema())
        let first = ContainerSchema(recordTypes: [
            RecordTypeSchema(
                name: "Note",
                fields: [
                    FieldSchema(name: "title", type: SchemaFieldType(.string)),
                    FieldSchema(name: "tags", type: SchemaFieldType(.string, isList: true)),
                ]),
            RecordTypeSchema(name: "Empty"),
        ])
        #expect(try await store.extendSchema(first, container: Self.container, environment: .development, logger: logger) == first)
        // Another type for a field already there changes nothing; index flags switch on and never off.
        let second = ContainerSchema(recordTypes: [
            RecordTypeSchema(name: "Note", fields: [FieldSchema(name: "title", type: SchemaFieldType(.int64), isQueryable: true)])
        ])
        let after = try await store.extendSchema(second, container: Self.container, environment: .development, logger: logger)
        #expect(after.field("title", of: "Note") == FieldSchema(name: "title", type: SchemaFieldType(.string), isQueryable: true))
        let third = ContainerSchema(recordTypes: [
            RecordTypeSchema(name: "Note", fields: [FieldSchema(name: "title", type: SchemaFieldType(.string))])
        ])
        #expect(try await store.extendSchema(third, container: Self.container, environment: .development, logger: logger) == after)
        #expect(try await store.schema(container: Self.container, environment: .development, logger: logger) == after)
        #expect(try await store.schema(container: Self.container, environment: .production, logger: logger) == ContainerSchema())
    }

    /// A database holds at most `maximumZones` live zones, its default zone among them. Creating a zone that exists is
    /// not a new one, a zone deleted earlier in the batch frees its place, and transactions creating zones at once
    /// cannot both take the last place.
    @Test(arguments: StoreFactory.all)
    func zonesPerDatabaseStayWithinTheLimit(_ factory: StoreFactory) async throws {
        let store = try await prepared(factory)
        @Sendable func modify(_ operations: [(ZoneOperation.OperationType, String)]) async throws -> [ZoneModificationResult] {
            try await store.modifyZones(
                operations.map { ZoneOperation(operationType: $0.0, zoneID: ZoneID(zoneName: $0.1)) }, in: alice, timestamp: 0, maximumZones: 3,
                logger: logger)
        }
        func refused(_ result: ZoneModificationResult) -> Bool {
            if case .failed(_, .quotaExceeded, let reason) = result { return reason.contains("3 zones") }
            return false
        }
        func saved(_ result: ZoneModificationResult) -> Bool {
            if case .saved = result { return true }
            return false
        }
        // The default zone and two more.
        let first = try await modify([(.create, "A"), (.create, "B"), (.create, "C"), (.create, "A")])
        #expect(saved(first[0]) && saved(first[1]))
        #expect(refused(first[2]))
        #expect(saved(first[3]), "creating a zone that exists is not a new one")
        let second = try await modify([(.delete, "A"), (.create, "C"), (.create, "D")])
        #expect(saved(second[1]))
        #expect(refused(second[2]))
        #expect(Set(try await store.zones(in: alice, logger: logger).map(\.zoneID.zoneName)) == ["_defaultZone", "B", "C"])
        // Another database has its own count.
        let bobs = try await store.modifyZones(
            [ZoneOperation(operationType: .create, zoneID: ZoneID(zoneName: "A"))], in: bob, timestamp: 0, maximumZones: 3, logger: logger)
        #expect(saved(bobs[0]))

        // One place left, eight transactions at once each creating a zone of its own: one takes it.
        _ = try await modify([(.delete, "C")])
        let racing = try await withThrowingTaskGroup(of: [ZoneModificationResult].self) { group in
            for index in 0..<8 { group.addTask { try await modify([(.create, "race\(index)")]) } }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(racing.filter(saved).count == 1)
        #expect(racing.filter(refused).count == 7)
        #expect(try await store.zones(in: alice, logger: logger).count == 3)
    }
}

extension RecordModificationResult {
    var errorCode: ServerErrorCode? {
        if case .failed(let failure) = self { return failure.code }
        return nil
    }
}
