public import CumulusClient
public import CumulusModel
public import CumulusSyncGRDB
import Foundation
public import GRDB

/// The cost-splitting app of seed 001 on one device: groups with members and costs, a group shared with the people on
/// the trip, who add and edit its costs. docs/SYNC.md and docs/SHARING.md show this file whole.
///
/// Shared groups live beside the user's own, in the same tables: the `owner` column is empty for the user's own rows
/// and holds the owner's user record name for rows shared with them.
public final class SplitCosts: Sendable {
    public static let zone = ZoneID(zoneName: "Groups")

    public static let groups = SyncedTable(
        tableName: "groups", recordType: "Group", zoneID: zone, columns: [SyncedColumn("name", type: .string)],
        modificationColumn: "modifiedAt", ownerColumn: "owner")
    public static let members = SyncedTable(
        tableName: "members", recordType: "Member", zoneID: zone, columns: [SyncedColumn("name", type: .string)],
        parentColumn: "groupID", parentTable: "groups", modificationColumn: "modifiedAt", ownerColumn: "owner")
    public static let costs = SyncedTable(
        tableName: "costs", recordType: "Cost", zoneID: zone,
        columns: [SyncedColumn("title", type: .string), SyncedColumn("amount", type: .double), SyncedColumn("paidBy", type: .string)],
        parentColumn: "groupID", parentTable: "groups", modificationColumn: "modifiedAt", ownerColumn: "owner")

    public let container: CloudContainer
    public let database: DatabaseQueue
    public let privateEngine: SyncEngine
    public let sharedEngine: SyncEngine
    public let router: GRDBSyncRouter

    /// Opens (or creates) the device's database and its two engines, one per database, each with its own sync state.
    public init(container: CloudContainer, path: String, configure: (inout SyncEngine.Configuration) -> Void = { _ in }) throws {
        self.container = container
        database = try DatabaseQueue(path: path)
        try Self.migrate(database)
        let tables = [Self.groups, Self.members, Self.costs]
        let privateStore = try GRDBSyncStore(writer: database, scope: "private")
        let sharedStore = try GRDBSyncStore(writer: database, scope: "shared")
        var privateConfiguration = SyncEngine.Configuration(
            database: container.privateCloudDatabase, stateStore: privateStore,
            delegate: try GRDBSyncAdapter(writer: database, store: privateStore, tables: tables))
        var sharedConfiguration = SyncEngine.Configuration(
            database: container.sharedCloudDatabase, stateStore: sharedStore,
            delegate: try GRDBSyncAdapter(writer: database, store: sharedStore, tables: tables))
        configure(&privateConfiguration)
        configure(&sharedConfiguration)
        privateEngine = SyncEngine(privateConfiguration)
        sharedEngine = SyncEngine(sharedConfiguration)
        router = GRDBSyncRouter(privateStore: privateStore, sharedStore: sharedStore, tables: tables)
    }

    /// Every column is optional or has a default, and rows are keyed by (owner, id), as several owners' rows may meet.
    static func migrate(_ writer: any DatabaseWriter) throws {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("groups, members, costs") { db in
            try db.execute(
                sql: """
                    CREATE TABLE groups (
                        id TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '', name TEXT, modifiedAt INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (owner, id)
                    );
                    CREATE TABLE members (
                        id TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '', groupID TEXT, name TEXT, modifiedAt INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (owner, id)
                    );
                    CREATE TABLE costs (
                        id TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '', groupID TEXT, title TEXT, amount REAL, paidBy TEXT,
                        modifiedAt INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (owner, id)
                    );
                    """
            )
        }
        try migrator.migrate(writer)
    }

    /// Once per account: the zone the user's own groups live in.
    public func prepare() async throws {
        try await container.privateCloudDatabase.save(zones: [Self.zone])
    }

    /// Both databases, fetched then sent.
    public func sync() async throws {
        try await privateEngine.fetchChanges()
        try await sharedEngine.fetchChanges()
        try await privateEngine.sendChanges()
        try await sharedEngine.sendChanges()
    }

