import CumulusModel

/// The sequences around shares, written once: refreshing participants' views, touching a share's record, accepting
/// and leaving. ``SharePlanner`` decides; these only order the reads and writes.
public enum ShareScripts {
    /// Makes each user's view of a zone match their accepted shares (``SharePlanner/viewTransition(stored:access:)``):
    /// it appears, is reported deleted, or, when what they may see in it changed, reports each record they started or
    /// stopped seeing. Users in name order, so concurrent writers take their shared databases in one order.
    public static func refreshViews(zone: Int64, users: Set<String>) throws -> TransactionScript<Void> {
        try .forEach(users.sorted()) { user in
            .perform(.readViewAccess(zone: zone, userRecordName: user)) { answer in
                let access = try answer.viewAccess
                return .perform(.readView(zone: zone, userRecordName: user)) { answer in
                    let stored = try answer.view
                    switch SharePlanner.viewTransition(stored: stored.map { ($0.ended, $0.access) }, access: access) {
                    case .begin(let access):
                        return takeSharedDatabaseSequence(user) {
                            .perform(.beginView(zone: zone, userRecordName: user, position: $0, access: access))
                        }
                    case .end:
                        return takeSharedDatabaseSequence(user) { .perform(.endView(zone: zone, userRecordName: user, position: $0)) }
                    case .change(let previous, let current):
                        let change: TransactionScript<Void> =
                            previous.map { .perform(.recordAccessChange(zone: zone, userRecordName: user, from: $0, to: current)) } ?? .finished
                        return change.then {
                            takeSharedDatabaseSequence(user) {
                                .perform(.changeView(zone: zone, userRecordName: user, position: $0, access: current))
                            }
                        }
                    case .none:
                        return .finished
                    }
                }
            }
        }
    }

    private static func takeSharedDatabaseSequence(
        _ user: String, then next: @escaping (Int64) -> TransactionScript<Void>
    ) -> TransactionScript<Void> {
        .perform(.takeSharedDatabaseSequence(userRecordName: user)) { next(try $0.sequence) }
    }

    /// A share's participants changed: its record takes a new change tag, so the owner's feed shows it, and the zone
    /// moves to the head of its database's feed.
    public static func touchShareRecord(_ shareRecordName: String, zone: ZoneRow) -> TransactionScript<Void> {
        .perform(.takeZoneSequence(zone: zone.id)) { answer in
            let sequence = try answer.sequence
            return TransactionScript.changeRecords(
                .renumberRecords(zone: zone.id, names: [shareRecordName], sequences: [sequence]), zone: zone.id, to: [shareRecordName: sequence]
            ).then { .perform(.touchZone(zone: zone.id, databaseID: zone.databaseID, sequence: nil)) }
        }
    }

    /// A user accepts a share by its short GUID: a listed participant's invitation, or anyone's when the share is open
    /// to anyone with the link. The zone's row is taken first, as every writer of the zone takes it, and the share is
    /// read again under it.
    public static func accept(shortGUID: String, userRecordName: String) -> TransactionScript<ShareState> {
        .perform(.readShare(.shortGUID(shortGUID))) { answer in
            guard let found = try answer.share?.state else { throw StoreError(.notFound, "no share with this short GUID") }
            return .perform(.findZone(found.database, zoneName: found.zoneName, lock: true)) { answer in
                guard let zone = try answer.zone else { throw StoreError(.notFound, "no share with this short GUID") }
                return .perform(.readShare(.shortGUID(shortGUID))) { answer in
                    guard let (shareID, share) = try answer.share else { throw StoreError(.notFound, "no share with this short GUID") }
                    let joining: StoreAction
                    if let participant = share.participant(userRecordName) {
                        if participant.type == .owner { return .done(share) }
                        guard participant.status != .removed || share.publicPermission != .none else {
                            throw StoreError(.invalidState, "the owner removed this participant")
                        }
                        joining = .setParticipantStatus(shareID: shareID, userRecordName: userRecordName, .accepted)
                    } else {
                        guard share.publicPermission != .none else { throw StoreError(.invalidState, "not a participant of this share") }
                        joining = .addPublicParticipant(shareID: shareID, userRecordName: userRecordName, permission: share.publicPermission)
                    }
                    return try TransactionScript.perform([joining])
                        .then { touchShareRecord(share.shareRecordName, zone: zone) }
                        .then { try refreshViews(zone: zone.id, users: [userRecordName]) }
                        .then {
                            .perform(.readShare(.id(shareID))) { answer in
                                guard let accepted = try answer.share?.state else {
                                    throw StoreError(.unexpected, "the share vanished while it was accepted")
                                }
                                return .done(accepted)
                            }
                        }
                }
            }
        }
    }

    /// A participant leaves a share of a zone the transaction holds (they deleted its share record from their shared
    /// database): their status becomes removed and their view of the zone is refreshed, so their devices drop what
    /// they no longer see. The owner does not leave their own share.
    static func leave(shareRecordName: String, in zone: ZoneRow, userRecordName: String) -> TransactionScript<Void> {
        .perform(.readShare(.record(zone: zone.id, shareRecordName: shareRecordName))) { answer in
            guard let (shareID, share) = try answer.share, let participant = share.participant(userRecordName) else {
                throw StoreError(.notFound, "share \(shareRecordName) does not exist")
            }
            let leaving: [StoreAction] =
                participant.type == .owner ? [] : [.setParticipantStatus(shareID: shareID, userRecordName: userRecordName, .removed)]
            return try TransactionScript.perform(leaving)
                .then { touchShareRecord(shareRecordName, zone: zone) }
                .then { try refreshViews(zone: zone.id, users: [userRecordName]) }
        }
    }
}
