public import CumulusClient
public import CumulusModel
public import GRDB

/// Enqueues a local edit of a synced row with the engine that owns its record: the private database for the user's own
/// rows, the shared database, in the owner's zone, for rows of records shared with them. A new row with a parent goes
/// where its parent is, so adding a cost under a group someone shared needs no app code to find the group's zone, owner
/// or database (seed 001's "decode the group's system fields to get the zone ID for the specific share").
///
/// Two layouts work, as the app chooses:
/// - **Side by side**: shared rows live in the same tables as the user's own, told apart by the table's
///   ``SyncedTable/ownerColumn`` (empty for the user's own rows, the owner's user record name otherwise). Give the same
///   tables to both engines' adapters, and to the router as `tables`.
/// - **A separate shared store** (seed 002): tables only the shared engine syncs, each with an owner column. Give them
///   to the router as `sharedTables`.
///
/// ```swift
/// let router = GRDBSyncRouter(privateStore: privateStore, sharedStore: sharedStore, tables: [groups, costs])
/// try await dbQueue.write { db in
///     try db.execute(sql: "INSERT INTO costs (id, groupID, amount) VALUES (?, ?, ?)", arguments: [id, group, 12.5])
///     try router.enqueueSave(id, in: costs, db)   // the group's zone, database and owner, with `parent` set
/// }
/// ```
public struct GRDBSyncRouter: Sendable {
    public let privateStore: GRDBSyncStore
    public let sharedStore: GRDBSyncStore?
    /// Tables of the user's own rows, and of shared rows too when they carry an owner column.
    public let tables: [SyncedTable]
    /// Tables whose rows are all shared with the user.
    public let sharedTables: [SyncedTable]

    /// A row the router cannot place: a shared row without a shared store to send it.
    public struct RoutingError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Where a row's record lives.
    public struct Placement: Sendable, Hashable {
        public var recordID: RecordID
        /// `.private` or `.shared`: the engine that sends it.
        public var scope: DatabaseScope
    }

    public init(privateStore: GRDBSyncStore, sharedStore: GRDBSyncStore? = nil, tables: [SyncedTable], sharedTables: [SyncedTable] = []) {
        self.privateStore = privateStore
        self.sharedStore = sharedStore
        self.tables = tables
        self.sharedTables = sharedTables
    }

    /// Enqueues the save of a row, in the caller's transaction, with the engine of its database. A row without an
    /// owner takes its parent's (written into the owner column), so later edits and fetched versions find it.
    ///
    /// - Parameter owner: the row's owner, when rows of several owners share this primary key; otherwise the row with
    ///   this key is found (the user's own first).
    @discardableResult
    public func enqueueSave(_ primaryKey: String, owner: String? = nil, in table: SyncedTable, _ db: Database) throws -> Placement {
        let placement = try place(primaryKey, owner: owner, in: table, db, adopt: true, depth: 0)
        try store(for: placement).enqueue([.saveRecord(placement.recordID)], in: db)
        return placement
    }

    /// Enqueues the deletion of a row's record. Call it before deleting the row, in the same transaction: the row
    /// (or its parent) says where the record lives.
    @discardableResult
    public func enqueueDelete(_ primaryKey: String, owner: String? = nil, in table: SyncedTable, _ db: Database) throws -> Placement {
        let placement = try place(primaryKey, owner: owner, in: table, db, adopt: false, depth: 0)
        try store(for: placement).enqueue([.deleteRecord(placement.recordID)], in: db)
        return placement
    }

    /// Where a row's record lives: its owner column says, else its parent's place, else the table's zone in the
    /// private database (the shared database for a shared table).
    public func place(_ primaryKey: String, owner: String? = nil, in table: SyncedTable, _ db: Database) throws -> Placement {
        try place(primaryKey, owner: owner, in: table, db, adopt: false, depth: 0)
    }

    private func store(for placement: Placement) throws -> GRDBSyncStore {
        guard placement.scope == .shared else { return privateStore }
        guard let sharedStore else {
            throw RoutingError(description: "\(placement.recordID.recordName) belongs to a shared zone, and the router has no shared store")
        }
        return sharedStore
    }

    /// The owner and parent key of a row: the row of `owner` if given and present, else the user's own row, else any.
    private func row(_ primaryKey: String, owner: String?, in table: SyncedTable, _ db: Database) throws -> (owner: String?, parent: String?)? {
        let ownerExpression = table.ownerColumn.map(SyncedTable.quoted) ?? "NULL"
        let parentExpression = table.parentColumn.map(SyncedTable.quoted) ?? "NULL"
        let sql = """
            SELECT \(ownerExpression), \(parentExpression) FROM \(SyncedTable.quoted(table.tableName)) WHERE \(SyncedTable.quoted(table.primaryKey)) = ?
            ORDER BY \(ownerExpression) IS ? DESC, COALESCE(\(ownerExpression), '') = '' DESC LIMIT 1
            """
        guard let row = try Row.fetchOne(db.cachedStatement(sql: sql), arguments: [primaryKey, owner]) else { return nil }
        let rowOwner: String? = row[0]
        return (rowOwner?.isEmpty == false ? rowOwner : nil, row[1])
    }

    private func place(_ primaryKey: String, owner: String?, in table: SyncedTable, _ db: Database, adopt: Bool, depth: Int) throws -> Placement {
        let isShared = sharedTables.contains(table)
        let found = try row(primaryKey, owner: owner, in: table, db)
        if let rowOwner = found?.owner ?? owner {
            return Placement(recordID: table.recordID(primaryKey, owner: rowOwner), scope: .shared)
        }
        if let parentKey = found?.parent, depth < 64, let parentTable = self.table(named: table.parentTable ?? table.tableName) {
            let parent = try place(parentKey, owner: nil, in: parentTable, db, adopt: adopt, depth: depth + 1)
            if parent.scope == .shared, let parentOwner = parent.recordID.zoneID.ownerRecordName {
                if adopt, let ownerColumn = table.ownerColumn.map(SyncedTable.quoted) {
                    // The row is keyed by (owner, primary key) from now on, like the rows fetched from that owner.
                    try db.execute(
                        sql: """
                            UPDATE \(SyncedTable.quoted(table.tableName)) SET \(ownerColumn) = ?
                            WHERE \(SyncedTable.quoted(table.primaryKey)) = ? AND COALESCE(\(ownerColumn), '') = ''
                            """,
                        arguments: [parentOwner, primaryKey]
                    )
                }
                return Placement(recordID: RecordID(recordName: primaryKey, zoneID: parent.recordID.zoneID), scope: .shared)
            }
        }
        if isShared, let tableOwner = table.zoneID.ownerRecordName {
            return Placement(recordID: table.recordID(primaryKey, owner: tableOwner), scope: .shared)
        }
        return Placement(recordID: table.recordID(primaryKey), scope: isShared ? .shared : .private)
    }

    private func table(named name: String) -> SyncedTable? {
        tables.first { $0.tableName == name } ?? sharedTables.first { $0.tableName == name }
    }
}
