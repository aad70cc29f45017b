import CumulusModel

/// The sequence of one `records/modify`, written once: everything a batch changes (its records, the deletions they
/// cascade to, the shares they start, change or end, the views of participants, the assets they attach) in the one
/// transaction the store runs it in.
///
/// The zone's row is read first, locked where the store locks: writers of one zone take its change sequences one after
/// the other. Rows are then taken in one order everywhere (zone, its database, shared databases by user), so writers of
/// one database's zones never wait for each other in a circle.
public struct ModifyRecordsScript {
    let batch: RecordBatch
    let planner: RecordBatchPlanner
    let zoneID: ZoneID
    /// The batch's ``RecordBatch/namesToRead``, gathered once: a batch of 200 visits every field of every operation.
    let namesToRead: Set<String>

    init(batch: RecordBatch, planner: RecordBatchPlanner, zoneID: ZoneID) {
        self.batch = batch
        self.planner = planner
        self.zoneID = zoneID
        self.namesToRead = batch.operations.isEmpty ? [] : batch.namesToRead
    }

    /// The script for `batch`.
    public static func script(_ batch: RecordBatch, planner: RecordBatchPlanner) -> TransactionScript<[RecordModificationResult]> {
        ModifyRecordsScript(batch: batch, planner: planner, zoneID: batch.database.zoneID(batch.zoneName)).start()
    }

    private func start() -> TransactionScript<[RecordModificationResult]> {
        let reading = Array(namesToRead)
        return .perform(.findZone(batch.database, zoneName: batch.zoneName, lock: true, thenReading: reading)) { answer in
            if let zone = try answer.zone { return try write(in: zone) }
            guard batch.zoneName == ZoneID.defaultZoneName else { throw StoreError(.zoneNotFound, "zone \(batch.zoneName) does not exist") }
            // The database's first write: it and its default zone are created.
            return .perform(.createDatabase(batch.database, timestamp: batch.timestamp)) { _ in
                .perform(.findZone(batch.database, zoneName: batch.zoneName, lock: true)) { answer in
                    guard let zone = try answer.zone else { throw StoreError(.zoneNotFound, "zone \(batch.zoneName) does not exist") }
                    return try write(in: zone)
                }
            }
        }
    }

    private func write(in zone: ZoneRow) throws -> TransactionScript<[RecordModificationResult]> {
        let batch = self.batch
        return try modify(in: zone).then { results in
            // A participant who deleted share records leaves those shares, after the batch's own writes.
            try TransactionScript.forEach(batch.sharesLeft) { name in
                ShareScripts.leave(shareRecordName: name, in: zone, userRecordName: batch.author)
            }.map { results }
        }
    }

    private func modify(in zone: ZoneRow) throws -> TransactionScript<[RecordModificationResult]> {
        guard !batch.operations.isEmpty else { return .done([]) }
        return .perform(.readRecords(zone: zone.id, zoneID: zoneID, names: Array(namesToRead))) { answer in
            let read = try answer.records
            return try plan(existing: read, zone: zone).then { plan, existing in
                try checkShareChanges(plan, existing: existing, zone: zone).then { plan, shareChanges in
                    try apply(plan, existing: existing, read: read, shareChanges: shareChanges, zone: zone)
                }
            }
        }
    }

    // MARK: - Planning

    /// Plans the batch; for a participant, as ``SharePlanner/plan(_:access:existing:placed:planner:)`` does, reading
    /// where the records sit in the shared hierarchies.
    private func plan(
        existing: [String: StoredRecord], zone: ZoneRow
    ) -> TransactionScript<(RecordBatchPlan, visible: [String: StoredRecord])> {
        guard let access = batch.access else { return .done((planner.plan(batch, existing: existing), existing)) }
        let toPlace = SharePlanner.namesToPlace(batch, existing: existing)
        let planner = self.planner
        let batch = self.batch
        guard !access.zoneWide, !toPlace.isEmpty, !access.roots.isEmpty else {
            return .done(SharePlanner.plan(batch, access: access, existing: existing, placed: [:], planner: planner))
        }
        return .perform(.readRoots(zone: zone.id, names: Array(toPlace), among: access.roots)) { answer in
            .done(SharePlanner.plan(batch, access: access, existing: existing, placed: try answer.names, planner: planner))
        }
    }

