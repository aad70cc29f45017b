import CumulusStore
import Foundation
public import Logging
public import PostgresNIO

/// The PostgreSQL schema: named, numbered, forward-only migrations, applied once per database however many instances
/// start at the same moment.
///
/// Every instance runs ``migrate(_:logger:)`` at start. It holds a session advisory lock while it reads the applied
/// versions and applies the missing ones, each in its own transaction, so two instances on an empty database migrate
/// it once, and an instance that finds a version it does not know (a newer Cumulus migrated the database) refuses to
/// run instead of writing rows a newer schema would misread.
public enum PostgresMigrations {
    /// One migration: its number, a name for logs, and its statements.
    struct Migration: Sendable {
        var version: Int
        var name: String
        var statements: [String]
    }

    /// The advisory lock key that serializes migrations (any 64-bit number private to Cumulus: "cumulus" in ASCII).
    static let migrationLock: Int64 = 0x63_75_6d_75_6c_75_73

    /// The highest version this program knows.
    public static var currentVersion: Int { migrations.map(\.version).max() ?? 0 }

    /// Applies the missing migrations, or refuses a database migrated by a newer program.
    public static func migrate(_ client: PostgresClient, logger: Logger) async throws {
        try await client.withConnection { connection in
            try await connection.query("SELECT pg_advisory_lock(\(migrationLock))", logger: logger)
            do {
                try await applyMissing(on: connection, logger: logger)
                // Zones from before digests (version 10) get theirs, under the lock, so one instance computes them.
                let computed = try await PostgresRecordStore.refreshZoneDigests(connection, unknownOnly: true, logger: logger)
                if !computed.isEmpty { logger.info("computed zone digests", metadata: ["cumulus.zones": "\(computed.count)"]) }
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
                throw error
            }
            try await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
        }
    }

    /// The versions applied to a database, in order.
    public static func appliedVersions(_ client: PostgresClient, logger: Logger) async throws -> [Int] {
        try await client.withConnection { connection in try await appliedVersions(on: connection, logger: logger) }
    }

    private static func appliedVersions(on connection: PostgresConnection, logger: Logger) async throws -> [Int] {
        // Made only when missing: `CREATE TABLE IF NOT EXISTS` is a write even when the table exists, and a database
        // that cannot be written must still open (for `cumulus doctor` to say so).
        var exists = false
        for try await found in try await connection.query(
            "SELECT to_regclass('cumulus_schema_migrations') IS NOT NULL", logger: logger
        ).decode(Bool.self) {
            exists = found
        }
        if !exists {
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS cumulus_schema_migrations (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
                )
                """, logger: logger)
        }
        var versions: [Int] = []
        for try await version in try await connection.query("SELECT version FROM cumulus_schema_migrations ORDER BY version", logger: logger)
            .decode(Int.self)
        {
            versions.append(version)
        }
        return versions
    }

    private static func applyMissing(on connection: PostgresConnection, logger: Logger) async throws {
        let applied = try await appliedVersions(on: connection, logger: logger)
        if let newest = applied.max(), newest > currentVersion {
            throw StoreError(
                .misconfigured,
                "the database's schema is at version \(newest), newer than this Cumulus knows (\(currentVersion)); run the newer Cumulus, or restore a backup"
            )
        }
        for migration in migrations where !applied.contains(migration.version) {
            logger.info("applying migration", metadata: ["cumulus.migration": "\(migration.version): \(migration.name)"])
            try await connection.withTransaction(logger: logger) { transaction in
                for statement in migration.statements {
                    try await transaction.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await transaction.query(
                    "INSERT INTO cumulus_schema_migrations (version, name) VALUES (\(migration.version), \(migration.name))", logger: logger)
            }
        }
    }
}
