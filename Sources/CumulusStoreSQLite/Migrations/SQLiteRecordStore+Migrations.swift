import GRDB

extension SQLiteRecordStore {
    /// Named, ordered, forward-only migrations. Invariants live in the schema: foreign keys, unique and check constraints.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: containers, credentials, zones and records") { db in
            try db.execute(
                sql: """
                    CREATE TABLE containers (
                        id TEXT PRIMARY KEY NOT NULL,
                        created_at INTEGER NOT NULL
                    );
                    CREATE TABLE api_tokens (
                        token_hash BLOB PRIMARY KEY NOT NULL,
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                        created_at INTEGER NOT NULL,
                        revoked INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1))
                    );
                    CREATE TABLE users (
                        user_record_name TEXT PRIMARY KEY NOT NULL,
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        name TEXT NOT NULL COLLATE NOCASE CHECK (length(name) BETWEEN 1 AND 255),
                        email TEXT COLLATE NOCASE,
                        password_hash TEXT,
                        discoverable INTEGER NOT NULL DEFAULT 0 CHECK (discoverable IN (0, 1)),
                        created_at INTEGER NOT NULL,
                        UNIQUE (container_id, name),
                        UNIQUE (container_id, email)
                    );
                    CREATE TABLE web_auth_tokens (
                        token_hash BLOB PRIMARY KEY NOT NULL,
                        user_record_name TEXT NOT NULL REFERENCES users(user_record_name) ON DELETE CASCADE,
                        created_at INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL
                    );
                    CREATE INDEX web_auth_tokens_user ON web_auth_tokens(user_record_name);
                    CREATE TABLE server_keys (
                        key_id TEXT PRIMARY KEY NOT NULL,
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                        public_key_pem TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        revoked INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1))
                    );

                    -- One row per database: a user's private database, or a container's public database.
                    CREATE TABLE databases (
                        id INTEGER PRIMARY KEY,
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                        scope TEXT NOT NULL CHECK (scope IN ('public', 'private')),
                        owner_record_name TEXT NOT NULL,
                        -- Bumped whenever a zone of the database changes: the database change feed's position.
                        change_seq INTEGER NOT NULL DEFAULT 0,
                        UNIQUE (container_id, environment, scope, owner_record_name)
                    );
                    -- A deleted zone keeps its row (deleted = 1) so the database change feed can report it; a zone
                    -- created again under the same name is a new row.
                    CREATE TABLE zones (
                        id INTEGER PRIMARY KEY,
                        database_id INTEGER NOT NULL REFERENCES databases(id) ON DELETE CASCADE,
                        zone_name TEXT NOT NULL,
                        -- Bumped by every record write in the zone; change tags and zone change tokens derive from it.
                        change_seq INTEGER NOT NULL DEFAULT 0,
                        database_change_seq INTEGER NOT NULL DEFAULT 0,
                        deleted INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
                        created_at INTEGER NOT NULL
                    );
                    CREATE UNIQUE INDEX zones_live_name ON zones(database_id, zone_name) WHERE deleted = 0;
                    CREATE INDEX zones_database_feed ON zones(database_id, database_change_seq);
                    -- A deleted record stays as a tombstone (deleted = 1, fields NULL) for change feeds.
                    CREATE TABLE records (
                        id INTEGER PRIMARY KEY,
                        zone_id INTEGER NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                        record_name TEXT NOT NULL,
                        record_type TEXT NOT NULL,
                        change_seq INTEGER NOT NULL,
                        deleted INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
                        -- Canonical fields JSON, as TEXT so SQLite's JSON functions read it on every version.
                        fields TEXT,
                        parent_name TEXT,
                        share_name TEXT,
                        short_guid TEXT,
                        created_at INTEGER NOT NULL,
                        created_by TEXT NOT NULL,
                        created_device TEXT NOT NULL,
                        modified_at INTEGER NOT NULL,
                        modified_by TEXT NOT NULL,
                        modified_device TEXT NOT NULL,
                        UNIQUE (zone_id, record_name),
                        CHECK (deleted = 1 OR fields IS NOT NULL)
                    );
                    CREATE INDEX records_zone_feed ON records(zone_id, change_seq);
                    CREATE INDEX records_parent ON records(zone_id, parent_name) WHERE parent_name IS NOT NULL;
                    -- Reverse index of DELETE_SELF references: deleting a target deletes its sources.
                    CREATE TABLE record_references (
                        zone_id INTEGER NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                        target_name TEXT NOT NULL,
                        source_name TEXT NOT NULL,
                        PRIMARY KEY (zone_id, target_name, source_name)
                    ) WITHOUT ROWID;
                    CREATE INDEX record_references_source ON record_references(zone_id, source_name);
                    """
            )
        }
        migrator.registerMigration("v2: server secret, system-field query indexes") { db in
            try db.execute(
                sql: """
                    CREATE TABLE server_secrets (
                        name TEXT PRIMARY KEY NOT NULL,
                        value BLOB NOT NULL
                    );
                    CREATE INDEX records_created ON records(zone_id, record_type, created_at) WHERE deleted = 0;
                    CREATE INDEX records_modified ON records(zone_id, record_type, modified_at) WHERE deleted = 0;
                    CREATE INDEX users_email ON users(container_id, email) WHERE discoverable = 1;
                    """
            )
        }
        migrator.registerMigration("v3: shares, participants, shared database views") { db in
            try db.execute(
                sql: """
                    -- The stable link of a zone-wide share: the same when the zone is shared again.
                    ALTER TABLE zones ADD COLUMN short_guid TEXT;
                    CREATE TABLE shares (
                        id INTEGER PRIMARY KEY,
                        zone_id INTEGER NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                        share_record_name TEXT NOT NULL,
                        -- NULL: a zone-wide share.
                        root_record_name TEXT,
                        short_guid TEXT NOT NULL UNIQUE,
                        public_permission TEXT NOT NULL DEFAULT 'NONE' CHECK (public_permission IN ('NONE', 'READ_ONLY', 'READ_WRITE')),
                        UNIQUE (zone_id, share_record_name)
                    );
                    -- A record is the root of at most one share, and a zone has at most one zone-wide share.
                    CREATE UNIQUE INDEX shares_root ON shares(zone_id, root_record_name) WHERE root_record_name IS NOT NULL;
                    CREATE UNIQUE INDEX shares_zone_wide ON shares(zone_id) WHERE root_record_name IS NULL;
                    CREATE TABLE share_participants (
                        share_id INTEGER NOT NULL REFERENCES shares(id) ON DELETE CASCADE,
                        user_record_name TEXT NOT NULL,
                        type TEXT NOT NULL CHECK (type IN ('OWNER', 'USER', 'PUBLIC_USER')),
                        permission TEXT NOT NULL CHECK (permission IN ('READ_ONLY', 'READ_WRITE')),
                        status TEXT NOT NULL CHECK (status IN ('INVITED', 'ACCEPTED', 'REMOVED')),
                        email TEXT,
                        position INTEGER NOT NULL,
                        PRIMARY KEY (share_id, user_record_name)
                    );
                    CREATE INDEX share_participants_user ON share_participants(user_record_name, status);
                    -- Each user's shared database: a counter, and one row per owner zone shared with them. A view that
                    -- ended stays (deleted = 1) so the user's database feed reports the zone as deleted.
                    CREATE TABLE shared_databases (
                        user_record_name TEXT PRIMARY KEY NOT NULL,
                        change_seq INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE TABLE shared_zone_views (
                        user_record_name TEXT NOT NULL,
                        zone_id INTEGER NOT NULL REFERENCES zones(id),
                        view_seq INTEGER NOT NULL,
                        deleted INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
                        PRIMARY KEY (user_record_name, zone_id)
                    );
                    CREATE INDEX shared_zone_views_feed ON shared_zone_views(user_record_name, view_seq);
                    CREATE INDEX shared_zone_views_zone ON shared_zone_views(zone_id) WHERE deleted = 0;
                    -- Records that left a shared hierarchy (moved elsewhere): participants' feeds report them deleted.
                    CREATE TABLE share_exits (
                        zone_id INTEGER NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                        root_record_name TEXT NOT NULL,
                        record_name TEXT NOT NULL,
                        change_seq INTEGER NOT NULL,
                        PRIMARY KEY (zone_id, root_record_name, record_name)
                    );
                    CREATE INDEX share_exits_feed ON share_exits(zone_id, change_seq);
                    """
            )
        }
        migrator.registerMigration("v4: share-a-copy link snapshots and upload counts") { db in
            try db.execute(
                sql: """
                    CREATE TABLE link_snapshots (
                        id TEXT PRIMARY KEY NOT NULL,
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                        kind TEXT NOT NULL CHECK (kind IN ('drive', 'records')),
                        payload TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL
                    );
                    CREATE INDEX link_snapshots_expiry ON link_snapshots(expires_at);
                    CREATE TABLE link_uploads (
                        id INTEGER PRIMARY KEY,
                        container_id TEXT NOT NULL,
                        device_id TEXT NOT NULL,
                        ip_address TEXT NOT NULL,
                        created_at INTEGER NOT NULL
                    );
                    CREATE INDEX link_uploads_device ON link_uploads(container_id, device_id, created_at);
                    CREATE INDEX link_uploads_address ON link_uploads(ip_address, created_at);
                    """
            )
        }
        migrator.registerMigration("v5: participants' access changes") { db in
            try db.execute(
                sql: """
                    -- What a live view grants (JSON: zone-wide, roots, share record names), so a change of access can
                    -- be told apart from a change of data. NULL on views older than this migration: taken as unchanged.
                    ALTER TABLE shared_zone_views ADD COLUMN access TEXT;
                    -- Records a participant started or stopped seeing in a zone they still see (accepted a second
                    -- share, removed from one of two, a share stopped): their zone feed reports each one at its
                    -- position, as the record's current state or as a deletion. One row per record, the latest change.
                    CREATE TABLE participant_changes (
                        user_record_name TEXT NOT NULL,
                        zone_id INTEGER NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                        record_name TEXT NOT NULL,
                        change_seq INTEGER NOT NULL,
                        PRIMARY KEY (user_record_name, zone_id, record_name)
                    ) WITHOUT ROWID;
                    CREATE INDEX participant_changes_feed ON participant_changes(user_record_name, zone_id, change_seq);
                    """
            )
        }
        migrator.registerMigration("v6: subscriptions") { db in
            try db.execute(
                sql: """
                    -- A user's subscriptions per database; the Subscription dictionary is kept as canonical JSON.
                    CREATE TABLE subscriptions (
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                        database_scope TEXT NOT NULL CHECK (database_scope IN ('public', 'private', 'shared')),
                        user_record_name TEXT NOT NULL,
                        subscription_id TEXT NOT NULL,
                        body TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        PRIMARY KEY (container_id, environment, database_scope, user_record_name, subscription_id)
                    ) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("v7: push tokens") { db in
            try db.execute(
                sql: """
                    -- A device's courier address (tokens/create), the user it notifies, and the feed positions each of
                    -- the user's subscriptions was last notified at (JSON, owned by the push service).
                    CREATE TABLE push_tokens (
                        token TEXT PRIMARY KEY NOT NULL,
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                        user_record_name TEXT,
                        positions TEXT NOT NULL,
                        created_at INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("v8: push tokens by user") { db in
            // Trimming a user's tokens to the newest few reads them in this order.
            try db.execute(sql: "CREATE INDEX push_tokens_by_user ON push_tokens (container_id, environment, user_record_name, created_at)")
        }
        migrator.registerMigration("v9: used signatures and attempt counts") { db in
            try db.execute(
                sql: """
                    CREATE TABLE used_signatures (
                        digest BLOB PRIMARY KEY NOT NULL,
                        expires_at INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE INDEX used_signatures_expiry ON used_signatures(expires_at);
                    CREATE TABLE attempt_counts (
                        key TEXT NOT NULL,
                        window_start INTEGER NOT NULL,
                        count INTEGER NOT NULL,
                        PRIMARY KEY (key, window_start)
                    ) WITHOUT ROWID;
                    CREATE INDEX attempt_counts_window ON attempt_counts(window_start);
                    """
            )
        }
        migrator.registerMigration("v10: schemas") { db in
            try db.execute(
                sql: """
                    CREATE TABLE schema_record_types (
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL,
                        record_type TEXT NOT NULL,
                        PRIMARY KEY (container_id, environment, record_type)
                    ) WITHOUT ROWID;
                    CREATE TABLE schema_fields (
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL,
                        record_type TEXT NOT NULL,
                        field_name TEXT NOT NULL,
                        field_type TEXT NOT NULL,
                        queryable INTEGER NOT NULL DEFAULT 0,
                        sortable INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (container_id, environment, record_type, field_name)
                    ) WITHOUT ROWID;
                    """
            )
            // Records written before schemas existed define their environment's schema; production's fields stay
            // queryable and sortable, as they were (docs/SCHEMA.md, "Upgrading").
            try db.execute(
                sql: """
                    INSERT OR IGNORE INTO schema_record_types (container_id, environment, record_type)
                    SELECT DISTINCT d.container_id, d.environment, r.record_type
                    FROM records r JOIN zones z ON z.id = r.zone_id JOIN databases d ON d.id = z.database_id
                    WHERE r.deleted = 0 AND r.record_type != 'cloudkit.share';
                    INSERT OR IGNORE INTO schema_fields (container_id, environment, record_type, field_name, field_type, queryable, sortable)
                    SELECT d.container_id, d.environment, r.record_type, f.key, json_extract(f.value, '$.type'),
                        d.environment = 'production', d.environment = 'production'
                    FROM records r JOIN zones z ON z.id = r.zone_id JOIN databases d ON d.id = z.database_id, json_each(r.fields) f
                    WHERE r.deleted = 0 AND r.record_type != 'cloudkit.share' AND f.key NOT LIKE 'cloudkit.%'
                        AND json_extract(f.value, '$.type') IS NOT NULL AND json_extract(f.value, '$.type') != 'UNKNOWN_LIST';
                    """
            )
        }
        migrator.registerMigration("v11: console credentials") { db in
            try db.execute(
                sql: """
                    CREATE TABLE console_credentials (
                        token_hash BLOB PRIMARY KEY NOT NULL,
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        kind TEXT NOT NULL CHECK (kind IN ('sign-in', 'session')),
                        expires_at INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE INDEX console_credentials_expiry ON console_credentials(expires_at);
                    CREATE INDEX link_snapshots_container ON link_snapshots(container_id, environment, created_at);
                    """
            )
        }
        migrator.registerMigration("v12: asset receipts") { db in
            try db.execute(
                sql: """
                    -- A receipt assets/upload issued, what it may be saved in, and the file of its bytes once uploaded.
                    CREATE TABLE asset_uploads (
                        receipt TEXT PRIMARY KEY NOT NULL,
                        container_id TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
                        environment TEXT NOT NULL,
                        database_scope TEXT NOT NULL,
                        owner_record_name TEXT NOT NULL,
                        zone_name TEXT NOT NULL,
                        record_name TEXT,
                        field_name TEXT,
                        uploader TEXT NOT NULL,
                        file_id TEXT,
                        size INTEGER,
                        checksum TEXT,
                        created_at INTEGER NOT NULL,
                        attached INTEGER NOT NULL DEFAULT 0
                    ) WITHOUT ROWID;
                    CREATE INDEX asset_uploads_file ON asset_uploads(file_id) WHERE file_id IS NOT NULL;
                    CREATE INDEX asset_uploads_age ON asset_uploads(attached, created_at);
                    """
            )
        }
        migrator.registerMigration("v13: zone digests") { db in
            // Eight lanes of the zone's digest (each modulo 2^32) and its live record count; NULL: not computed yet.
            try db.execute(
                sql: (0..<8).map { "ALTER TABLE zones ADD COLUMN digest_\($0) INTEGER NOT NULL DEFAULT 0;" }.joined(separator: "\n")
                    + "\nALTER TABLE zones ADD COLUMN record_count INTEGER DEFAULT 0;")
            try db.execute(sql: "UPDATE zones SET record_count = NULL WHERE deleted = 0")
            _ = try SQLiteRecordStore.refreshZoneDigests(db, unknownOnly: true)
        }
        migrator.registerMigration("v14: devices") { db in
            try db.execute(
                sql: """
                    -- The installations a user syncs from (X-Cumulus-Device), for the console and the operator.
                    CREATE TABLE devices (
                        user_record_name TEXT NOT NULL REFERENCES users(user_record_name) ON DELETE CASCADE,
                        environment TEXT NOT NULL,
                        device_id TEXT NOT NULL,
                        name TEXT,
                        last_seen_at INTEGER NOT NULL,
                        last_fetched_at INTEGER,
                        -- The private database feed position the device fetched up to.
                        position INTEGER,
                        PRIMARY KEY (user_record_name, environment, device_id)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v15: record history") { db in
            try db.execute(
                sql: """
                    -- The versions records had before a write replaced or deleted them, for restores and undelete; each
                    -- was the record from modified_at until replaced_at. Pruned after the retention window.
                    CREATE TABLE record_history (
                        id INTEGER PRIMARY KEY,
                        zone_id INTEGER NOT NULL REFERENCES zones(id) ON DELETE CASCADE,
                        record_name TEXT NOT NULL,
                        record_type TEXT NOT NULL,
                        change_seq INTEGER NOT NULL,
                        fields TEXT NOT NULL,
                        parent_name TEXT,
                        created_at INTEGER NOT NULL,
                        created_by TEXT NOT NULL,
                        created_device TEXT NOT NULL,
                        modified_at INTEGER NOT NULL,
                        modified_by TEXT NOT NULL,
                        modified_device TEXT NOT NULL,
                        replaced_at INTEGER NOT NULL
                    );
                    CREATE INDEX record_history_zone ON record_history(zone_id, record_name, replaced_at);
                    CREATE INDEX record_history_age ON record_history(replaced_at);
                    -- When no live record held a receipt any more, while the history keeps its file; NULL: held.
                    ALTER TABLE asset_uploads ADD COLUMN detached_at INTEGER;
                    """)
        }
        migrator.registerMigration("v16: device verification, store probe") { db in
            try db.execute(
                sql: """
                    -- What each device reported of its last verification: zones compared, records that differed, and
                    -- the names of (at most 10) zones that differed, one per line. NULL: never reported.
                    ALTER TABLE devices ADD COLUMN verified_at INTEGER;
                    ALTER TABLE devices ADD COLUMN verified_zones INTEGER;
                    ALTER TABLE devices ADD COLUMN verified_missing INTEGER;
                    ALTER TABLE devices ADD COLUMN verified_extra INTEGER;
                    ALTER TABLE devices ADD COLUMN verified_stale INTEGER;
                    ALTER TABLE devices ADD COLUMN verified_zones_out TEXT;
                    CREATE INDEX devices_out_of_sync ON devices(environment, verified_at)
                        WHERE verified_missing + verified_extra + verified_stale > 0;
                    -- One row written to learn whether the store can write (cumulus doctor, /health while writes fail).
                    CREATE TABLE store_probe (id INTEGER PRIMARY KEY CHECK (id = 1), probed_at INTEGER NOT NULL);
                    """)
        }
        return migrator
    }
}
