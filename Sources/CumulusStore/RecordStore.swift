import CumulusModel
public import Logging

/// Durable storage for Cumulus: every storage role at once, as each store implements them.
///
/// The roles are small protocols (``ContainerStore``, ``UserStore``, ``RecordZoneStore``, ``SchemaStore``,
/// ``ShareStore``, ``SubscriptionStore``, ``AssetUploadStore``, ``LinkStore``, ``DeviceStore``, ``RecordHistoryStore``, ``StoreHealth``), so that a service takes only the role it
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
    LinkStore, DeviceStore, RecordHistoryStore, StoreHealth
{}

/// A store with upkeep to do while a server runs, off the request path (the SQLite store checkpoints its write-ahead
/// log, so that no request's commit pays for copying the log into the database file).
public protocol BackgroundMaintenance: Sendable {
    /// Does the store's background work until the task is cancelled, then leaves the store as it found it.
    func maintainInBackground(logger: Logger) async
}
