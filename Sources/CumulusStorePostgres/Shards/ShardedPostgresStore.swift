public import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO
import Synchronization

/// A store over several PostgreSQL databases, users spread over them by owner.
///
/// Every user's data (their databases, zones, records, the shares they own and the views participants have of them,
/// their history and asset receipts) lives in one database, chosen through a fixed number of *logical shards*: a
/// user's shard is a hash of their user record name, and a map in the directory says which database holds each shard.
/// A shared zone stays with its owner. The *directory* (database 0, `--database`) holds what is not anyone's data:
/// containers, accounts, tokens and keys, links, subscriptions, push tokens and devices, and the map. Each database is
/// a ``PostgresRecordStore`` of its own, so every statement is the same as on one database; this type only routes.
///
/// A participant's shared database gathers zones from the databases their owners live in: its feed reads every
/// database and keeps one position per database (``SharedDatabasePosition``).
///
/// A logical shard moves to another database with the instances running (``moveShard(_:to:logger:)``): its rows are
/// copied while its writers wait on a lock in the database it leaves, and an instance that goes to the old database
/// after the move reads the map again and follows (``ShardFence``).
///
/// ```swift
/// // Both clients running (they are services).
/// let store = try await ShardedPostgresStore.prepare(
///     directory: PostgresRecordStore(client: directoryClient), others: [PostgresRecordStore(client: shardClient)], logger: logger)
/// ```
public final class ShardedPostgresStore: RecordStore, ChangeBroadcasting, CommandAnnouncing {
    /// Database 0: the directory, and the shards mapped to it.
    public let directory: PostgresRecordStore
    /// Every database by number, the directory's included.
    public let databases: [Int: PostgresRecordStore]
    /// How many logical shards there are; fixed when the directory was first prepared.
    public let logicalShards: Int
    /// Which database holds each logical shard, as last read from the directory.
    let map: Mutex<[Int]>
    /// How long an operation waits, in all, for a shard that is moving before it is answered "try again later".
    let moveWait: Duration

    /// - Parameters:
    ///   - directory: Database 0.
    ///   - others: The other databases, by their numbers (``ShardLayout/numbers``).
    ///   - layout: The map and the number of logical shards, from ``ShardLayout/prepare(directory:others:logicalShards:logger:)``.
    ///   - moveWait: How long an operation waits for a moving shard (its writers wait on the move's lock meanwhile).
    public init(directory: PostgresRecordStore, others: [Int: PostgresRecordStore], layout: ShardLayout, moveWait: Duration = .seconds(10)) {
        self.directory = directory
        var databases = others
        databases[0] = directory
        self.databases = databases
        self.logicalShards = layout.logicalShards
        self.map = Mutex(layout.map)
        self.moveWait = moveWait
    }

    // MARK: - Routing

