import CumulusModel

/// The reads of a zone's past, written once (issue 37).
public enum HistoryScripts {
    /// A page of ``RecordHistoryStore/recordsChanged(since:zoneName:in:after:limit:logger:)``: the next `limit` names
    /// of the zone (every deleted record keeps its row), those of them written or deleted after `time`, and those
    /// replaced after it while live then; then each one's live version and its version at `time`.
    public static func recordsChanged(
        since time: Int64, zoneName: String, in database: DatabaseRef, after: String?, limit: Int
    ) -> TransactionScript<RecordChangesSincePage> {
        let zoneID = database.zoneID(zoneName)
        let after = after ?? ""
        return .perform(.findZone(database, zoneName: zoneName, lock: false)) { answer in
            guard let zone = try answer.zone else { throw StoreError(.zoneNotFound, "zone \(zoneName) does not exist") }
            return .perform(.scanRecordNames(zone: zone.id, after: after, limit: limit)) { answer in
                let scanned = try answer.modifiedTimes
                guard let upper = scanned.last?.name else { return .done(RecordChangesSincePage(changes: [], next: nil)) }
                let next = scanned.count < limit ? nil : upper
                return .perform(.readNamesReplaced(zone: zone.id, after: after, through: upper, since: time)) { answer in
                    let changed = Set(scanned.filter { $0.modified > time }.map(\.name)).union(try answer.list)
                    guard !changed.isEmpty else { return .done(RecordChangesSincePage(changes: [], next: next)) }
                    let names = RecordChangesSincePage.byteOrder(changed)
                    return .perform(.readRecords(zone: zone.id, zoneID: zoneID, names: names)) { answer in
                        let current = try answer.records
                        return .perform(.readVersions(zone: zone.id, zoneID: zoneID, names: names, at: time)) { answer in
                            let past = try answer.records
                            return .done(
                                RecordChangesSincePage(
                                    changes: names.map { RecordChangeSince(recordName: $0, current: current[$0], past: past[$0]) }, next: next))
                        }
                    }
                }
            }
        }
    }
}
