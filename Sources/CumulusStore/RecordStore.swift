public import CumulusModel
public import Logging

/// Durable storage for Cumulus: every storage role at once, as each store implements them.
///
/// The roles are small protocols (``ContainerStore``, ``UserStore``, ``RecordZoneStore``, ``SchemaStore``,
/// ``ShareStore``, ``SubscriptionStore``, ``AssetUploadStore``, ``LinkStore``), so that a service takes only the role it
/// needs. They speak domain types only, so the SQLite and PostgreSQL implementations are interchangeable and pass one
/// conformance suite. Each method is one transaction: a store never leaves a request half-written.
///
/// Record semantics (change tags, merge and replace, atomic batches) are decided by ``RecordBatchPlanner``; a store reads
/// the records a batch needs, plans, and applies the plan with set-based statements in the same transaction.
///
/// ```swift
/// let store = try SQLiteRecordStore(path: "cumulus-data/cumulus.sqlite")
/// try await store.createContainer("iCloud.com.example.app", logger: logger)
/// ```
public protocol RecordStore: ContainerStore, UserStore, RecordZoneStore, SchemaStore, ShareStore, SubscriptionStore, AssetUploadStore,
    LinkStore
{}

/// Containers and the credentials that open them: API tokens, server-to-server keys (and the signatures they made, so
/// none is replayed), sign-in attempts, and the server's secret.
public protocol ContainerStore: Sendable {
    /// Creates a container. Throws ``StoreError/Code/duplicate`` if it exists.
    func createContainer(_ container: String, createdAt: Int64, logger: Logger) async throws

    /// Whether a container exists.
    func containerExists(_ container: String, logger: Logger) async throws -> Bool

    /// Stores a new API token.
    func saveAPIToken(_ token: APITokenRecord, logger: Logger) async throws

    /// The API token with this hash, revoked or not.
    func apiToken(hash: [UInt8], logger: Logger) async throws -> APITokenRecord?

    /// Revokes an API token. Throws ``StoreError/Code/notFound`` if there is none.
    func revokeAPIToken(hash: [UInt8], logger: Logger) async throws

    /// Stores a server-to-server key.
    func saveServerKey(_ key: ServerKeyRecord, logger: Logger) async throws

    /// The server-to-server key with this ID.
    func serverKey(id: String, logger: Logger) async throws -> ServerKeyRecord?

    /// Records one use of a server-to-server signature, identified by `digest`, kept until `expiresAt` (when the
    /// request's date leaves the accepted window). Answers `false` if the signature was used before: a replay. Uses
    /// that expired before `now` are forgotten. Over a shared store, a signature is used once across all instances.
    func useSignature(digest: [UInt8], expiresAt: Int64, now: Int64, logger: Logger) async throws -> Bool

    /// Counts one attempt against each key in the fixed window that starts at `windowStart` and answers each key's count
    /// in that window, this attempt included, in `keys` order. Counts of windows that started before `forgetBefore`
    /// are deleted. Sign-in and sign-up throttles count here, so they hold across instances sharing the store.
    func countAttempts(keys: [String], windowStart: Int64, forgetBefore: Int64, logger: Logger) async throws -> [Int]

    /// Every container, by identifier.
    func listContainers(logger: Logger) async throws -> [ContainerRecord]

    /// A container's API tokens, revoked ones included, oldest first.
    func listAPITokens(container: String, logger: Logger) async throws -> [APITokenRecord]

    /// A container's server-to-server keys, revoked ones included, oldest first.
    func listServerKeys(container: String, logger: Logger) async throws -> [ServerKeyRecord]

    /// Revokes a server-to-server key. Throws ``StoreError/Code/notFound`` if there is none.
    func revokeServerKey(id: String, logger: Logger) async throws

    /// Deletes a container and everything in it (users, credentials, databases, zones, records, shares, subscriptions,
    /// links, schemas), in one transaction. Throws ``StoreError/Code/notFound`` if there is none.
    func deleteContainer(_ container: String, logger: Logger) async throws