    /// A user's logical shard: FNV-1a (64 bits) of their user record name's UTF-8, modulo the number of shards. Fixed
    /// forever: changing it would move every user.
    public static func shard(of owner: String, logicalShards: Int) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in owner.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return Int(hash % UInt64(logicalShards))
    }

    public func shard(of owner: String) -> Int { Self.shard(of: owner, logicalShards: logicalShards) }

    /// The database that holds `shard`, as the map last read says.
    public func databaseNumber(holding shard: Int) -> Int { map.withLock { $0[shard] } }

    /// Runs `body` on the database that holds `owner`'s shard, with the shard fenced (``ShardFence``): if the shard
    /// left that database, the map is read again and `body` runs where the shard is now.
    func withOwner<T: Sendable>(_ owner: String, logger: Logger, _ body: @escaping @Sendable (PostgresRecordStore) async throws -> T) async throws
        -> T
    {
        let shard = shard(of: owner)
        let deadline = ContinuousClock.now + moveWait
        while true {
            let number = databaseNumber(holding: shard)
            guard let store = databases[number] else {
                throw StoreError(.misconfigured, "logical shard \(shard) is in database \(number), which this instance was not given (--shard)")
            }
            do {
                return try await ShardFence.$shard.withValue(shard) { try await body(store) }
            } catch let error as ShardNotHere {
                // Moving: the map may already name the new database, or will once the move ends.
                guard ContinuousClock.now < deadline else {
                    throw StoreError(.unavailable, "logical shard \(shard) is moving between databases; try again", underlying: error)
                }
                if try await reloadMap(logger: logger)[shard] == number { try await Task.sleep(for: .milliseconds(20)) }
            }
        }
    }

    /// Reads the map from the directory.
    @discardableResult
    func reloadMap(logger: Logger) async throws -> [Int] {
        guard let fresh = try await ShardLayout.map(from: directory.query(ShardLayout.mapQuery, logger: logger), logicalShards: logicalShards) else {
            throw StoreError(.corrupt, "the shard map in the directory is incomplete")
        }
        map.withLock { $0 = fresh }
        return fresh
    }

    /// Every database in number order: the directory first.
    var ordered: [(number: Int, store: PostgresRecordStore)] {
        databases.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// `body` on every database at once; answers in number order.
    func everyDatabase<T: Sendable>(_ body: @escaping @Sendable (PostgresRecordStore) async throws -> T) async throws -> [(number: Int, value: T)] {
        try await withThrowingTaskGroup(of: (Int, T).self) { group in
            for (number, store) in ordered { group.addTask { (number, try await body(store)) } }
            var answers: [(number: Int, value: T)] = []
            for try await answer in group { answers.append(answer) }
            return answers.sorted { $0.number < $1.number }
        }
    }

    /// The other databases, then the directory: for what every database holds a copy of, the directory's answer last
    /// (and the one returned), so that a failure leaves the directory as it was and the caller may try again.
    func everyDatabaseDirectoryLast<T: Sendable>(_ body: @escaping @Sendable (PostgresRecordStore) async throws -> T) async throws -> T {
        for (number, store) in ordered where number != 0 { _ = try await body(store) }
        return try await body(directory)
    }
}

// MARK: - Containers, accounts, tokens: the directory

extension ShardedPostgresStore {
    public func createContainer(_ container: String, createdAt: Int64, logger: Logger) async throws {
        // Every database holds the containers: their rows are what databases, subscriptions and receipts refer to.
        try await everyDatabaseDirectoryLast { store in
            do {
                try await store.createContainer(container, createdAt: createdAt, logger: logger)
            } catch let error as StoreError {
                guard error.code == .duplicate, store !== self.directory else { throw error }
            }
        }
    }

    public func containerExists(_ container: String, logger: Logger) async throws -> Bool {
        try await directory.containerExists(container, logger: logger)
    }

    public func saveAPIToken(_ token: StoredAPIToken, logger: Logger) async throws { try await directory.saveAPIToken(token, logger: logger) }

    public func apiToken(hash: [UInt8], logger: Logger) async throws -> StoredAPIToken? { try await directory.apiToken(hash: hash, logger: logger) }

    public func revokeAPIToken(hash: [UInt8], logger: Logger) async throws { try await directory.revokeAPIToken(hash: hash, logger: logger) }

    public func saveServerKey(_ key: StoredServerKey, logger: Logger) async throws { try await directory.saveServerKey(key, logger: logger) }

    public func serverKey(id: String, logger: Logger) async throws -> StoredServerKey? { try await directory.serverKey(id: id, logger: logger) }

    public func useSignature(digest: [UInt8], expiresAt: Int64, now: Int64, logger: Logger) async throws -> Bool {
        try await directory.useSignature(digest: digest, expiresAt: expiresAt, now: now, logger: logger)
    }

    public func countAttempts(keys: [String], windowStart: Int64, forgetBefore: Int64, logger: Logger) async throws -> [Int] {
        try await directory.countAttempts(keys: keys, windowStart: windowStart, forgetBefore: forgetBefore, logger: logger)
    }