    /// Reads what ``SharePlanner/checkShareChanges(_:batch:facts:)`` needs about the zone (a read per fact, for all
    /// candidate roots at once), and checks the batch's share changes, failing their operations where they break a rule.
    private func checkShareChanges(
        _ plan: RecordBatchPlan, existing: [String: StoredRecord], zone: ZoneRow
    ) -> TransactionScript<(RecordBatchPlan, [PlannedShareChange])> {
        guard !batch.shareChanges.isEmpty else { return .done((plan, [])) }
        let batch = self.batch
        let zoneID = self.zoneID
        return .perform(.readShareFacts(zone: zone.id)) { answer in
            var facts = ZoneShareFacts(shares: try answer.shares, liveRoots: [], sharedAncestors: [:], sharedDescendants: [:])
            let candidates = Array(SharePlanner.rootsToCheck(batch))
            let hierarchyRoots = facts.hierarchyRoots
            func check() -> TransactionScript<(RecordBatchPlan, [PlannedShareChange])> {
                var plan = plan
                let changes = SharePlanner.checkShareChanges(&plan, batch: batch, facts: facts)
                return .done((plan, changes))
            }
            guard !candidates.isEmpty else { return check() }
            return .perform(.readRecords(zone: zone.id, zoneID: zoneID, names: candidates)) { answer in
                facts.liveRoots = Set(try answer.records.keys)
                guard !hierarchyRoots.isEmpty else { return check() }
                return .perform(.readRoots(zone: zone.id, names: candidates, among: hierarchyRoots)) { answer in
                    facts.sharedAncestors = try answer.names.filter { $0.key != $0.value }
                    return .perform(.readRootsBelow(zone: zone.id, candidates: candidates, among: hierarchyRoots)) { answer in
                        facts.sharedDescendants = try answer.names
                        return check()
                    }
                }
            }
        }
    }

    // MARK: - Writing

    /// Writes the plan. `read` is what the batch read under the zone's lock (``RecordBatch/namesToRead``), before a
    /// participant's plan kept only what they may see.
    private func apply(
        _ plan: RecordBatchPlan, existing: [String: StoredRecord], read: [String: StoredRecord], shareChanges: [PlannedShareChange],
        zone: ZoneRow
    ) throws -> TransactionScript<[RecordModificationResult]> {
        let zoneID = self.zoneID
        guard !plan.isEmpty else { return try finish(plan, saved: []) }
        // The batch takes the zone's sequences in memory and stores the last one when its records are written.
        var sequence = zone.changeSequence
        let sequences = plan.writes.map { _ in
            sequence += 1
            return sequence
        }
        let saved = zip(plan.writes, sequences).map { $0.storedRecord(zoneID: zoneID, changeSequence: $1) }
        // The zone's digest: what the saves and deletions replaced goes, what they wrote comes.
        let written = Dictionary(zip(plan.writes.map(\.recordName), sequences), uniquingKeysWith: { _, last in last })
        let replacedNames = plan.writes.map(\.recordName).filter { existing[$0] != nil }
        let finished: TransactionScript<Void>
        if plan.deletions.isEmpty, SharePlanner.moves(plan.writes, existing: existing, shareRoots: []).isEmpty,
            written.keys.allSatisfy(namesToRead.contains)
        {
            // Only writes, each of a name read under the zone's lock: what they replace is what was read, so the digest
            // is known before they are saved, and the versions they replace are kept, the records saved and the zone's
            // write ended in one step (one round trip on PostgreSQL).
            let replaced = read.filter { written[$0.key] != nil }.mapValues(\.changeSequence)
            let digest = ZoneDigest.change(replacing: replaced, with: written)
            finished = .perform(
                .saveRecordsFinishingZone(
                    zone, writes: plan.writes, sequences: sequences, keepingVersionsOf: batch.keepsHistory ? replacedNames : [],
                    replacedAt: batch.timestamp, digest: digest))
        } else {
            let save: TransactionScript<ZoneDigest> =
                plan.writes.isEmpty
                ? .done(.empty)
                : keepVersions(of: replacedNames, zone: zone).then {
                    .perform(.saveRecords(zone: zone.id, writes: plan.writes, sequences: sequences)) { answer in
                        .done(ZoneDigest.change(replacing: try answer.liveSequences, with: written))
                    }
                }
            finished = save.then { digest in
                delete(plan.deletions, zone: zone, after: sequence).map { ($0.sequence, digest.adding($0.digest)) }
            }.then { sequence, digest in
                trackHierarchyMoves(plan.writes, existing: existing, zone: zone, after: sequence).map { ($0, digest) }
            }.then { sequence, digest in
                // The zone takes its new sequence and digest, and moves to the head of its database's feed and of every viewer's.
                TransactionScript.perform(.finishZoneWrite(zone: zone.id, databaseID: zone.databaseID, sequence: sequence, digest: digest))
            }
        }
        return try finished.then {
            try applyShareChanges(shareChanges, zone: zone)
        }.then { () -> TransactionScript<[StoredRecord]> in
            // Share changes and moves may have given records new change tags: answer with what is stored now.
            let movedAny = plan.writes.contains { write in existing[write.recordName].map { $0.header.parent != write.parent } ?? false }
            guard !shareChanges.isEmpty || movedAny else { return .done(saved) }
            return .perform(.readRecords(zone: zone.id, zoneID: zoneID, names: saved.map(\.header.recordName))) { answer in
                let current = try answer.records
                return .done(saved.map { current[$0.header.recordName] ?? $0 })
            }
        }.then { saved in
            try finish(plan, saved: saved)
        }
    }