    /// A random secret created once per store and kept: it signs change tokens and continuation markers, so they stay
    /// valid across restarts and across servers sharing the store. A store inserts ``ServerSecret/makeCandidate()``
    /// only if no secret exists and returns the stored one: the first writer wins, from any process.
    func serverSecret(logger: Logger) async throws -> [UInt8]
}

/// Users and their sessions: web auth tokens, console sign-in links and console sessions; discovery.
public protocol UserStore: Sendable {
    /// Creates a user. Throws ``StoreError/Code/duplicate`` if the name or email is taken in the container.
    func createUser(_ user: UserAccount, logger: Logger) async throws

    /// The user with this sign-in name (ignoring case) in a container.
    func user(container: String, name: String, logger: Logger) async throws -> UserAccount?

    /// The user with this user record name.
    func user(userRecordName: String, logger: Logger) async throws -> UserAccount?

    /// Stores a new web auth token.
    func saveWebAuthToken(_ token: WebAuthTokenRecord, logger: Logger) async throws

    /// The web auth token with this hash and its user.
    func webAuthToken(hash: [UInt8], logger: Logger) async throws -> (WebAuthTokenRecord, UserAccount)?

    /// Deletes a web auth token (signing out). Does nothing if there is none.
    func deleteWebAuthToken(hash: [UInt8], logger: Logger) async throws

    /// Live users of a container with these emails (ignoring case) or user record names.
    func users(container: String, emails: [String], userRecordNames: [String], logger: Logger) async throws -> [UserAccount]

    /// Sets whether a user can be found by `users/discover`.
    func setDiscoverable(userRecordName: String, _ discoverable: Bool, logger: Logger) async throws

    /// A container's users, by sign-in name.
    func listUsers(container: String, logger: Logger) async throws -> [UserAccount]

    /// Sets a user's email and password hash; with `signOut`, deletes the user's web auth tokens in the same
    /// transaction. Throws ``StoreError/Code/notFound`` for no such user, ``StoreError/Code/duplicate`` for an email
    /// another user of the container has.
    func updateUser(userRecordName: String, email: String?, passwordHash: String?, signOut: Bool, logger: Logger) async throws

    /// Saves a console credential, forgetting expired ones.
    func saveConsoleCredential(_ credential: ConsoleCredential, now: Int64, logger: Logger) async throws

    /// Deletes and answers a console credential of this kind that has not expired: a sign-in token works once.
    func takeConsoleCredential(hash: [UInt8], kind: ConsoleCredential.Kind, now: Int64, logger: Logger) async throws -> ConsoleCredential?

    /// A console credential that has not expired.
    func consoleCredential(hash: [UInt8], now: Int64, logger: Logger) async throws -> ConsoleCredential?

    /// Deletes a user and what is theirs, in one transaction: their private zones go as a zone deletion goes (the
    /// participants' feeds report them deleted), they leave every share they were invited to (each share record takes
    /// a new change tag), and their credentials, subscriptions, push tokens and shared database go. Records they wrote
    /// in the public database or in other users' shared zones stay. Throws ``StoreError/Code/notFound`` for no such
    /// user.
    func deleteUser(userRecordName: String, logger: Logger) async throws
}

/// Zones and their records: writes, lookups, the change feeds and queries.
public protocol RecordZoneStore: Sendable {
    /// All live zones of a database, the default zone first.
    func zones(in database: DatabaseRef, logger: Logger) async throws -> [ZoneState]

    /// The live zones with these names; missing zones are absent from the result.
    func zones(named names: [String], in database: DatabaseRef, logger: Logger) async throws -> [String: ZoneState]

    /// Creates and deletes zones, in order. Creating an existing zone succeeds and returns it; deleting a zone deletes
    /// its records.
    func modifyZones(_ operations: [ZoneOperation], in database: DatabaseRef, timestamp: Int64, logger: Logger) async throws
        -> [ZoneModificationResult]