    public func listContainers(logger: Logger) async throws -> [StoredContainer] { try await directory.listContainers(logger: logger) }

    public func listAPITokens(container: String, logger: Logger) async throws -> [StoredAPIToken] {
        try await directory.listAPITokens(container: container, logger: logger)
    }

    public func listServerKeys(container: String, logger: Logger) async throws -> [StoredServerKey] {
        try await directory.listServerKeys(container: container, logger: logger)
    }

    public func revokeServerKey(id: String, logger: Logger) async throws { try await directory.revokeServerKey(id: id, logger: logger) }

    public func deleteContainer(_ container: String, logger: Logger) async throws {
        try await everyDatabaseDirectoryLast { store in
            do {
                try await store.deleteContainer(container, logger: logger)
            } catch let error as StoreError {
                guard error.code == .notFound, store !== self.directory else { throw error }
            }
        }
    }

    public func serverSecret(logger: Logger) async throws -> [UInt8] { try await directory.serverSecret(logger: logger) }

    public func createUser(_ user: UserAccount, logger: Logger) async throws { try await directory.createUser(user, logger: logger) }

    public func user(container: String, name: String, logger: Logger) async throws -> UserAccount? {
        try await directory.user(container: container, name: name, logger: logger)
    }

    public func user(userRecordName: String, logger: Logger) async throws -> UserAccount? {
        try await directory.user(userRecordName: userRecordName, logger: logger)
    }

    public func saveWebAuthToken(_ token: StoredWebAuthToken, logger: Logger) async throws {
        try await directory.saveWebAuthToken(token, logger: logger)
    }

    public func webAuthToken(hash: [UInt8], logger: Logger) async throws -> (StoredWebAuthToken, UserAccount)? {
        try await directory.webAuthToken(hash: hash, logger: logger)
    }

    public func deleteWebAuthToken(hash: [UInt8], logger: Logger) async throws { try await directory.deleteWebAuthToken(hash: hash, logger: logger) }

    public func users(container: String, emails: [String], userRecordNames: [String], logger: Logger) async throws -> [UserAccount] {
        try await directory.users(container: container, emails: emails, userRecordNames: userRecordNames, logger: logger)
    }

    public func setDiscoverable(userRecordName: String, _ discoverable: Bool, logger: Logger) async throws {
        try await directory.setDiscoverable(userRecordName: userRecordName, discoverable, logger: logger)
    }

    public func listUsers(container: String, logger: Logger) async throws -> [UserAccount] {
        try await directory.listUsers(container: container, logger: logger)
    }

    public func updateUser(userRecordName: String, email: String?, passwordHash: String?, signOut: Bool, logger: Logger) async throws {
        try await directory.updateUser(userRecordName: userRecordName, email: email, passwordHash: passwordHash, signOut: signOut, logger: logger)
    }

    public func saveConsoleCredential(_ credential: ConsoleCredential, now: Int64, logger: Logger) async throws {
        try await directory.saveConsoleCredential(credential, now: now, logger: logger)
    }

    public func takeConsoleCredential(hash: [UInt8], kind: ConsoleCredential.Kind, now: Int64, logger: Logger) async throws -> ConsoleCredential? {
        try await directory.takeConsoleCredential(hash: hash, kind: kind, now: now, logger: logger)
    }

    public func consoleCredential(hash: [UInt8], now: Int64, logger: Logger) async throws -> ConsoleCredential? {
        try await directory.consoleCredential(hash: hash, now: now, logger: logger)
    }

