public import CumulusModel
public import CumulusStore
public import Logging

/// What a container's administrator sees in the web console: every listing scoped to the session's container, the
/// store's errors mapped to the domain's, as every other route has them.
///
/// Edits go through ``DatabaseService/modifyRecords(caller:scope:request:logger:)`` as the record's author (see
/// ``author(of:in:logger:)``), so the console writes under the same rules as `records/modify`.
public struct ConsoleService: Sendable {
    let store: any RecordStore
    let clock: WallClock

    public init(store: any RecordStore, clock: WallClock = .system) {
        self.store = store
        self.clock = clock
    }

    /// The container's users.
    public func users(container: String, logger: Logger) async throws -> [UserAccount] {
        try await mapStoreErrors { try await store.listUsers(container: container, logger: logger) }
    }

    /// A user of the container; `NOT_FOUND` for a user of another container, as for none.
    public func user(_ userRecordName: String, container: String, logger: Logger) async throws -> UserAccount {
        guard let user = try await mapStoreErrors({ try await store.user(userRecordName: userRecordName, logger: logger) }),
            user.container == container
        else { throw CumulusError(.notFound, "user: no such user in \(container)") }
        return user
    }

    /// The environment's API tokens (by hash) and server-to-server keys.
    public func credentials(container: String, environment: ContainerEnvironment, logger: Logger) async throws
        -> (apiTokens: [StoredAPIToken], serverKeys: [StoredServerKey])
    {
        try await mapStoreErrors {
            let tokens = try await store.listAPITokens(container: container, logger: logger).filter { $0.environment == environment }
            let keys = try await store.listServerKeys(container: container, logger: logger).filter { $0.environment == environment }
            return (tokens, keys)
        }
    }

    /// The environment's live share-a-copy links, at most `limit`.
    public func links(container: String, environment: ContainerEnvironment, limit: Int, logger: Logger) async throws -> [LinkSnapshot] {
        try await mapStoreErrors {
            try await store.listLinkSnapshots(container: container, environment: environment, now: clock.milliseconds(), limit: limit, logger: logger)
        }
    }

    /// The database a console path names: the public database, or the private database of a user of the container.
    /// The shared database is a view of other databases and has no page of its own.
    public func database(scope: DatabaseScope, owner: String, container: String, environment: ContainerEnvironment, logger: Logger)
        async throws -> DatabaseRef
    {
        switch scope {
        case .public:
            return .publicDatabase(container: container, environment: environment)
        case .private:
            do {
                _ = try await user(owner, container: container, logger: logger)
            } catch let error as CumulusError where error.code == .notFound {
                throw CumulusError(.notFound, "owner: no such user in \(container)")
            }
            return DatabaseRef(container: container, environment: environment, scope: .private, ownerRecordName: owner)
        case .shared:
            throw CumulusError(.notFound, "database: must be public or private")
        }
    }

    /// A user's devices: when each was last seen and how far behind its private database it is.
    public func devices(of userRecordName: String, container: String, logger: Logger) async throws -> [DeviceState] {
        try await mapStoreErrors { try await store.devices(container: container, userRecordName: userRecordName, logger: logger) }
    }

    /// The devices of a container's users whose last verification found differences, the latest first (at most 100).
    public func devicesOutOfSync(container: String, environment: ContainerEnvironment, logger: Logger) async throws -> [DeviceOutOfSync] {
        try await mapStoreErrors { try await store.devicesOutOfSync(container: container, environment: environment, limit: 100, logger: logger) }
    }

    /// A database's zones.
    public func zones(in database: DatabaseRef, logger: Logger) async throws -> [ZoneState] {
        try await mapStoreErrors { try await store.zones(in: database, logger: logger) }
    }

    /// A user's subscriptions in each database, private, shared and public.
    public func subscriptions(of userRecordName: String, container: String, environment: ContainerEnvironment, logger: Logger) async throws
        -> [(scope: DatabaseScope, subscription: StoredSubscription)]
    {
        var found: [(scope: DatabaseScope, subscription: StoredSubscription)] = []
        for scope in [DatabaseScope.private, .shared, .public] {
            let owner = SubscriptionOwner(container: container, environment: environment, scope: scope, userRecordName: userRecordName)
            for subscription in try await mapStoreErrors({ try await store.subscriptions(of: owner, ids: nil, logger: logger) }) {
                found.append((scope, subscription))
            }
        }
        return found
    }

    /// A page of a zone's records in the order of their last change, after the position `after`.
    public func records(in zoneName: String, of database: DatabaseRef, after: Int64, limit: Int, logger: Logger) async throws -> ZoneChangePage {
        try await mapStoreErrors {
            try await store.zoneChanges(
                ZoneChangeRequest(database: database, zoneName: zoneName, incarnation: nil, after: after, limit: limit), logger: logger)
        }
    }

    /// One record, or `nil`.
    public func record(_ recordName: String, in zoneName: String, of database: DatabaseRef, logger: Logger) async throws -> StoredRecord? {
        try await mapStoreErrors {
            try await store.records(named: [recordName], zoneName: zoneName, in: database, access: nil, logger: logger)[recordName]
        }
    }

    /// The share a `cloudkit.share` record is, with its participants.
    public func share(_ recordName: String, in zoneName: String, of database: DatabaseRef, logger: Logger) async throws -> ShareState? {
        try await mapStoreErrors { try await store.shares(named: [recordName], zoneName: zoneName, in: database, logger: logger).first }
    }

    /// The names of users of a container, by user record name, in one read: who wrote the records a page lists.
    public func userNames(_ userRecordNames: Set<String>, container: String, logger: Logger) async throws -> [String: String] {
        guard !userRecordNames.isEmpty else { return [:] }
        let users = try await mapStoreErrors {
            try await store.users(container: container, emails: [], userRecordNames: Array(userRecordNames), logger: logger)
        }
        return Dictionary(users.map { ($0.userRecordName, $0.name) }, uniquingKeysWith: { first, _ in first })
    }

    /// Whom the console writes a record as: the database's owner, or in the public database the record's creator.
    /// `ACCESS_DENIED` when that user no longer exists.
    public func author(of record: StoredRecord, in database: DatabaseRef, logger: Logger) async throws -> UserAccount {
        let name = database.scope == .public ? record.header.created.userRecordName : database.ownerRecordName
        guard let author = try await mapStoreErrors({ try await store.user(userRecordName: name, logger: logger) }) else {
            throw CumulusError(
                .accessDenied, "record \(record.header.recordName): its author \(name) no longer exists; it cannot be changed here")
        }
        return author
    }
}