    // MARK: - Edits: a row and its pending change in one transaction

    @discardableResult
    public func createGroup(_ name: String) throws -> String {
        let id = UUID().uuidString
        try database.write { db in
            try db.execute(sql: "INSERT INTO groups (id, name, modifiedAt) VALUES (?, ?, ?)", arguments: [id, name, Self.now()])
            try router.enqueueSave(id, in: Self.groups, db)
        }
        return id
    }

    /// Adds a member or a cost under a group, the user's own or one shared with them: the router sends it to the
    /// group's zone, database and owner, with `parent` set.
    @discardableResult
    public func addMember(_ name: String, to groupID: String) throws -> String {
        let id = UUID().uuidString
        try database.write { db in
            try db.execute(
                sql: "INSERT INTO members (id, groupID, name, modifiedAt) VALUES (?, ?, ?, ?)", arguments: [id, groupID, name, Self.now()])
            try router.enqueueSave(id, in: Self.members, db)
        }
        return id
    }

    @discardableResult
    public func addCost(_ title: String, amount: Double, paidBy: String, to groupID: String) throws -> String {
        let id = UUID().uuidString
        try database.write { db in
            try db.execute(
                sql: "INSERT INTO costs (id, groupID, title, amount, paidBy, modifiedAt) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [id, groupID, title, amount, paidBy, Self.now()])
            try router.enqueueSave(id, in: Self.costs, db)
        }
        return id
    }

    public func setAmount(_ amount: Double, ofCost id: String) throws {
        try database.write { db in
            try db.execute(sql: "UPDATE costs SET amount = ?, modifiedAt = ? WHERE id = ?", arguments: [amount, Self.now(), id])
            try router.enqueueSave(id, in: Self.costs, db)
        }
    }

    public func deleteCost(_ id: String) throws {
        try database.write { db in
            try router.enqueueDelete(id, in: Self.costs, db)
            try db.execute(sql: "DELETE FROM costs WHERE id = ?", arguments: [id])
        }
    }

    // MARK: - Sharing a group

    /// Shares a group, with everything under it, with people by email; the app sends them the returned URL.
    public func share(group groupID: String, with emails: [String], permission: SharePermission = .readWrite) async throws -> CloudShare {
        let groupRecord = RecordID(recordName: groupID, zoneID: Self.zone)
        var share = try await container.privateCloudDatabase.share(ofRoot: groupRecord) ?? CloudShare(rootRecord: groupRecord)
        for email in emails { share.addParticipant(.emailAddress(email), permission: permission) }
        return try await container.privateCloudDatabase.save(share)
    }

    /// Accepts a share from its URL; the next sync brings the group and its costs.
    public func accept(_ url: String) async throws {
        _ = try await container.sharedCloudDatabase.acceptShare(url)
    }

    /// Removes someone from a group's share; their devices drop the group at their next sync.
    public func remove(_ email: String, fromGroup groupID: String) async throws {
        let groupRecord = RecordID(recordName: groupID, zoneID: Self.zone)
        guard var share = try await container.privateCloudDatabase.share(ofRoot: groupRecord) else { return }
        share.removeParticipant(.emailAddress(email))
        _ = try await container.privateCloudDatabase.save(share)
    }

    // MARK: - Reading

    /// Costs by title, with their amounts, of every group this device holds.
    public func costs() throws -> [String: Double] {
        try database.read { db in
            Dictionary(
                try Row.fetchAll(db, sql: "SELECT title, amount FROM costs").map { ($0[0] as String, $0[1] as Double) },
                uniquingKeysWith: { a, _ in a })
        }
    }

    /// Group names, and whose they are (empty: the user's own).
    public func groups() throws -> [String: String] {
        try database.read { db in
            Dictionary(
                try Row.fetchAll(db, sql: "SELECT name, owner FROM groups").map { ($0[0] as String, $0[1] as String) },
                uniquingKeysWith: { a, _ in a })
        }
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