    /// Erases the user from every database: their data where their shard is, their participations and authorship
    /// wherever other owners live, then their account in the directory (last, so that a failure leaves a user to erase
    /// again).
    public func eraseUser(userRecordName: String, attemptKeyPrefixes: [String], timestamp: Int64, logger: Logger) async throws -> UserErasure {
        guard let account = try await directory.user(userRecordName: userRecordName, logger: logger) else {
            throw StoreError(.notFound, "no such user")
        }
        var total = UserErasure()
        for (number, store) in ordered where number != 0 {
            let erased = try await store.eraseUser(
                userRecordName: userRecordName, container: account.container, attemptKeyPrefixes: attemptKeyPrefixes, timestamp: timestamp,
                logger: logger)
            total.add(erased)
        }
        total.add(
            try await directory.eraseUser(
                userRecordName: userRecordName, attemptKeyPrefixes: attemptKeyPrefixes, timestamp: timestamp, logger: logger))
        return total
    }
}

extension UserErasure {
    /// What each database erased, summed.
    mutating func add(_ other: UserErasure) {
        let counts: [WritableKeyPath<UserErasure, Int>] = [
            \.zones, \.records, \.publicRecords, \.sharesStopped, \.participations, \.recordsAnonymized, \.subscriptions, \.pushTokens,
            \.devices, \.webAuthTokens, \.historyVersions, \.assetReceipts,
        ]
        for count in counts { self[keyPath: count] += other[keyPath: count] }
        assetFiles += other.assetFiles
        filesScrubbed = filesScrubbed && other.filesScrubbed
    }
}

// MARK: - Zones and records: the owner's database

extension ShardedPostgresStore {
    public func zones(in database: DatabaseRef, logger: Logger) async throws -> [ZoneState] {
        try await withOwner(database.ownerRecordName, logger: logger) { try await $0.zones(in: database, logger: logger) }
    }

    public func zones(named names: [String], in database: DatabaseRef, logger: Logger) async throws -> [String: ZoneState] {
        try await withOwner(database.ownerRecordName, logger: logger) { try await $0.zones(named: names, in: database, logger: logger) }
    }

    public func modifyZones(
        _ operations: [ZoneOperation], in database: DatabaseRef, timestamp: Int64, maximumZones: Int, logger: Logger
    ) async throws -> [ZoneModificationResult] {
        try await withOwner(database.ownerRecordName, logger: logger) {
            try await $0.modifyZones(operations, in: database, timestamp: timestamp, maximumZones: maximumZones, logger: logger)
        }
    }

    public func records(named names: [String], zoneName: String, in database: DatabaseRef, access: ParticipantAccess?, logger: Logger) async throws
        -> [String: StoredRecord]
    {
        try await withOwner(database.ownerRecordName, logger: logger) {
            try await $0.records(named: names, zoneName: zoneName, in: database, access: access, logger: logger)
        }
    }

    public func modifyRecords(_ batch: RecordBatch, logger: Logger) async throws -> [RecordModificationResult] {
        try await withOwner(batch.database.ownerRecordName, logger: logger) { try await $0.modifyRecords(batch, logger: logger) }
    }

    public func databaseChanges(in database: DatabaseRef, after sequence: Int64, limit: Int, logger: Logger) async throws -> DatabaseChangePage {
        try await withOwner(database.ownerRecordName, logger: logger) {
            try await $0.databaseChanges(in: database, after: sequence, limit: limit, logger: logger)
        }
    }

    public func zoneChanges(_ request: ZoneChangeRequest, logger: Logger) async throws -> ZoneChangePage {
        try await withOwner(request.database.ownerRecordName, logger: logger) { try await $0.zoneChanges(request, logger: logger) }
    }

    public func scanRecords<Scan: RecordSequenceScan>(
        _ scan: Scan, in range: RecordNameRange, zoneName: String, database: DatabaseRef, access: ParticipantAccess?, logger: Logger
    ) async throws -> Scan {
        try await withOwner(database.ownerRecordName, logger: logger) {
            try await $0.scanRecords(scan, in: range, zoneName: zoneName, database: database, access: access, logger: logger)
        }
    }

    public func refreshZoneDigests(unknownOnly: Bool, logger: Logger) async throws -> [ZoneDigestRepair] {
        try await everyDatabase { try await $0.refreshZoneDigests(unknownOnly: unknownOnly, logger: logger) }.flatMap(\.value)
    }

