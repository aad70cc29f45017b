import CumulusModel

/// The sequence of erasing a user, written once (issue 37): what ``UserStore/eraseUser(userRecordName:attemptKeyPrefixes:timestamp:logger:)``
/// runs in one transaction, each store doing only each step's SQL.
public enum UserScripts {
    /// Erases a user: their public records (as a batch deletes them), their zones (as a zone deletion goes, with the
    /// shares they own and their history), their participations (each share record takes a new change tag), their
    /// asset receipts, their authorship of what stays in others' zones, and their rows. Answers the receipt; the asset
    /// files it lists are for the caller to delete after the commit.
    ///
    /// - Parameter known: The user's container, for a database that holds their data but not their account (a shard
    ///   of a sharded store); by default the account's, and no account is "no such user".
    public static func erase(
        userRecordName user: String, attemptKeyPrefixes: [String], timestamp: Int64, planner: RecordBatchPlanner, container known: String? = nil
    ) -> TransactionScript<UserErasure> {
        .perform(.readUserContainer(userRecordName: user)) { answer in
            guard let container = try answer.text ?? known else { throw StoreError(.notFound, "no such user") }
            var erasure = UserErasure()
            return try TransactionScript.forEach(ContainerEnvironment.allCases) { environment in
                erasePublicRecords(of: user, in: .publicDatabase(container: container, environment: environment), at: timestamp, planner: planner) {
                    erasure.publicRecords += $0
                    erasure.historyVersions += $1
                }
            }.then {
                .perform(.readUserZones(userRecordName: user, container: container)) { answer in
                    let zones = try answer.zones
                    erasure.zones = zones.count
                    return .perform(.countZoneContents(zones: zones.map(\.id))) { answer in
                        let counts = try answer.counts
                        erasure.records = counts["records", default: 0]
                        erasure.sharesStopped = counts["shares", default: 0]
                        return .perform(.deleteHistory(zones: zones.map(\.id), createdBy: nil)) { answer in
                            erasure.historyVersions += try answer.count
                            // The user's zones go as a zone deletion goes: participants' devices drop them.
                            return try TransactionScript.forEach(zones) { ZoneScripts.delete($0) }
                        }
                    }
                }
            }.then {
                // Shares of other users list the user no more: each share record takes a new change tag.
                .perform(.readParticipations(userRecordName: user)) { answer in
                    let participations = try answer.participations
                    erasure.participations = participations.count
                    return .perform(.removeParticipant(userRecordName: user)) { _ in
                        try TransactionScript.forEach(participations) { ShareScripts.touchShareRecord($0.shareRecordName, zone: $0.zone) }
                    }
                }
            }.then {
                .perform(.deleteAssetReceipts(userRecordName: user, container: container)) { answer in
                    (erasure.assetReceipts, erasure.assetFiles) = try answer.removed
                    // What they wrote in other users' zones stays, by no one.
                    return .perform(.anonymizeAuthor(userRecordName: user, as: UserErasure.erasedUserRecordName)) { answer in
                        erasure.recordsAnonymized = try answer.count
                        return .perform(.deleteUserRows(userRecordName: user, attemptKeyPrefixes: attemptKeyPrefixes)) { answer in
                            let counts = try answer.counts
                            erasure.subscriptions = counts["subscriptions", default: 0]
                            erasure.pushTokens = counts["pushTokens", default: 0]
                            erasure.devices = counts["devices", default: 0]
                            erasure.webAuthTokens = counts["webAuthTokens", default: 0]
                            return .done(erasure)
                        }
                    }
                }
            }
        }
    }

    /// The records a user created in a public database, deleted as a batch deletes them (feeds, digests, the deletions
    /// they cascade to) by no one, and their history; `tally` is told how many of each.
    private static func erasePublicRecords(
        of user: String, in database: DatabaseRef, at timestamp: Int64, planner: RecordBatchPlanner, tally: @escaping (Int, Int) -> Void
    ) -> TransactionScript<Void> {
        .perform(.findZone(database, zoneName: ZoneID.defaultZoneName, lock: true)) { answer in
            guard let zone = try answer.zone else { return .finished }
            return .perform(.readRecordsCreated(zone: zone.id, by: user)) { answer in
                let names = try answer.list
                guard !names.isEmpty else { return .finished }
                let batch = RecordBatch(
                    database: database, zoneName: ZoneID.defaultZoneName, atomic: false,
                    operations: names.map { RecordModification(operationType: .forceDelete, recordName: $0) },
                    author: UserErasure.erasedUserRecordName, deviceID: UserErasure.erasureDeviceID, timestamp: timestamp)
                return ModifyRecordsScript.script(batch, planner: planner).then { _ in
                    .perform(.deleteHistory(zones: [zone.id], createdBy: user)) { answer in
                        tally(names.count, try answer.count)
                        return .finished
                    }
                }
            }
        }
    }
}

/// A share of another user's that a user takes part in: the zone it is in, and its record.
public struct Participation: Sendable, Hashable {
    public var zone: ZoneRow
    public var shareRecordName: String

    public init(zone: ZoneRow, shareRecordName: String) {
        self.zone = zone
        self.shareRecordName = shareRecordName
    }
}
