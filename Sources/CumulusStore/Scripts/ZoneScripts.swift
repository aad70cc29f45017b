public import CumulusModel

/// The sequences of zones, written once: creating and deleting them, and reading a zone's records as a caller may
/// see them.
public enum ZoneScripts {
    /// Creates and deletes zones in order; the database is created with its default zone on first use. A create that
    /// would leave the database with more than `maximumZones` live zones (its default zone among them) fails with
    /// `QUOTA_EXCEEDED` and the batch's other operations go on; creating a zone that exists is not one. `Int.max` is no
    /// limit, and counts nothing.
    public static func modify(
        _ operations: [ZoneOperation], in database: DatabaseRef, timestamp: Int64, maximumZones: Int
    ) -> TransactionScript<[ZoneModificationResult]> {
        .perform(.createDatabase(database, timestamp: timestamp)) { answer in
            let databaseID = try answer.sequence
            guard maximumZones < .max, operations.contains(where: { $0.operationType == .create }) else {
                return try modify(operations, in: database, databaseID: databaseID, timestamp: timestamp, maximumZones: nil, liveZones: 0)
            }
            return .perform(.countZones(databaseID: databaseID)) { answer in
                try modify(
                    operations, in: database, databaseID: databaseID, timestamp: timestamp, maximumZones: maximumZones, liveZones: try answer.count)
            }
        }
    }

    private static func modify(
        _ operations: [ZoneOperation], in database: DatabaseRef, databaseID: Int64, timestamp: Int64, maximumZones: Int?, liveZones: Int
    ) throws -> TransactionScript<[ZoneModificationResult]> {
        var results: [ZoneModificationResult] = []
        var live = liveZones
        return try TransactionScript.forEach(operations) { operation in
            let name = operation.zoneID.zoneName
            let zoneID = database.zoneID(name)
            switch operation.operationType {
            case .create:
                let create = TransactionScript<Void>.perform(.createZone(databaseID: databaseID, zoneName: name, timestamp: timestamp)) {
                    answer in
                    let (zone, created) = try answer.createdZone
                    results.append(.saved(ZoneState(zoneID: zoneID, changeSequence: zone.changeSequence, incarnation: zone.id)))
                    guard created else { return .finished }
                    live += 1
                    return .perform(.touchZone(zone: zone.id, databaseID: databaseID, sequence: nil))
                }
                guard let maximum = maximumZones, live >= maximum else { return create }
                // At the limit only a zone that exists can be created (again).
                return .perform(.findZone(database, zoneName: name, lock: false)) { answer in
                    if try answer.zone != nil { return create }
                    results.append(
                        .failed(zoneID, .quotaExceeded, "zone \(name): a database may have \(maximum) zones, its default zone among them"))
                    return .finished
                }
            case .delete:
                return .perform(.findZone(database, zoneName: name, lock: true)) { answer in
                    guard let zone = try answer.zone else {
                        results.append(.failed(zoneID, .zoneNotFound, "zone \(name) does not exist"))
                        return .finished
                    }
                    results.append(.deleted(zoneID))
                    live -= 1
                    return delete(zone)
                }
            }
        }.map { results }
    }

    /// Deletes a zone's records and shares and keeps its row as a tombstone for the database feed; participants'
    /// views of it end, so their devices drop it. Rows in the order every writer takes them: the zone, its database,
    /// then shared databases.
    public static func delete(_ zone: ZoneRow) -> TransactionScript<Void> {
        .perform([
            .deleteZone(zone: zone.id),
            .touchZone(zone: zone.id, databaseID: zone.databaseID, sequence: nil),
            .advanceViews(zone: zone.id, ending: true),
        ])
    }

    /// A zone's live records by name; for a participant, only those their shares let them see. The default zone of a
    /// database never written holds nothing.
    public static func records(
        named names: [String], zoneName: String, in database: DatabaseRef, access: ParticipantAccess?
    ) -> TransactionScript<[String: StoredRecord]> {
        .perform(.findZone(database, zoneName: zoneName, lock: false)) { answer in
            guard let zone = try answer.zone else {
                if zoneName == ZoneID.defaultZoneName { return .done([:]) }
                throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist")
            }
            return .perform(.readRecords(zone: zone.id, zoneID: database.zoneID(zoneName), names: names)) { answer in
                let found = try answer.records
                guard let access, !access.zoneWide else { return .done(found) }
                let shareRecords = access.shareRecordNames
                guard !found.isEmpty, !access.roots.isEmpty else { return .done(found.filter { shareRecords.contains($0.key) }) }
                return .perform(.readRoots(zone: zone.id, names: Array(found.keys), among: access.roots)) { answer in
                    let placed = try answer.names
                    return .done(found.filter { placed[$0.key] != nil || shareRecords.contains($0.key) })
                }
            }
        }
    }
}