    /// Through the directory, where every instance listens.
    public func announceFromCommand(_ keys: Set<String>, logger: Logger) async {
        await directory.announceFromCommand(keys, logger: logger)
    }

    public func listenForCommands(_ changed: @escaping @Sendable (Set<String>) -> Void) async {}

    /// Every database must write: a user's request writes to the directory and to their own.
    public func probeWrite(at time: Int64, logger: Logger) async throws {
        _ = try await everyDatabase { try await $0.probeWrite(at: time, logger: logger) }
    }

    public func driftedZoneDigests(logger: Logger) async throws -> [ZoneDigestRepair] {
        try await everyDatabase { try await $0.driftedZoneDigests(logger: logger) }.flatMap(\.value)
    }

    public func queryRecords(_ query: RecordQuery, logger: Logger) async throws -> RecordQueryPage {
        try await withOwner(query.database.ownerRecordName, logger: logger) { try await $0.queryRecords(query, logger: logger) }
    }

    public func recordsChanged(
        since time: Int64, zoneName: String, in database: DatabaseRef, after: String?, limit: Int, logger: Logger
    ) async throws -> RecordChangesSincePage {
        try await withOwner(database.ownerRecordName, logger: logger) {
            try await $0.recordsChanged(since: time, zoneName: zoneName, in: database, after: after, limit: limit, logger: logger)
        }
    }

    public func keptVersions(
        zoneName: String, in database: DatabaseRef, after: KeptVersion.Position?, limit: Int, logger: Logger
    ) async throws -> [KeptVersion] {
        try await withOwner(database.ownerRecordName, logger: logger) {
            try await $0.keptVersions(zoneName: zoneName, in: database, after: after, limit: limit, logger: logger)
        }
    }

    public func deletedRecords(
        since: Int64, zoneName: String, in database: DatabaseRef, names: [String]?, limit: Int, logger: Logger
    ) async throws -> [DeletedRecord] {
        try await withOwner(database.ownerRecordName, logger: logger) {
            try await $0.deletedRecords(since: since, zoneName: zoneName, in: database, names: names, limit: limit, logger: logger)
        }
    }

    public func pruneHistory(replacedBefore time: Int64, logger: Logger) async throws -> Int {
        try await everyDatabase { try await $0.pruneHistory(replacedBefore: time, logger: logger) }.reduce(0) { $0 + $1.value }
    }
}

// MARK: - Schemas: the directory's, copied to every database

extension ShardedPostgresStore {
    public func schema(container: String, environment: ContainerEnvironment, logger: Logger) async throws -> ContainerSchema {
        try await directory.schema(container: container, environment: environment, logger: logger)
    }

    /// Every database keeps the schema: its queries decide their field indexes from the fields marked there.
    public func extendSchema(_ additions: ContainerSchema, container: String, environment: ContainerEnvironment, logger: Logger) async throws
        -> ContainerSchema
    {
        try await everyDatabaseDirectoryLast { try await $0.extendSchema(additions, container: container, environment: environment, logger: logger) }
    }

    public func fieldIndexes(logger: Logger) async throws -> [FieldIndexState] {
        var merged: [String: FieldIndexState] = [:]
        for (_, indexes) in try await everyDatabase({ try await $0.fieldIndexes(logger: logger) }) {
            for index in indexes {
                guard var known = merged[index.indexName] else {
                    merged[index.indexName] = index
                    continue
                }
                known.field = known.field ?? index.field
                known.productionContainers.formUnion(index.productionContainers)
                known.developmentContainers.formUnion(index.developmentContainers)
                merged[index.indexName] = known
            }
        }
        return merged.values.sorted { $0.indexName < $1.indexName }
    }

    public func dropFieldIndex(field: String, logger: Logger) async throws -> Bool {
        try await everyDatabase { try await $0.dropFieldIndex(field: field, logger: logger) }.contains { $0.value }
    }
}

