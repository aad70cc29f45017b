import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    /// One page of a database's zone feed, read in one snapshot (`REPEATABLE READ`): its rows and its final position
    /// agree. A zone's position is taken under its database's row lock, held until commit, so positions commit in
    /// order and a change that commits after this snapshot always lands after the position returned.
    public func databaseChanges(in database: DatabaseRef, after sequence: Int64, limit: Int, logger: Logger) async throws -> DatabaseChangePage {
        try await read(logger: logger) { connection in
            guard let databaseID = try await Self.databaseID(connection, database, logger: logger) else {
                return DatabaseChangePage(zones: [], sequence: 0, moreComing: false)
            }
            let rows = try await connection.query(
                """
                SELECT id, zone_name, change_seq, database_change_seq, deleted FROM zones
                WHERE database_id = \(databaseID) AND database_change_seq > \(sequence) ORDER BY database_change_seq LIMIT \(limit + 1)
                """, logger: logger)
            var zones: [DatabaseZoneChange] = []
            var lastPosition = sequence
            var moreComing = false
            for try await (id, name, changeSequence, position, deleted) in rows.decode((Int64, String, Int64, Int64, Bool).self) {
                if zones.count == limit {
                    moreComing = true
                    break
                }
                let zoneID = database.zoneID(name)
                zones.append(deleted ? .deleted(zoneID) : .changed(ZoneState(zoneID: zoneID, changeSequence: changeSequence, incarnation: id)))
                lastPosition = position
            }
            if moreComing { return DatabaseChangePage(zones: zones, sequence: lastPosition, moreComing: true) }
            var position = sequence
            for try await current in try await connection.query("SELECT change_seq FROM databases WHERE id = \(databaseID)", logger: logger)
                .decode(Int64.self)
            {
                position = max(current, sequence)
            }
            return DatabaseChangePage(zones: zones, sequence: position, moreComing: false)
        }
    }
}

extension PostgresRecordStore {
    /// One page of a zone's feed, read in one snapshot. Writers of a zone hold its row lock from taking their sequences
    /// until they commit, so sequences commit in order: everything at or below the zone's committed sequence is
    /// visible to this snapshot, and a change that commits later has a higher sequence than the position returned.
    public func zoneChanges(_ request: ZoneChangeRequest, logger: Logger) async throws -> ZoneChangePage {
        try await read(logger: logger) { connection in
            let zoneID = request.database.zoneID(request.zoneName)
            guard let zone = try await Self.zoneRow(connection, request.database, zoneName: request.zoneName, logger: logger) else {
                // The default zone of a database never written: empty, and its token stays good once it is written.
                if request.zoneName == ZoneID.defaultZoneName, request.incarnation == nil || request.incarnation == 0 {
                    return ZoneChangePage(
                        zone: ZoneState(zoneID: zoneID, changeSequence: 0, incarnation: 0), changes: [], sequence: 0, moreComing: false,
                        digest: request.recordTypes == nil ? .empty : nil)
                }
                throw StoreError(.zoneNotFound, "zone \(request.zoneName) does not exist")
            }
            if !request.matches(incarnation: zone.id) {
                throw StoreError(.invalidState, "zone \(request.zoneName) was deleted and created again since this change token")
            }
            var changes: [ZoneRecordChange] = []
            changes.reserveCapacity(min(request.limit, 1024))
            // A participant's feed can meet a record twice in a page (changed, then seen or unseen): the later wins.
            var indexByName: [String: Int] = [:]
            var lastSequence = request.after
            var moreComing = false
            let rows = try await connection.query(try Self.zoneFeedQuery(request, zoneRowID: zone.id), logger: logger)
            for try await row in rows {
                // Columns: deleted, recordColumns, then the feed position.
                let reader = RowReader(row)
                let name: String = try reader[1]
                let change: ZoneRecordChange =
                    try reader[0, as: Bool.self]
                    ? .deleted(recordName: name, recordType: try reader[2]) : .changed(try Self.storedRecord(reader, zoneID: zoneID, offset: 1))
                if let index = indexByName[name] {
                    changes[index] = change
                    lastSequence = try reader[14]
                    continue
                }
                if changes.count == request.limit {
                    moreComing = true
                    break
                }
                lastSequence = try reader[14]
                if request.access != nil { indexByName[name] = changes.count }
                changes.append(change)
            }
            let state = ZoneState(zoneID: zoneID, changeSequence: zone.changeSequence, incarnation: zone.id)
            // The page that ends the feed carries the digest of what the reader holds once they applied it, read in
            // this snapshot.
            var digest: ZoneDigest?
            if !moreComing, request.recordTypes == nil {
                if let access = request.access, !access.zoneWide {
                    digest = try await Self.scan(DigestScan(), connection, zone: zone.id, range: .all, access: access, logger: logger).digest
                } else {
                    digest = try await Self.storedDigest(connection, zone: zone.id, logger: logger)
                }
            }
            return ZoneChangePage(
                zone: state, changes: changes, sequence: moreComing ? lastSequence : max(zone.changeSequence, request.after), moreComing: moreComing,
                digest: digest)
        }
    }

