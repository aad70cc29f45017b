import CumulusModel
public import CumulusStore
public import Logging
import PostgresNIO

extension PostgresRecordStore {
    /// ``liveRecords(_:zoneRowID:zoneID:names:logger:)``'s statement: every lookup and most writes run it.
    private enum LiveRecords: PostgresPreparedText {
        static let name = "cumulus_live_records"
        static let sql = "SELECT \(recordColumns("r")) FROM \(recordsNamed("$2", inZone: "$1", as: "r")) WHERE NOT r.deleted"
    }

    /// Live records of a zone by name, one statement.
    static func liveRecords(_ connection: PostgresConnection, zoneRowID: Int64, zoneID: ZoneID, names: [String], logger: Logger) async throws
        -> [String: StoredRecord]
    {
        guard !names.isEmpty else { return [:] }
        var bindings = PostgresBindings()
        bindings.append(zoneRowID)
        bindings.append(names)
        let rows = try await connection.run(LiveRecords.self, bindings, logger: logger)
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
        try await read(logger: logger) { connection in
            try await Self.run(ZoneScripts.records(named: names, zoneName: zoneName, in: database, access: access), connection, logger: logger)
        }
    }

    /// Applies a batch in one transaction. The zone's row is locked first (`FOR UPDATE`) and held until commit: writers
    /// of one zone take its change sequences one after the other and commit in that order, so a feed reader never
    /// hands out a position past a change that commits later; writers of different zones do not wait for each other.
    public func modifyRecords(_ batch: RecordBatch, logger: Logger) async throws -> [RecordModificationResult] {
        let planner = self.planner
        return try await transaction(logger: logger) { connection in
            try await Self.run(ModifyRecordsScript.script(batch, planner: planner), connection, logger: logger)
        }
    }
}