// MARK: - Shares: the owner's database; a participant's shared database, every database

extension ShardedPostgresStore {
    public func share(shortGUID: String, logger: Logger) async throws -> ShareState? {
        // A short GUID names no owner: every database is asked (a share is looked up when a link is opened).
        try await everyDatabase { try await $0.share(shortGUID: shortGUID, logger: logger) }.lazy.compactMap(\.value).first
    }

    public func shares(named names: [String], zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState] {
        try await withOwner(database.ownerRecordName, logger: logger) {
            try await $0.shares(named: names, zoneName: zoneName, in: database, logger: logger)
        }
    }

    public func shares(listing userRecordName: String, zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState] {
        try await withOwner(database.ownerRecordName, logger: logger) {
            try await $0.shares(listing: userRecordName, zoneName: zoneName, in: database, logger: logger)
        }
    }

    public func acceptShare(shortGUID: String, userRecordName: String, logger: Logger) async throws -> ShareState {
        guard let share = try await share(shortGUID: shortGUID, logger: logger) else { throw StoreError(.notFound, "no share with that URL") }
        return try await withOwner(share.database.ownerRecordName, logger: logger) {
            try await $0.acceptShare(shortGUID: shortGUID, userRecordName: userRecordName, logger: logger)
        }
    }

    public func sharedZones(userRecordName: String, container: String, environment: ContainerEnvironment, logger: Logger) async throws -> [SharedZone]
    {
        let found = try await everyDatabase {
            try await $0.sharedZones(userRecordName: userRecordName, container: container, environment: environment, logger: logger)
        }
        return Self.sharedZoneOrder(found.flatMap(\.value))
    }

    /// Every database's zones, in `sharedZones`' order (``SharedZone/listedBefore(_:_:)``).
    static func sharedZoneOrder(_ zones: [SharedZone]) -> [SharedZone] {
        var seen = Set<ZoneID>()
        // A zone caught between a move's copy and its end is in two databases for a moment: listed once.
        return zones.filter { seen.insert($0.zoneID).inserted }.sorted(by: SharedZone.listedBefore)
    }

    /// Each database's feed from its own position, in number order, until the page is full: a database that fills it
    /// says more is coming, and those after it keep their positions for the next page.
    public func sharedDatabaseChanges(
        userRecordName: String, container: String, environment: ContainerEnvironment, after start: SharedDatabasePosition, limit: Int, logger: Logger
    ) async throws -> SharedDatabasePage {
        var zones: [SharedZone] = []
        var position = start
        for (number, store) in ordered {
            let remaining = limit - zones.count
            guard remaining > 0 else { return SharedDatabasePage(zones: zones, position: position, moreComing: true) }
            let page = try await store.sharedDatabaseChanges(
                userRecordName: userRecordName, container: container, environment: environment,
                after: SharedDatabasePosition(sequence: start[number]), limit: remaining, logger: logger)
            zones += page.zones
            // A database that holds nothing for the user keeps no entry: a token stays as short as their shares allow.
            if page.position[0] != 0 || position.sequences[number] != nil { position[number] = page.position[0] }
            if page.moreComing { return SharedDatabasePage(zones: zones, position: position, moreComing: true) }
        }
        return SharedDatabasePage(zones: zones, position: position, moreComing: false)
    }
}

// MARK: - Subscriptions, push tokens, devices, links: the directory

extension ShardedPostgresStore {
    public func subscriptions(of owner: SubscriptionOwner, ids: [String]?, logger: Logger) async throws -> [StoredSubscription] {
        try await directory.subscriptions(of: owner, ids: ids, logger: logger)
    }

    public func modifySubscriptions(of owner: SubscriptionOwner, saving: [StoredSubscription], deleting: [String], logger: Logger) async throws {
        try await directory.modifySubscriptions(of: owner, saving: saving, deleting: deleting, logger: logger)
    }

    public func savePushToken(_ token: StoredPushToken, logger: Logger) async throws { try await directory.savePushToken(token, logger: logger) }