    /// The query of one feed page, as the SQLite store's `zoneFeedStatement`: the owner reads the zone's records in
    /// sequence order; a participant reads, merged in position order, the records they see now, records that left a
    /// hierarchy they see (`share_exits`, as deletions), and records whose visibility to them changed
    /// (`participant_changes`). Columns: `deleted`, ``recordColumns``, the position.
    static func zoneFeedQuery(_ request: ZoneChangeRequest, zoneRowID: Int64) throws -> PostgresQuery {
        let types = request.recordTypes.map { Array($0) }
        let columns = recordColumns("r")
        guard let access = request.access else {
            var sql = "SELECT r.deleted, \(columns), r.change_seq FROM records r WHERE r.zone_id = $1 AND r.change_seq > $2"
            if types != nil { sql += " AND r.record_type = ANY($4)" }
            sql += " ORDER BY r.change_seq LIMIT $3"
            return PostgresQuery(unsafeSQL: sql, binds: try binds(zoneRowID, request.after, Int64(request.limit + 1), types ?? []))
        }
        // Parameters: $1 zone, $2 position, $3 limit, $4 record types, $5 roots, $6 share records, $7 user.
        var sql = ""
        let visible: (String) -> String
        if access.zoneWide {
            visible = { _ in "true" }
        } else {
            sql = """
                WITH RECURSIVE tree(name) AS (
                    SELECT unnest($5::text[]) COLLATE "C"
                    UNION SELECT r.record_name FROM records r JOIN tree ON r.zone_id = $1 AND r.parent_name = tree.name
                )

                """
            visible = { column in "(\(column) IN (SELECT name FROM tree) OR \(column) = ANY($6))" }
        }
        let typeFilter = types == nil ? "" : " AND r.record_type = ANY($4)"
        sql += """
            SELECT r.deleted, \(columns), r.change_seq AS position FROM records r
            WHERE r.zone_id = $1 AND r.change_seq > $2 AND \(visible("r.record_name"))\(typeFilter)
            """
        if !access.zoneWide {
            sql += """

                UNION ALL SELECT true, \(columns), e.change_seq FROM share_exits e
                JOIN records r ON r.zone_id = e.zone_id AND r.record_name = e.record_name
                WHERE e.zone_id = $1 AND e.change_seq > $2 AND e.root_record_name = ANY($5)
                AND NOT \(visible("e.record_name"))\(typeFilter)
                """
        }
        sql += """

            UNION ALL SELECT CASE WHEN \(visible("r.record_name")) THEN r.deleted ELSE true END, \(columns), p.change_seq
            FROM participant_changes p JOIN records r ON r.zone_id = p.zone_id AND r.record_name = p.record_name
            WHERE p.user_record_name = $7 AND p.zone_id = $1 AND p.change_seq > $2\(typeFilter)
            ORDER BY position LIMIT $3
            """
        return PostgresQuery(
            unsafeSQL: sql,
            binds: try binds(
                zoneRowID, request.after, Int64(request.limit + 1), types ?? [], Array(access.roots), Array(access.shareRecordNames),
                access.userRecordName))
    }
}