    /// The results, once the uploaded assets the saved records reference are attached to them.
    private func finish(_ plan: RecordBatchPlan, saved: [StoredRecord]) throws -> TransactionScript<[RecordModificationResult]> {
        let results = plan.results(saved: saved)
        let attachments = batch.attachments(savedIn: results)
        guard !attachments.isEmpty else { return .done(results) }
        return .perform(.attachAssets(attachments)) { _ in .done(results) }
    }

    /// With history on, the live versions of `names` go to the zone's history before the batch replaces or deletes
    /// them, in one statement (a batch of creates pays nothing).
    private func keepVersions(of names: [String], zone: ZoneRow) -> TransactionScript<Void> {
        guard batch.keepsHistory, !names.isEmpty else { return .finished }
        return .perform(.keepVersions(zone: zone.id, names: names, replacedAt: batch.timestamp))
    }

    /// Deletes the plan's records and, following `DELETE_SELF` references breadth-first (a read per level), every
    /// live record that points at a deleted one; explicit deletions first, in request order, then cascades, each name
    /// one sequence. Deleting a share's root, or its share record, ends the share, as in CloudKit. Answers the last
    /// sequence taken, and how the deletions change the zone's digest.
    private func delete(_ deletions: [String], zone: ZoneRow, after sequence: Int64) -> TransactionScript<(sequence: Int64, digest: ZoneDigest)> {
        guard !deletions.isEmpty else { return .done((sequence, .empty)) }
        var deleted = Set(deletions)
        func cascade(_ frontier: [String]) -> TransactionScript<Set<String>> {
            guard !frontier.isEmpty else { return .done(deleted) }
            return .perform(.readReferrers(zone: zone.id, targets: frontier)) { answer in
                cascade(try answer.list.filter { deleted.insert($0).inserted })
            }
        }
        let batch = self.batch
        return cascade(deletions).then { deleted in
            var seen = Set<String>()
            let ordered = (deletions + deleted.subtracting(deletions).sorted()).filter { seen.insert($0).inserted }
            let sequences = ordered.indices.map { sequence + Int64($0) + 1 }
            let modified = RecordStamp(timestamp: batch.timestamp, userRecordName: batch.author, deviceID: batch.deviceID)
            return keepVersions(of: ordered, zone: zone).then {
                .perform(.deleteRecords(zone: zone.id, names: ordered, sequences: sequences, modified: modified)) { answer in
                    let digest = ZoneDigest.change(replacing: try answer.liveSequences, with: [:])
                    return endShares(deleted: ordered, zone: zone, after: sequence + Int64(ordered.count)).map { ($0, digest) }
                }
            }
        }
    }