    public func pushToken(_ token: String, logger: Logger) async throws -> StoredPushToken? { try await directory.pushToken(token, logger: logger) }

    /// The token and its subscriptions from the directory (one statement); then the zones of the databases subscribed
    /// to, each from where it lives.
    public func pushTokenFeeds(_ token: String, logger: Logger) async throws -> PushTokenFeeds? {
        guard var feeds = try await directory.pushTokenFeeds(token, logger: logger) else { return nil }
        guard let user = feeds.token.userRecordName else { return feeds }
        let (container, environment) = (feeds.token.container, feeds.token.environment)
        if feeds.subscriptions[.private] != nil {
            let database = DatabaseRef(container: container, environment: environment, scope: .private, ownerRecordName: user)
            feeds.privateZones = try await zones(in: database, logger: logger)
        }
        if feeds.subscriptions[.public] != nil {
            feeds.publicZones = try await zones(in: .publicDatabase(container: container, environment: environment), logger: logger)
        }
        if feeds.subscriptions[.shared] != nil {
            feeds.sharedZones = try await sharedZones(userRecordName: user, container: container, environment: environment, logger: logger)
        }
        return feeds
    }

    public func trimPushTokens(of userRecordName: String, container: String, environment: ContainerEnvironment, keeping: Int, logger: Logger)
        async throws -> Int
    {
        try await directory.trimPushTokens(of: userRecordName, container: container, environment: environment, keeping: keeping, logger: logger)
    }

    public func recordDevice(_ sighting: DeviceSighting, logger: Logger) async throws { try await directory.recordDevice(sighting, logger: logger) }

    public func recordVerification(
        _ verification: DeviceVerification, container: String, environment: ContainerEnvironment, userRecordName: String, deviceID: String,
        logger: Logger
    ) async throws {
        try await directory.recordVerification(
            verification, container: container, environment: environment, userRecordName: userRecordName, deviceID: deviceID, logger: logger)
    }

    /// The devices from the directory, without how far behind each is (that lives in each user's own database, and the
    /// list is about verifications).
    public func devicesOutOfSync(container: String, environment: ContainerEnvironment, limit: Int, logger: Logger) async throws
        -> [DeviceOutOfSync]
    {
        try await directory.devicesOutOfSync(container: container, environment: environment, limit: limit, logger: logger).map {
            var device = $0
            device.device.changesBehind = nil
            return device
        }
    }

    /// The devices from the directory; how far behind each is, from the user's private database where it lives.
    public func devices(container: String, userRecordName: String, logger: Logger) async throws -> [DeviceState] {
        var devices = try await directory.devices(container: container, userRecordName: userRecordName, logger: logger)
        var heads: [ContainerEnvironment: Int64] = [:]
        for environment in Set(devices.filter { $0.position != nil }.map(\.environment)) {
            let database = DatabaseRef(container: container, environment: environment, scope: .private, ownerRecordName: userRecordName)
            heads[environment] = try await withOwner(userRecordName, logger: logger) { try await $0.databaseSequence(database, logger: logger) }
        }
        for index in devices.indices {
            devices[index].changesBehind = devices[index].position.map { max(0, (heads[devices[index].environment] ?? 0) - $0) }
        }
        return devices
    }

    public func listLinkSnapshots(container: String, environment: ContainerEnvironment, now: Int64, limit: Int, logger: Logger) async throws
        -> [LinkSnapshot]
    {
        try await directory.listLinkSnapshots(container: container, environment: environment, now: now, limit: limit, logger: logger)
    }

    public func createLinkSnapshots(_ snapshots: [LinkSnapshot], uploader: LinkUploader, quota: LinkQuota, now: Int64, logger: Logger) async throws
        -> LinkQuotaDecision
    {
        try await directory.createLinkSnapshots(snapshots, uploader: uploader, quota: quota, now: now, logger: logger)
    }

