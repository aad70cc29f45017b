extension PostgresMigrations {
    /// The migrations, in order. The tables mirror the SQLite store's, so both stores keep the same rules with the
    /// same shapes: see `SQLiteRecordStore+Migrations.swift` for what each table is for. Until the PostgreSQL store
    /// ships in a release, version 1 may still change.
    ///
    /// Names and identifiers are `COLLATE "C"`: compared byte by byte, as SQLite's BINARY does, whatever the
    /// database's locale, which also makes their indexes cheaper to search than a linguistic collation's.
    static let migrations: [Migration] = [
        Migration(
            version: 1, name: "containers, credentials, zones, records, shares, links",
            statements: [
                """
                CREATE TABLE containers (id TEXT COLLATE "C" PRIMARY KEY, created_at BIGINT NOT NULL)
                """,
                """
                CREATE TABLE api_tokens (
                    token_hash BYTEA PRIMARY KEY,
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                    created_at BIGINT NOT NULL,
                    revoked BOOLEAN NOT NULL DEFAULT false
                )
                """,
                """
                CREATE TABLE users (
                    user_record_name TEXT COLLATE "C" PRIMARY KEY,
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
                    email TEXT,
                    password_hash TEXT,
                    discoverable BOOLEAN NOT NULL DEFAULT false,
                    created_at BIGINT NOT NULL
                )
                """,
                // Names and emails are unique per container regardless of case, as SQLite's NOCASE columns are.
                "CREATE UNIQUE INDEX users_name ON users (container_id, lower(name))",
                "CREATE UNIQUE INDEX users_email ON users (container_id, lower(email))",
                "CREATE INDEX users_discoverable_email ON users (container_id, lower(email)) WHERE discoverable",
                """
                CREATE TABLE web_auth_tokens (
                    token_hash BYTEA PRIMARY KEY,
                    user_record_name TEXT COLLATE "C" NOT NULL REFERENCES users(user_record_name) ON DELETE CASCADE,
                    created_at BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX web_auth_tokens_user ON web_auth_tokens (user_record_name)",
                """
                CREATE TABLE server_keys (
                    key_id TEXT COLLATE "C" PRIMARY KEY,
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                    public_key_pem TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    revoked BOOLEAN NOT NULL DEFAULT false
                )
                """,
                "CREATE TABLE server_secrets (name TEXT PRIMARY KEY, value BYTEA NOT NULL)",
                """
                CREATE TABLE databases (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                    scope TEXT NOT NULL CHECK (scope IN ('public', 'private')),
                    owner_record_name TEXT COLLATE "C" NOT NULL,
                    change_seq BIGINT NOT NULL DEFAULT 0,
                    UNIQUE (container_id, environment, scope, owner_record_name)
                )
                """,
                // A zone's row is locked by every write in it (its sequence is taken with UPDATE … RETURNING), so
                // writers of one zone commit in sequence order and a feed reader never passes a change that commits later.
                """
                CREATE TABLE zones (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    database_id BIGINT NOT NULL REFERENCES databases(id) ON DELETE CASCADE,
                    zone_name TEXT COLLATE "C" NOT NULL,
                    change_seq BIGINT NOT NULL DEFAULT 0,
                    database_change_seq BIGINT NOT NULL DEFAULT 0,
                    deleted BOOLEAN NOT NULL DEFAULT false,
                    short_guid TEXT COLLATE "C",
                    created_at BIGINT NOT NULL
                )
                """,
                "CREATE UNIQUE INDEX zones_live_name ON zones (database_id, zone_name) WHERE NOT deleted",
                "CREATE INDEX zones_database_feed ON zones (database_id, database_change_seq)",
                // Fields are canonical JSON text, spliced into answers as stored; queries index `(fields::jsonb)`.
                """
                CREATE TABLE records (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    zone_id BIGINT NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                    record_name TEXT COLLATE "C" NOT NULL,
                    record_type TEXT COLLATE "C" NOT NULL,
                    change_seq BIGINT NOT NULL,
                    deleted BOOLEAN NOT NULL DEFAULT false,
                    fields TEXT,
                    parent_name TEXT COLLATE "C",
                    share_name TEXT COLLATE "C",
                    short_guid TEXT COLLATE "C",
                    created_at BIGINT NOT NULL,
                    created_by TEXT COLLATE "C" NOT NULL,
                    created_device TEXT COLLATE "C" NOT NULL,
                    modified_at BIGINT NOT NULL,
                    modified_by TEXT COLLATE "C" NOT NULL,
                    modified_device TEXT COLLATE "C" NOT NULL,
                    UNIQUE (zone_id, record_name),
                    CHECK (deleted OR fields IS NOT NULL)
                )
                """,
                "CREATE INDEX records_zone_feed ON records (zone_id, change_seq)",
                "CREATE INDEX records_parent ON records (zone_id, parent_name) WHERE parent_name IS NOT NULL",
                "CREATE INDEX records_created ON records (zone_id, record_type, created_at) WHERE NOT deleted",
                "CREATE INDEX records_modified ON records (zone_id, record_type, modified_at) WHERE NOT deleted",
                """
                CREATE TABLE record_references (
                    zone_id BIGINT NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                    target_name TEXT COLLATE "C" NOT NULL,
                    source_name TEXT COLLATE "C" NOT NULL,
                    PRIMARY KEY (zone_id, target_name, source_name)
                )
                """,
                "CREATE INDEX record_references_source ON record_references (zone_id, source_name)",
                """
                CREATE TABLE shares (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    zone_id BIGINT NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                    share_record_name TEXT COLLATE "C" NOT NULL,
                    root_record_name TEXT COLLATE "C",
                    short_guid TEXT COLLATE "C" NOT NULL UNIQUE,
                    public_permission TEXT NOT NULL DEFAULT 'NONE' CHECK (public_permission IN ('NONE', 'READ_ONLY', 'READ_WRITE')),
                    UNIQUE (zone_id, share_record_name)
                )
                """,
                "CREATE UNIQUE INDEX shares_root ON shares (zone_id, root_record_name) WHERE root_record_name IS NOT NULL",
                "CREATE UNIQUE INDEX shares_zone_wide ON shares (zone_id) WHERE root_record_name IS NULL",
                """
                CREATE TABLE share_participants (
                    share_id BIGINT NOT NULL REFERENCES shares(id) ON DELETE CASCADE,
                    user_record_name TEXT COLLATE "C" NOT NULL,
                    type TEXT NOT NULL CHECK (type IN ('OWNER', 'USER', 'PUBLIC_USER')),
                    permission TEXT NOT NULL CHECK (permission IN ('READ_ONLY', 'READ_WRITE')),
                    status TEXT NOT NULL CHECK (status IN ('INVITED', 'ACCEPTED', 'REMOVED')),
                    email TEXT,
                    position INTEGER NOT NULL,
                    PRIMARY KEY (share_id, user_record_name)
                )
                """,
                "CREATE INDEX share_participants_user ON share_participants (user_record_name, status)",
                "CREATE TABLE shared_databases (user_record_name TEXT COLLATE \"C\" PRIMARY KEY, change_seq BIGINT NOT NULL DEFAULT 0)",
                """
                CREATE TABLE shared_zone_views (
                    user_record_name TEXT COLLATE "C" NOT NULL,
                    zone_id BIGINT NOT NULL REFERENCES zones(id),
                    view_seq BIGINT NOT NULL,
                    deleted BOOLEAN NOT NULL DEFAULT false,
                    access JSONB,
                    PRIMARY KEY (user_record_name, zone_id)
                )
                """,
                "CREATE INDEX shared_zone_views_feed ON shared_zone_views (user_record_name, view_seq)",
                "CREATE INDEX shared_zone_views_zone ON shared_zone_views (zone_id) WHERE NOT deleted",
                """
                CREATE TABLE share_exits (
                    zone_id BIGINT NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                    root_record_name TEXT COLLATE "C" NOT NULL,
                    record_name TEXT COLLATE "C" NOT NULL,
                    change_seq BIGINT NOT NULL,
                    PRIMARY KEY (zone_id, root_record_name, record_name)
                )
                """,
                "CREATE INDEX share_exits_feed ON share_exits (zone_id, change_seq)",
                """
                CREATE TABLE participant_changes (
                    user_record_name TEXT COLLATE "C" NOT NULL,
                    zone_id BIGINT NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                    record_name TEXT COLLATE "C" NOT NULL,
                    change_seq BIGINT NOT NULL,
                    PRIMARY KEY (user_record_name, zone_id, record_name)
                )
                """,
                "CREATE INDEX participant_changes_feed ON participant_changes (user_record_name, zone_id, change_seq)",
                """
                CREATE TABLE link_snapshots (
                    id TEXT COLLATE "C" PRIMARY KEY,
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                    kind TEXT NOT NULL CHECK (kind IN ('drive', 'records')),
                    payload TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX link_snapshots_expiry ON link_snapshots (expires_at)",
                """
                CREATE TABLE link_uploads (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    container_id TEXT COLLATE "C" NOT NULL,
                    device_id TEXT COLLATE "C" NOT NULL,
                    ip_address TEXT COLLATE "C" NOT NULL,
                    created_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX link_uploads_device ON link_uploads (container_id, device_id, created_at)",
                "CREATE INDEX link_uploads_address ON link_uploads (ip_address, created_at)",
            ]
        ),
        Migration(
            version: 2, name: "subscriptions",
            statements: [
                """
                CREATE TABLE subscriptions (
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                    database_scope TEXT NOT NULL CHECK (database_scope IN ('public', 'private', 'shared')),
                    user_record_name TEXT COLLATE "C" NOT NULL,
                    subscription_id TEXT COLLATE "C" NOT NULL,
                    body TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    PRIMARY KEY (container_id, environment, database_scope, user_record_name, subscription_id)
                )
                """
            ]
        ),
        Migration(
            version: 3, name: "push tokens",
            statements: [
                """
                CREATE TABLE push_tokens (
                    token TEXT COLLATE "C" PRIMARY KEY,
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                    user_record_name TEXT COLLATE "C",
                    positions TEXT NOT NULL,
                    created_at BIGINT NOT NULL
                )
                """
            ]
        ),
        Migration(
            version: 4, name: "push tokens by user",
            statements: [
                // Trimming a user's tokens to the newest few reads them in this order.
                "CREATE INDEX push_tokens_by_user ON push_tokens (container_id, environment, user_record_name, created_at)"
            ]
        ),
        Migration(
            version: 5, name: "used signatures and attempt counts",
            statements: [
                "CREATE TABLE used_signatures (digest BYTEA PRIMARY KEY, expires_at BIGINT NOT NULL)",
                "CREATE INDEX used_signatures_expiry ON used_signatures (expires_at)",
                """
                CREATE TABLE attempt_counts (
                    key TEXT COLLATE "C" NOT NULL,
                    window_start BIGINT NOT NULL,
                    count INTEGER NOT NULL,
                    PRIMARY KEY (key, window_start)
                )
                """,
                "CREATE INDEX attempt_counts_window ON attempt_counts (window_start)",
            ]
        ),
        Migration(
            version: 6, name: "schemas",
            statements: [
                """
                CREATE TABLE schema_record_types (
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    environment TEXT NOT NULL,
                    record_type TEXT COLLATE "C" NOT NULL,
                    PRIMARY KEY (container_id, environment, record_type)
                )
                """,
                """
                CREATE TABLE schema_fields (
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    environment TEXT NOT NULL,
                    record_type TEXT COLLATE "C" NOT NULL,
                    field_name TEXT COLLATE "C" NOT NULL,
                    field_type TEXT NOT NULL,
                    queryable BOOLEAN NOT NULL DEFAULT false,
                    sortable BOOLEAN NOT NULL DEFAULT false,
                    PRIMARY KEY (container_id, environment, record_type, field_name)
                )
                """,
                // Records written before schemas existed define their environment's schema; production's fields stay
                // queryable and sortable, as they were (docs/SCHEMA.md, "Upgrading").
                """
                INSERT INTO schema_record_types (container_id, environment, record_type)
                SELECT DISTINCT d.container_id, d.environment, r.record_type
                FROM records r JOIN zones z ON z.id = r.zone_id JOIN databases d ON d.id = z.database_id
                WHERE NOT r.deleted AND r.record_type <> 'cloudkit.share'
                ON CONFLICT DO NOTHING
                """,
                """
                INSERT INTO schema_fields (container_id, environment, record_type, field_name, field_type, queryable, sortable)
                SELECT d.container_id, d.environment, r.record_type, f.key, f.value->>'type',
                    d.environment = 'production', d.environment = 'production'
                FROM records r JOIN zones z ON z.id = r.zone_id JOIN databases d ON d.id = z.database_id
                    CROSS JOIN LATERAL jsonb_each(r.fields::jsonb) AS f
                WHERE NOT r.deleted AND r.record_type <> 'cloudkit.share' AND f.key NOT LIKE 'cloudkit.%'
                    AND f.value->>'type' IS NOT NULL AND f.value->>'type' <> 'UNKNOWN_LIST'
                ON CONFLICT DO NOTHING
                """,
            ]
        ),
        Migration(
            version: 7, name: "console credentials",
            statements: [
                """
                CREATE TABLE console_credentials (
                    token_hash BYTEA PRIMARY KEY,
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    kind TEXT NOT NULL CHECK (kind IN ('sign-in', 'session')),
                    expires_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX console_credentials_expiry ON console_credentials (expires_at)",
                "CREATE INDEX link_snapshots_container ON link_snapshots (container_id, environment, created_at)",
            ]
        ),
        Migration(
            version: 8, name: "asset receipts",
            statements: [
                """
                CREATE TABLE asset_uploads (
                    receipt TEXT COLLATE "C" PRIMARY KEY,
                    container_id TEXT COLLATE "C" NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                    environment TEXT NOT NULL,
                    database_scope TEXT NOT NULL,
                    owner_record_name TEXT COLLATE "C" NOT NULL,
                    zone_name TEXT COLLATE "C" NOT NULL,
                    record_name TEXT COLLATE "C",
                    field_name TEXT COLLATE "C",
                    uploader TEXT COLLATE "C" NOT NULL,
                    file_id TEXT COLLATE "C",
                    size BIGINT,
                    checksum TEXT,
                    created_at BIGINT NOT NULL,
                    attached BOOLEAN NOT NULL DEFAULT false
                )
                """,
                "CREATE INDEX asset_uploads_file ON asset_uploads (file_id) WHERE file_id IS NOT NULL",
                "CREATE INDEX asset_uploads_age ON asset_uploads (attached, created_at)",
            ]
        ),
        Migration(
            version: 9, name: "asset files",
            statements: [
                // Asset bytes for clusters with no shared directory (PostgresAssetStorage); listed in asset_files once whole.
                """
                CREATE TABLE asset_chunks (
                    file_id TEXT COLLATE "C" NOT NULL,
                    seq INTEGER NOT NULL,
                    data BYTEA NOT NULL,
                    PRIMARY KEY (file_id, seq)
                )
                """,
                "ALTER TABLE asset_chunks ALTER COLUMN data SET STORAGE EXTERNAL",
                "CREATE TABLE asset_files (file_id TEXT COLLATE \"C\" PRIMARY KEY, size BIGINT NOT NULL)",
            ]
        ),
        Migration(
            version: 10, name: "zone digests",
            statements: [
                // Eight lanes of the zone's digest (each modulo 2^32) and its live record count; NULL: not computed yet
                // (`migrate` computes them after this version).
                "ALTER TABLE zones " + (0..<8).map { "ADD COLUMN digest_\($0) BIGINT NOT NULL DEFAULT 0" }.joined(separator: ", ")
                    + ", ADD COLUMN record_count BIGINT DEFAULT 0",
                "UPDATE zones SET record_count = NULL WHERE NOT deleted",
                // `migrate` looks for zones without a digest at every start: with this index it reads nothing once
                // every digest is known.
                "CREATE INDEX zones_digest_unknown ON zones (id) WHERE record_count IS NULL AND NOT deleted",
            ]
        ),
        Migration(
            version: 11, name: "devices",
            statements: [
                // The installations a user syncs from (X-Cumulus-Device), for the console and the operator.
                """
                CREATE TABLE devices (
                    user_record_name TEXT COLLATE "C" NOT NULL REFERENCES users(user_record_name) ON DELETE CASCADE,
                    environment TEXT COLLATE "C" NOT NULL,
                    device_id TEXT COLLATE "C" NOT NULL,
                    name TEXT,
                    last_seen_at BIGINT NOT NULL,
                    last_fetched_at BIGINT,
                    position BIGINT,
                    PRIMARY KEY (user_record_name, environment, device_id)
                )
                """
            ]
        ),
        Migration(
            version: 12, name: "record history",
            statements: [
                // The versions records had before a write replaced or deleted them, for restores and undelete; each was
                // the record from modified_at until replaced_at. Pruned after the retention window.
                """
                CREATE TABLE record_history (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    zone_id BIGINT NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                    record_name TEXT COLLATE "C" NOT NULL,
                    record_type TEXT COLLATE "C" NOT NULL,
                    change_seq BIGINT NOT NULL,
                    fields TEXT NOT NULL,
                    parent_name TEXT COLLATE "C",
                    created_at BIGINT NOT NULL,
                    created_by TEXT COLLATE "C" NOT NULL,
                    created_device TEXT COLLATE "C" NOT NULL,
                    modified_at BIGINT NOT NULL,
                    modified_by TEXT COLLATE "C" NOT NULL,
                    modified_device TEXT COLLATE "C" NOT NULL,
                    replaced_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX record_history_zone ON record_history (zone_id, record_name, replaced_at)",
                "CREATE INDEX record_history_age ON record_history (replaced_at)",
                // When no live record held a receipt any more, while the history keeps its file; NULL: held.
                "ALTER TABLE asset_uploads ADD COLUMN detached_at BIGINT",
            ]
        ),
        Migration(
            version: 13, name: "shards",
            statements: [
                // Every database: its number in a sharded store (one row once registered; none when not sharded).
                "CREATE TABLE shard_identity (number INTEGER NOT NULL, logical_shards INTEGER NOT NULL)",
                // Every database: the logical shards whose users it holds (`owned`), or held and gave away (not owned).
                // Writers of a shard lock its row to share; moving the shard locks it to update.
                "CREATE TABLE shard_owners (shard INTEGER PRIMARY KEY, owned BOOLEAN NOT NULL)",
                // The directory (database 0): which database holds each logical shard.
                "CREATE TABLE shard_map (shard INTEGER PRIMARY KEY, database_number INTEGER NOT NULL)",
                // The directory: every database number given out, so that none is given twice.
                "CREATE TABLE shard_databases (number INTEGER PRIMARY KEY)",
            ]
        ),
        Migration(
            version: 14, name: "device verification, store probe",
            statements: [
                // What each device reported of its last verification: zones compared, records that differed, and the
                // names of (at most 10) zones that differed, one per line. NULL: never reported.
                """
                ALTER TABLE devices ADD COLUMN verified_at BIGINT, ADD COLUMN verified_zones INTEGER, ADD COLUMN verified_missing INTEGER,
                    ADD COLUMN verified_extra INTEGER, ADD COLUMN verified_stale INTEGER, ADD COLUMN verified_zones_out TEXT
                """,
                """
                CREATE INDEX devices_out_of_sync ON devices (environment, verified_at)
                    WHERE verified_missing + verified_extra + verified_stale > 0
                """,
                // One row written to learn whether the store can write (cumulus doctor, /health while writes fail).
                "CREATE TABLE store_probe (id INTEGER PRIMARY KEY CHECK (id = 1), probed_at BIGINT NOT NULL)",
            ]
        ),
    ]
}