    /// Ends the shares whose record or root was deleted (``SharePlanner/endings(of:deleted:)``): participants lose
    /// access, and the surviving half (the root's `share` reference, or the share record) is cleared with a new change
    /// sequence.
    private func endShares(deleted names: [String], zone: ZoneRow, after sequence: Int64) -> TransactionScript<Int64> {
        let batch = self.batch
        return .perform(.readShareRows(zone: zone.id, names: names)) { answer in
            let rows = try answer.shareRows
            let ids = Dictionary(rows.map { ($0.shareRecordName, $0.id) }, uniquingKeysWith: { first, _ in first })
            let endings = SharePlanner.endings(of: rows.map { ($0.shareRecordName, $0.rootRecordName) }, deleted: Set(names))
            var sequence = sequence
            return try TransactionScript.forEach(endings) { ending in
                guard let shareID = ids[ending.shareRecordName] else { return .finished }
                return .perform(.readParticipants(shareID: shareID)) { answer in
                    let users = Set(try answer.participants.filter { $0.type != .owner }.map(\.userRecordName))
                    var steps: [TransactionScript<Void>] = [.perform(.deleteShare(shareID: shareID))]
                    if let root = ending.rootToClear {
                        sequence += 1
                        steps.append(
                            .changeRecords(
                                .clearShareReference(zone: zone.id, rootRecordName: root, sequence: sequence), zone: zone.id, to: [root: sequence]))
                    }
                    if ending.deletesShareRecord {
                        sequence += 1
                        let modified = RecordStamp(timestamp: batch.timestamp, userRecordName: batch.author, deviceID: batch.deviceID)
                        steps.append(
                            .deleteRecords(
                                .deleteRecords(zone: zone.id, names: [ending.shareRecordName], sequences: [sequence], modified: modified),
                                zone: zone.id))
                    }
                    // The batch holds the zone's sequence until it ends; views take positions from the stored one.
                    steps.append(.perform(.setZoneSequence(zone: zone.id, sequence)))
                    return try TransactionScript.forEach(steps) { $0 }
                        .then { try ShareScripts.refreshViews(zone: zone.id, users: users) }
                        .then {
                            .perform(.readZoneSequence(zone: zone.id)) { answer in
                                sequence = try answer.sequence
                                return .finished
                            }
                        }
                }
            }.map { sequence }
        }
    }

    /// Records whose parent changed may have left (or joined) a shared hierarchy, with everything below them. Those
    /// records take new change sequences, so the hierarchy they joined delivers them, and the one they left records an
    /// exit, so its participants' feeds report them deleted.
    private func trackHierarchyMoves(
        _ writes: [PlannedWrite], existing: [String: StoredRecord], zone: ZoneRow, after sequence: Int64
    ) -> TransactionScript<Int64> {
        // Only a batch that moves records pays for reading the zone's share roots.
        let candidates = SharePlanner.moves(writes, existing: existing, shareRoots: [])
        guard !candidates.isEmpty else { return .done(sequence) }
        return .perform(.readShareRows(zone: zone.id, names: nil)) { answer in
            let shareRoots = Set(try answer.shareRows.compactMap(\.rootRecordName))
            guard !shareRoots.isEmpty else { return .done(sequence) }
            let moves = SharePlanner.moves(candidates, existing: existing, shareRoots: shareRoots)
            let ends = Array(Set(moves.flatMap { [existing[$0.recordName]?.header.parent, $0.parent].compactMap { $0 } }))
            return .perform(.readRoots(zone: zone.id, names: ends, among: shareRoots)) { answer in
                let placed = try answer.names
                var sequence = sequence
                return try TransactionScript.forEach(moves) { write in
                    let oldRoot = existing[write.recordName]?.header.parent.flatMap { placed[$0] }
                    let newRoot = write.parent.flatMap { placed[$0] }
                    guard oldRoot != newRoot else { return .finished }
                    return .perform(.readSubtree(zone: zone.id, roots: [write.recordName])) { answer in
                        let subtree = try answer.list
                        let sequences = subtree.indices.map { sequence + Int64($0) + 1 }
                        sequence += Int64(subtree.count)
                        guard !subtree.isEmpty else { return .finished }
                        let renumber = TransactionScript.changeRecords(
                            .renumberRecords(zone: zone.id, names: subtree, sequences: sequences), zone: zone.id,
                            to: Dictionary(zip(subtree, sequences), uniquingKeysWith: { _, last in last }))
                        guard let oldRoot else { return renumber }
                        return renumber.then { .perform(.recordExits(zone: zone.id, root: oldRoot, names: subtree, sequences: sequences)) }
                    }
                }.map { sequence }
            }
        }
    }