    public func linkSnapshot(id: String, now: Int64, logger: Logger) async throws -> LinkSnapshot? {
        try await directory.linkSnapshot(id: id, now: now, logger: logger)
    }

    public func deleteExpiredLinkSnapshots(now: Int64, logger: Logger) async throws -> Int {
        try await directory.deleteExpiredLinkSnapshots(now: now, logger: logger)
    }

    public func announceChange(_ keys: Set<String>) { directory.announceChange(keys) }

    public func listenForChanges(watching: @escaping @Sendable () -> Set<String>, _ changed: @escaping @Sendable (Set<String>?) -> Void) async {
        await directory.listenForChanges(watching: watching, changed)
    }
}

// MARK: - Asset receipts: the database of the zone they are for

extension ShardedPostgresStore {
    public func createAssetUploads(_ uploads: [AssetUpload], logger: Logger) async throws {
        // Attached to records in the records' own transactions, so kept where the zone's owner lives.
        for (owner, group) in Dictionary(grouping: uploads, by: \.database.ownerRecordName).sorted(by: { $0.key < $1.key }) {
            try await withOwner(owner, logger: logger) { try await $0.createAssetUploads(group, logger: logger) }
        }
    }

    public func assetUploads(receipts: [String], logger: Logger) async throws -> [AssetUpload] {
        try await everyDatabase { try await $0.assetUploads(receipts: receipts, logger: logger) }.flatMap(\.value)
    }

    public func completeAssetUpload(receipt: String, fileID: String, size: Int64, checksum: String, logger: Logger) async throws -> Bool {
        try await everyDatabase { try await $0.completeAssetUpload(receipt: receipt, fileID: fileID, size: size, checksum: checksum, logger: logger) }
            .contains { $0.value }
    }

    public func assetUsage(uploader: String, container: String, pendingSince: Int64, logger: Logger) async throws -> AssetUsage {
        let usages = try await everyDatabase {
            try await $0.assetUsage(uploader: uploader, container: container, pendingSince: pendingSince, logger: logger)
        }
        var total = AssetUsage(pendingReceipts: 0, pendingBytes: 0, storedBytes: 0)
        for (_, usage) in usages {
            total.pendingReceipts += usage.pendingReceipts
            total.pendingBytes += usage.pendingBytes
            total.storedBytes += usage.storedBytes
        }
        return total
    }

    public func collectAssetGarbage(unattachedBefore: Int64, detachedBefore: Int64, history: AssetHistoryHold?, logger: Logger) async throws
        -> [String]
    {
        try await everyDatabase {
            try await $0.collectAssetGarbage(unattachedBefore: unattachedBefore, detachedBefore: detachedBefore, history: history, logger: logger)
        }.flatMap(\.value)
    }
}

// MARK: - For operators

extension ShardedPostgresStore {
    /// The map as the directory has it now.
    public func currentMap(logger: Logger) async throws -> [Int] { try await reloadMap(logger: logger) }

    /// Every user record name with an account, in every container.
    public func allUsers(logger: Logger) async throws -> [String] {
        var names: [String] = []
        for try await name in try await directory.query("SELECT user_record_name FROM users", logger: logger).decode(String.self) {
            names.append(name)
        }
        return names
    }
}

extension ShardedPostgresStore {
    /// Prepares the databases behind running stores (``ShardLayout/prepare(directory:others:logicalShards:logger:)``)
    /// and makes the sharded store over them.
    public static func prepare(
        directory: PostgresRecordStore, others: [PostgresRecordStore], logicalShards: Int = ShardLayout.defaultLogicalShards, logger: Logger
    ) async throws -> ShardedPostgresStore {
        let layout = try await ShardLayout.prepare(
            directory: directory.client, others: others.map(\.client), logicalShards: logicalShards, logger: logger)
        return ShardedPostgresStore(directory: directory, others: Dictionary(uniqueKeysWithValues: zip(layout.numbers, others)), layout: layout)
    }
}