    /// The live records with these names in a zone. Throws ``StoreError/Code/zoneNotFound`` if the zone does not exist.
    /// With `access`, only records a participant may see are returned.
    func records(named names: [String], zoneName: String, in database: DatabaseRef, access: ParticipantAccess?, logger: Logger) async throws
        -> [String: StoredRecord]

    /// Applies a `records/modify` batch in one transaction. Throws ``StoreError/Code/zoneNotFound`` if the zone does not
    /// exist; per-operation failures are results, not errors.
    func modifyRecords(_ batch: RecordBatch, logger: Logger) async throws -> [RecordModificationResult]

    /// Zones of a database changed or deleted after a position of its change feed.
    func databaseChanges(in database: DatabaseRef, after sequence: Int64, limit: Int, logger: Logger) async throws -> DatabaseChangePage

    /// Records of a zone changed or deleted after a position of its change feed. Throws ``StoreError/Code/zoneNotFound``
    /// if the zone does not exist, and ``StoreError/Code/invalidState`` if it is not the incarnation the position
    /// belongs to (it was deleted and created again).
    func zoneChanges(_ request: ZoneChangeRequest, logger: Logger) async throws -> ZoneChangePage

    /// One page of records matching a query. Throws ``StoreError/Code/zoneNotFound`` if the zone does not exist.
    func queryRecords(_ query: RecordQuery, logger: Logger) async throws -> RecordQueryPage
}

/// Each container environment's schema, and the field indexes queries use.
public protocol SchemaStore: Sendable {
    /// The schema of a container environment: empty until something is written (development) or deployed.
    func schema(container: String, environment: ContainerEnvironment, logger: Logger) async throws -> ContainerSchema

    /// Adds the record types, fields and index flags of `additions` that the schema lacks, and returns the whole schema
    /// after. A field already there keeps its type, whatever `additions` says (a caller compares the answer with what
    /// it sent); index flags only switch on. Atomic, and safe to run from any number of instances at once.
    func extendSchema(_ additions: ContainerSchema, container: String, environment: ContainerEnvironment, logger: Logger) async throws
        -> ContainerSchema

    /// The field indexes queries made, with the schemas that keep them (`cumulus indexes list`).
    func fieldIndexes(logger: Logger) async throws -> [FieldIndexState]

    /// Drops a field's index; `false` when it has none. A later query may make it again, within the budget.
    func dropFieldIndex(field: String, logger: Logger) async throws -> Bool
}

/// Shares of record hierarchies and zones, their participants, and what each participant's shared database shows.
public protocol ShareStore: Sendable {
    /// The share with this short GUID.
    func share(shortGUID: String, logger: Logger) async throws -> ShareState?

    /// The shares with these record names in a zone of an owner's database.
    func shares(named names: [String], zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState]

    /// The shares of a zone that list a user (any status).
    func shares(listing userRecordName: String, zoneName: String, in database: DatabaseRef, logger: Logger) async throws -> [ShareState]

    /// Marks a user's participation accepted, adding them as a public participant with `publicPermission` if the share
    /// does not list them. The zone appears in their shared database.
    func acceptShare(shortGUID: String, userRecordName: String, logger: Logger) async throws -> ShareState

    /// Takes a user off a share (leaving); the zone leaves their shared database if no other share keeps it there.
    func leaveShare(shareRecordName: String, zoneName: String, in database: DatabaseRef, userRecordName: String, logger: Logger) async throws

    /// The zones currently shared with a user in a container environment.
    func sharedZones(userRecordName: String, container: String, environment: ContainerEnvironment, logger: Logger) async throws -> [SharedZone]