    /// Stores share metadata after the batch's records are written: the share row, and its participants as
    /// ``SharePlanner/participants(current:owner:previousPublicPermission:publicPermission:listed:)`` decides them.
    private func applyShareChanges(_ changes: [PlannedShareChange], zone: ZoneRow) throws -> TransactionScript<Void> {
        let batch = self.batch
        return try .forEach(changes) { change in
            shareRow(for: change, zone: zone).then { shareID, previousPublic in
                .perform(.readParticipants(shareID: shareID)) { answer in
                    let current = try answer.participants
                    let planned = SharePlanner.participants(
                        current: current, owner: batch.author, previousPublicPermission: previousPublic,
                        publicPermission: change.publicPermission, listed: change.participants)
                    let replace: TransactionScript<Void> =
                        planned.participants == current ? .finished : .perform(.replaceParticipants(shareID: shareID, planned.participants))
                    return try replace.then { try ShareScripts.refreshViews(zone: zone.id, users: planned.affected) }
                }
            }
        }
    }

    /// The share row a change saves, created for a new share (the root, or the zone, points at it with its short
    /// GUID), and its public permission before the change.
    private func shareRow(for change: PlannedShareChange, zone: ZoneRow) -> TransactionScript<(Int64, SharePermission)> {
        guard change.isNew else {
            return .perform(.readShareRows(zone: zone.id, names: [change.recordName])) { answer in
                guard let row = try answer.shareRows.first(where: { $0.shareRecordName == change.recordName }) else {
                    throw StoreError(.unexpected, "share \(change.recordName) vanished while it was saved")
                }
                guard let permission = change.publicPermission else { return .done((row.id, row.publicPermission)) }
                return .perform(.setPublicPermission(shareID: row.id, permission)) { _ in .done((row.id, row.publicPermission)) }
            }
        }
        let publicPermission = change.publicPermission ?? .none
        return .perform(.readShortGUID(zone: zone.id, recordName: change.rootRecordName)) { answer in
            let shortGUID = try answer.text ?? ShortGUID.make()
            // The root points at its share, and takes a new change tag so every feed shows it.
            let point: TransactionScript<Void> =
                change.rootRecordName.map { root in
                    .perform(.takeZoneSequence(zone: zone.id)) { answer in
                        let sequence = try answer.sequence
                        return .changeRecords(
                            .pointRootAtShare(
                                zone: zone.id, rootRecordName: root, shareRecordName: change.recordName, shortGUID: shortGUID, sequence: sequence),
                            zone: zone.id, to: [root: sequence])
                    }
                } ?? .perform(.setZoneShortGUID(zone: zone.id, shortGUID: shortGUID))
            return point.then {
                .perform(
                    .insertShare(
                        zone: zone.id, shareRecordName: change.recordName, rootRecordName: change.rootRecordName, shortGUID: shortGUID,
                        publicPermission: publicPermission)
                ) { answer in .done((try answer.sequence, publicPermission)) }
            }
        }
    }
}
