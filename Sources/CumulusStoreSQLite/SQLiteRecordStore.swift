import CumulusModel
public import CumulusStore
public import Foundation
public import GRDB
import Logging
import Synchronization

/// A ``RecordStore`` on an embedded SQLite database, through GRDB.
///
/// The database runs in WAL mode, so readers never block the writer, and with a busy timeout, so the `cumulus`
/// administration commands can write while a server runs on the same file.
///
/// ```swift
/// let store = try SQLiteRecordStore(path: "cumulus-data/cumulus.sqlite")
/// ```
public final class SQLiteRecordStore: RecordStore {
    /// Store settings.
    public struct Configuration: Sendable {
        /// How long a write waits for another process's write lock before failing.
        public var busyTimeout: TimeInterval
        /// Maximum number of concurrent read connections.
        public var maximumReaderCount: Int
        /// At most this many queried fields get an expression index; queries on further fields still work, unindexed.
        /// Every index slows every write, so one holder of the app's token must not be able to add them without end.
        public var maximumFieldIndexes: Int
        /// While a server runs, how often the write-ahead log is checkpointed in the background
        /// (``SQLiteRecordStore/maintainInBackground(logger:)``).
        public var checkpointInterval: Duration
        /// The write-ahead log's bound: its file is cut back to this size once checkpointed, and a log this large that
        /// readers keep from being checkpointed is restarted.
        public var maximumWriteAheadLogBytes: Int64
        /// Where the store's metrics go; `nil` makes them through swift-metrics' global system.
        public var metrics: StoreMetrics?

        public init(
            busyTimeout: TimeInterval = 10, maximumReaderCount: Int = 8, maximumFieldIndexes: Int = 64,
            checkpointInterval: Duration = .milliseconds(100), maximumWriteAheadLogBytes: Int64 = 64 << 20, metrics: StoreMetrics? = nil
        ) {
            self.busyTimeout = busyTimeout
            self.maximumReaderCount = maximumReaderCount
            self.maximumFieldIndexes = maximumFieldIndexes
            self.checkpointInterval = checkpointInterval
            self.maximumWriteAheadLogBytes = maximumWriteAheadLogBytes
            self.metrics = metrics
        }
    }

    let writer: any DatabaseWriter
    let planner: RecordBatchPlanner
    /// Field expression indexes known to exist, so queries issue their `CREATE INDEX IF NOT EXISTS` once per process.
    let knownFieldIndexes = Mutex<Set<String>>([])
    let maximumFieldIndexes: Int
    /// The database file, for the background checkpoint connection; `nil` in memory.
    let path: String?
    let busyTimeout: TimeInterval
    let checkpointInterval: Duration
    let maximumWriteAheadLogBytes: Int64
    let checkpointsRun = Atomic(0)
    let metrics: StoreMetrics

    /// How many background checkpoints have run since the store was opened.
    public var backgroundCheckpointCount: Int { checkpointsRun.load(ordering: .relaxed) }

    /// Opens (creating if needed) a store at a file path and migrates it.
    public convenience init(path: String, configuration: Configuration = .init()) throws {
        var config = GRDB.Configuration()
        config.busyMode = .timeout(configuration.busyTimeout)
        config.maximumReaderCount = configuration.maximumReaderCount
        config.prepareDatabase { db in
            // NORMAL is durable across process crashes in WAL mode; only a power loss can drop the last commits.
            try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute()
            try db.execute(sql: "PRAGMA journal_size_limit = \(configuration.maximumWriteAheadLogBytes)")
            db.add(function: SQLiteRecordStore.distanceFunction)
        }
        let pool: DatabasePool
        do {
            pool = try DatabasePool(path: path, configuration: config)
        } catch {
            throw Self.storeError(error, "could not open \(path)")
        }
        try self.init(writer: pool, configuration: configuration, path: path)
    }

    /// Opens a private in-memory store, for tests.
    public static func inMemory(maximumFieldIndexes: Int = Configuration().maximumFieldIndexes, metrics: StoreMetrics? = nil) throws
        -> SQLiteRecordStore
    {
        var config = GRDB.Configuration()
        config.prepareDatabase { db in db.add(function: SQLiteRecordStore.distanceFunction) }
        return try SQLiteRecordStore(writer: DatabaseQueue(configuration: config), maximumFieldIndexes: maximumFieldIndexes, metrics: metrics)
    }

    /// Wraps an open GRDB database and migrates it.
    public convenience init(
        writer: any DatabaseWriter, maximumFieldIndexes: Int = Configuration().maximumFieldIndexes, metrics: StoreMetrics? = nil
    ) throws {
        var configuration = Configuration()
        configuration.maximumFieldIndexes = maximumFieldIndexes
        configuration.metrics = metrics
        try self.init(writer: writer, configuration: configuration, path: nil)
    }