    /// A user's shared database feed: zones that appeared, changed or went away after a position.
    func sharedDatabaseChanges(
        userRecordName: String, container: String, environment: ContainerEnvironment, after sequence: Int64, limit: Int, logger: Logger
    ) async throws -> SharedDatabasePage
}

/// Subscriptions and the push tokens their notifications go to.
public protocol SubscriptionStore: Sendable {
    /// A user's subscriptions in a database, oldest first; with `ids`, only those (missing ones are absent).
    func subscriptions(of owner: SubscriptionOwner, ids: [String]?, logger: Logger) async throws -> [StoredSubscription]

    /// Saves (creating or replacing) and deletes subscriptions of a user's database, in one transaction.
    func modifySubscriptions(of owner: SubscriptionOwner, saving: [StoredSubscription], deleting: [String], logger: Logger) async throws

    /// Stores a new push token, or replaces one (its user and delivery positions).
    func savePushToken(_ token: PushTokenRecord, logger: Logger) async throws

    /// The push token with this value.
    func pushToken(_ token: String, logger: Logger) async throws -> PushTokenRecord?

    /// Deletes a user's push tokens beyond the `keeping` most recently bound (``PushTokenRecord/createdAt``), so one
    /// user cannot pile up tokens. Returns how many were deleted.
    func trimPushTokens(of userRecordName: String, container: String, environment: ContainerEnvironment, keeping: Int, logger: Logger)
        async throws -> Int
}

/// Asset receipts: what each was issued for, which file holds its bytes, and which records hold it.
public protocol AssetUploadStore: Sendable {
    /// Saves new asset receipts.
    func createAssetUploads(_ uploads: [AssetUpload], logger: Logger) async throws

    /// The receipts that exist among these.
    func assetUploads(receipts: [String], logger: Logger) async throws -> [AssetUpload]

    /// Records that a receipt's bytes were uploaded into a file. Answers `false` (changing nothing) when the receipt
    /// does not exist or has a file already.
    func completeAssetUpload(receipt: String, fileID: String, size: Int64, checksum: String, logger: Logger) async throws -> Bool

    /// What an uploader holds in a container's assets: receipts no record holds yet (made since `pendingSince`) and their
    /// bytes, and the bytes of all the uploader's files.
    func assetUsage(uploader: String, container: String, pendingSince: Int64, logger: Logger) async throws -> AssetUsage

    /// Forgets receipts never attached and made before `unattachedBefore`, and attached receipts made before
    /// `detachedBefore` that no live record holds any more; answers the files no receipt names now, to delete.
    func collectAssetGarbage(unattachedBefore: Int64, detachedBefore: Int64, logger: Logger) async throws -> [String]
}

/// Share-a-copy snapshots and their upload quotas.
public protocol LinkStore: Sendable {
    /// A container environment's link snapshots that have not expired, newest first, at most `limit`.
    func listLinkSnapshots(container: String, environment: ContainerEnvironment, now: Int64, limit: Int, logger: Logger) async throws
        -> [LinkSnapshot]

    /// Counts an upload against the quota and, if it fits, stores its snapshots, in one transaction.
    func createLinkSnapshots(_ snapshots: [LinkSnapshot], uploader: LinkUploader, quota: LinkQuota, now: Int64, logger: Logger) async throws
        -> LinkQuotaDecision

    /// The snapshot behind a link, unless it has expired.
    func linkSnapshot(id: String, now: Int64, logger: Logger) async throws -> LinkSnapshot?

    /// Deletes expired snapshots for good, and upload counts older than a day; returns how many snapshots went.
    func deleteExpiredLinkSnapshots(now: Int64, logger: Logger) async throws -> Int
}

/// A store with upkeep to do while a server runs, off the request path (the SQLite store checkpoints its write-ahead
/// log, so that no request's commit pays for copying the log into the database file).
public protocol BackgroundMaintenance: Sendable {
    /// Does the store's background work until the task is cancelled, then leaves the store as it found it.
    func maintainInBackground(logger: Logger) async
}
