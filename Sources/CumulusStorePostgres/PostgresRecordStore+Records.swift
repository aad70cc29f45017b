public import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    /// Live records of a zone by name, one statement.
    static func liveRecords(_ connection: PostgresConnection, zoneRowID: Int64, zoneID: ZoneID, names: [String], logger: Logger) async throws
        -> [String: StoredRecord]
    {
        guard !names.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            SELECT \(unescaped: recordColumns) FROM records
            WHERE zone_id = \(zoneRowID) AND NOT deleted AND record_name = ANY(\(names))
            """, logger: logger)
        var records: [String: StoredRecord] = [:]
        records.reserveCapacity(names.count)
        for try await row in rows {
            let record = try storedRecord(RowReader(row), zoneID: zoneID)
            records[record.header.recordName] = record
        }
        return records
    }

    public func records(
        named names: [String], zoneName: String, in database: DatabaseRef, access: ParticipantAccess?, logger: Logger
    ) async throws -> [String: StoredRecord] {
        try await transaction(snapshot: true, logger: logger) { connection in
            guard let zone = try await Self.zoneRow(connection, database, zoneName: zoneName, logger: logger) else {
                // The default zone of a database never written holds nothing.
                if zoneName == ZoneID.defaultZoneName { return [:] }
                throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
            }
            let found = try await Self.liveRecords(connection, zoneRowID: zone.id, zoneID: database.zoneID(zoneName), names: names, logger: logger)
            guard let access else { return found }
            let visible = try await Self.visibleNames(Array(found.keys), zoneRowID: zone.id, access: access, connection, logger: logger)
            return found.filter { visible.contains($0.key) }
        }
    }

    /// Applies a batch in one transaction. The zone's row is locked first (`FOR UPDATE`) and held until commit: writers
    /// of one zone take its change sequences one after the other and commit in that order, so a feed reader never
    /// hands out a position past a change that commits later; writers of different zones do not wait for each other.
    public func modifyRecords(_ batch: RecordBatch, logger: Logger) async throws -> [RecordModificationResult] {
        let planner = self.planner
        return try await transaction(logger: logger) { connection in
            var zone = try await Self.zoneRow(connection, batch.database, zoneName: batch.zoneName, forUpdate: true, logger: logger)
            if zone == nil, batch.zoneName == ZoneID.defaultZoneName {
                // The database's first write: it and its default zone are created.
                _ = try await Self.ensureDatabase(connection, batch.database, timestamp: batch.timestamp, logger: logger)
                zone = try await Self.zoneRow(connection, batch.database, zoneName: batch.zoneName, forUpdate: true, logger: logger)
            }
            guard let zone else { throw StoreError(.zoneNotFound, "zone \(batch.zoneName) does not exist") }
            let databaseID = zone.databaseID
            let zoneID = batch.database.zoneID(batch.zoneName)
            let read = try await Self.liveRecords(
                connection, zoneRowID: zone.id, zoneID: zoneID, names: Array(batch.namesToRead), logger: logger)
            var (plan, existing) = try await Self.plan(batch, existing: read, planner: planner, zoneRowID: zone.id, connection, logger: logger)
            let shareWork = try await Self.prepareShareChanges(
                &plan, batch: batch, existing: existing, zoneRowID: zone.id, connection, logger: logger)

            var sequence = zone.changeSequence
            var saved: [StoredRecord] = []
            if !plan.isEmpty {
                saved = try await Self.apply(plan, connection, zoneRowID: zone.id, zoneID: zoneID, batch: batch, sequence: &sequence, logger: logger)
                try await Self.trackHierarchyMoves(
                    connection, zoneRowID: zone.id, existing: existing, writes: plan.writes, sequence: &sequence, logger: logger)
                // Rows are locked in one order everywhere (zone, database, then shared databases), so writers of one
                // database's zones never wait for each other in a circle.
                try await Self.finishZoneWrite(connection, zoneRowID: zone.id, databaseID: databaseID, sequence: sequence, logger: logger)
                try await Self.applyShareChanges(shareWork, zoneRowID: zone.id, batch: batch, connection, logger: logger)
                // Share changes and moves may have given records new change tags: answer with what is stored now.
                let movedAny = plan.writes.contains { write in existing[write.recordName].map { $0.header.parent != write.parent } ?? false }
                if !shareWork.isEmpty || movedAny {
                    let names = saved.map(\.header.recordName)
                    let current = try await Self.liveRecords(connection, zoneRowID: zone.id, zoneID: zoneID, names: names, logger: logger)
                    saved = saved.map { current[$0.header.recordName] ?? $0 }
                }
            }
            let results = plan.results(saved: saved)
            try await Self.attachAssets(batch.attachments(savedIn: results), connection, logger: logger)
            return results
        }
    }

    /// Writes a plan with set-based statements: one upsert of every written record (`UNNEST` of column arrays), the
    /// `DELETE_SELF` reference index, then explicit and cascading deletions, one statement per step.
    private static func apply(
        _ plan: RecordBatchPlan, _ connection: PostgresConnection, zoneRowID: Int64, zoneID: ZoneID, batch: RecordBatch, sequence: inout Int64,
        logger: Logger
    ) async throws -> [StoredRecord] {
        var saved: [StoredRecord] = []
        saved.reserveCapacity(plan.writes.count)
        if !plan.writes.isEmpty {
            // A record written twice in one batch takes two sequences; its row holds the last write (one upsert may
            // not touch a row twice).
            var lastWrite: [String: Int] = [:]
            for (index, write) in plan.writes.enumerated() {
                sequence += 1
                saved.append(write.storedRecord(zoneID: zoneID, changeSequence: sequence))
                lastWrite[write.recordName] = index
            }
            let rows = plan.writes.indices.filter { lastWrite[plan.writes[$0].recordName] == $0 }
            let writes = rows.map { plan.writes[$0] }
            try await connection.query(
                """
                INSERT INTO records (zone_id, record_name, record_type, change_seq, deleted, fields, parent_name, share_name, short_guid,
                    created_at, created_by, created_device, modified_at, modified_by, modified_device)
                SELECT \(zoneRowID), u.name, u.type, u.seq, false, u.fields, u.parent, u.share, u.guid, u.ca, u.cb, u.cd, u.ma, u.mb, u.md
                FROM UNNEST(\(writes.map(\.recordName)), \(writes.map(\.recordType)), \(rows.map { saved[$0].changeSequence }),
                    \(writes.map { String(decoding: $0.fieldsJSON, as: UTF8.self) }), \(NullableTextArray(writes.map(\.parent))),
                    \(NullableTextArray(writes.map { $0.share?.recordName })), \(NullableTextArray(writes.map(\.shortGUID))),
                    \(writes.map(\.created.timestamp)), \(writes.map(\.created.userRecordName)), \(writes.map(\.created.deviceID)),
                    \(writes.map(\.modified.timestamp)), \(writes.map(\.modified.userRecordName)), \(writes.map(\.modified.deviceID)))
                    AS u(name, type, seq, fields, parent, share, guid, ca, cb, cd, ma, mb, md)
                ON CONFLICT (zone_id, record_name) DO UPDATE SET
                    record_type = excluded.record_type, change_seq = excluded.change_seq, deleted = false, fields = excluded.fields,
                    parent_name = excluded.parent_name, share_name = excluded.share_name, short_guid = excluded.short_guid,
                    created_at = excluded.created_at, created_by = excluded.created_by, created_device = excluded.created_device,
                    modified_at = excluded.modified_at, modified_by = excluded.modified_by, modified_device = excluded.modified_device
                """, logger: logger)

            let sources = writes.map(\.recordName)
            try await connection.query(
                "DELETE FROM record_references WHERE zone_id = \(zoneRowID) AND source_name = ANY(\(sources))", logger: logger)
            let references = writes.flatMap { write in write.deleteSelfTargets.map { (target: $0, source: write.recordName) } }
            if !references.isEmpty {
                try await connection.query(
                    """
                    INSERT INTO record_references (zone_id, target_name, source_name)
                    SELECT \(zoneRowID), t, s FROM UNNEST(\(references.map(\.target)), \(references.map(\.source))) AS u(t, s)
                    ON CONFLICT DO NOTHING
                    """, logger: logger)
            }
        }

        guard !plan.deletions.isEmpty else { return saved }
        // Follow DELETE_SELF references breadth-first until no live record points at a deleted one: one statement per
        // level of the cascade.
        var deleted = Set(plan.deletions)
        var frontier = plan.deletions
        while !frontier.isEmpty {
            let rows = try await connection.query(
                """
                SELECT DISTINCT r.source_name FROM record_references r
                JOIN records s ON s.zone_id = r.zone_id AND s.record_name = r.source_name AND NOT s.deleted
                WHERE r.zone_id = \(zoneRowID) AND r.target_name = ANY(\(frontier))
                """, logger: logger)
            var next: [String] = []
            for try await source in rows.decode(String.self) where deleted.insert(source).inserted { next.append(source) }
            frontier = next
        }
        // Explicit deletions first, in request order, then cascades; each name takes one sequence.
        var ordered: [String] = []
        var seen = Set<String>()
        for name in plan.deletions + deleted.subtracting(plan.deletions).sorted() where seen.insert(name).inserted { ordered.append(name) }
        let sequences = ordered.indices.map { sequence + Int64($0) + 1 }
        sequence += Int64(ordered.count)
        try await connection.query(
            """
            UPDATE records r SET deleted = true, fields = NULL, change_seq = u.seq, share_name = NULL,
                modified_at = \(batch.timestamp), modified_by = \(batch.author), modified_device = \(batch.deviceID)
            FROM UNNEST(\(ordered), \(sequences)) AS u(name, seq)
            WHERE r.zone_id = \(zoneRowID) AND r.record_name = u.name AND NOT r.deleted
            """, logger: logger)
        try await connection.query(
            "DELETE FROM record_references WHERE zone_id = \(zoneRowID) AND source_name = ANY(\(ordered))", logger: logger)
        // Deleting a share's root, or its share record, ends the share, as in CloudKit.
        try await endShares(connection, zoneRowID: zoneRowID, deletedNames: ordered, sequence: &sequence, batch: batch, logger: logger)
        return saved
    }
}