    private init(writer: any DatabaseWriter, configuration: Configuration, path: String?) throws {
        self.writer = writer
        self.maximumFieldIndexes = configuration.maximumFieldIndexes
        self.path = path
        self.busyTimeout = configuration.busyTimeout
        self.checkpointInterval = configuration.checkpointInterval
        self.maximumWriteAheadLogBytes = configuration.maximumWriteAheadLogBytes
        self.metrics =
            configuration.metrics ?? StoreMetrics.sqlite(poolSize: writer is DatabasePool ? configuration.maximumReaderCount + 1 : 1)
        self.planner = RecordBatchPlanner(makeShortGUID: ShortGUID.make)
        do {
            try Self.migrator.migrate(writer)
        } catch {
            throw Self.storeError(error, "could not migrate the database")
        }
    }

    /// Runs a read, translating database errors.
    func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await translatingErrors("read failed") { try await metrics.measure(.read) { try await writer.read(body) } }
    }

    /// Runs a write transaction on GRDB's writer queue, translating database errors.
    ///
    /// Never on the caller's thread, though that would spare a request two thread wake-ups: a request's task runs on
    /// its connection's event loop, and a commit waits on the disk (a busy one, or dirty-page throttling, holds a
    /// `pwrite` for seconds) or on another process's lock (a `cumulus` command, up to the busy timeout). The loop would
    /// wait with it, and every connection it serves; the writer queue's thread waits instead.
    func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await translatingErrors("write failed") {
            try await metrics.measure(.write) { try await writer.writeWithoutTransaction { db in try Self.transaction(db, body) } }
        }
    }

    /// A write transaction as GRDB's `write` runs one (`BEGIN IMMEDIATE`, then `COMMIT`, or `ROLLBACK` on any error), with
    /// `BEGIN` and `COMMIT` prepared once per connection: GRDB prepares both again for every transaction, and those two
    /// `sqlite3_prepare` calls were about 5% of a single write's server CPU and of a delivered notification's.
    static func transaction<T>(_ db: Database, _ body: (Database) throws -> T) throws -> T {
        try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            // SQLite rolls a transaction back by itself on some errors (a full disk, an I/O error). GRDB's transactions
            // refuse statements after that; the store's bodies never run one, since a failed statement's error ends the body.
            let result = try body(db)
            try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
            return result
        } catch {
            if db.isInsideTransaction { try? db.rollback() }
            throw error
        }
    }

    func translatingErrors<T>(_ message: String, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw Self.storeError(error, message)
        }
    }

    static func storeError(_ error: any Error, _ message: String) -> StoreError {
        if let error = error as? StoreError { return error }
        guard let databaseError = error as? DatabaseError else {
            return StoreError(.unavailable, message, underlying: error)
        }
        switch databaseError.resultCode {
        case .SQLITE_CONSTRAINT:
            if databaseError.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE || databaseError.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY {
                return StoreError(.duplicate, message, underlying: error)
            }
            return StoreError(.invalidState, message, underlying: error)
        case .SQLITE_BUSY, .SQLITE_LOCKED:
            return StoreError(.unavailable, "the database is busy", underlying: error)
        case .SQLITE_FULL:
            // SQLite rolled the transaction back.
            return StoreError(.storageFull, "the database's disk is full (\(message))", underlying: error)
        case .SQLITE_READONLY:
            // A file the process may not write (its owner, a read-only disk): SQLite rolled the transaction back.
            return StoreError(.cannotWrite, "the database cannot be written (\(message))", underlying: error)
        case .SQLITE_IOERR
        where [.SQLITE_IOERR_WRITE, .SQLITE_IOERR_FSYNC, .SQLITE_IOERR_DIR_FSYNC, .SQLITE_IOERR_TRUNCATE].contains(databaseError.extendedResultCode):
            // The disk refused a write (an immutable file, a failing device): the transaction was rolled back.
            return StoreError(.cannotWrite, "the disk refused the database's write (\(message))", underlying: error)
        case .SQLITE_IOERR, .SQLITE_CANTOPEN, .SQLITE_NOMEM, .SQLITE_INTERRUPT, .SQLITE_PROTOCOL:
            // The disk or the host: a retry may succeed later.
            return StoreError(.unavailable, message, underlying: error)
        case .SQLITE_CORRUPT, .SQLITE_NOTADB:
            return StoreError(.corrupt, message, underlying: error)
        default:
            // A statement SQLite refuses (too large an expression, say): retrying the same request cannot help.
            return StoreError(.unexpected, message, underlying: error)
        }
    }
}

extension Array where Element == String {
    /// The names as a JSON array, for `IN (SELECT value FROM json_each(?))`: one cached statement whatever the count.
    var jsonArray: String {
        var writer = JSONWriter(reservingCapacity: count * 24)
        writer.beginArray()
        for name in self { writer.string(name) }
        writer.endArray()
        return String(decoding: writer.bytes, as: UTF8.self)
    }
}
