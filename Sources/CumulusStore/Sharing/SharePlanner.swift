public import CumulusModel

/// The sharing rules, decided once for every store: who may write what through a share, which share changes are
/// allowed, how participants change, which shares end, how a participant's view of a zone changes.
///
/// Pure functions over facts a store reads (inside its write transaction) and decisions it then writes, as
/// ``RecordBatchPlanner`` is for records: the SQLite and PostgreSQL stores can never disagree on a rule.
public enum SharePlanner {}

// MARK: - A participant's writes

extension SharePlanner {
    /// The names whose nearest shared root (among the participant's roots) ``enforce(_:on:batch:existing:placed:hidden:)``
    /// needs: every existing record the batch reads (those it writes, its parents, its `VALIDATE` targets) and every
    /// parent it names.
    public static func namesToPlace(_ batch: RecordBatch, existing: [String: StoredRecord]) -> Set<String> {
        var names = Set(existing.keys)
        for operation in batch.operations {
            if case .set(let parent) = operation.parent { names.insert(parent) }
        }
        return names
    }

    /// The records of `existing` a participant of hierarchy shares cannot see: outside every shared hierarchy, and not
    /// a share record of theirs. A store plans the batch as if they did not exist (``RecordBatchPlanner`` over the
    /// other records), so a participant's write answers the same whether a name is unshared or missing: a `VALIDATE`
    /// reference to it fails, an update answers `NOT_FOUND`, a delete succeeds and changes nothing.
    public static func hiddenNames(in existing: [String: StoredRecord], access: ParticipantAccess, placed: [String: String]) -> Set<String> {
        guard !access.zoneWide else { return [] }
        return Set(existing.keys.filter { placed[$0] == nil && !access.shareRecordNames.contains($0) })
    }

    /// Plans a participant's batch: over the records they can see (the others answer as missing ones do), then checked
    /// against what their shares allow. Answers the plan and the records it was made over, which the store writes by.
    ///
    /// - Parameter placed: For names of ``namesToPlace(_:existing:)``, the nearest ancestor (or the record itself) among
    ///   `access.roots`; empty for a zone-wide share.
    public static func plan(
        _ batch: RecordBatch, access: ParticipantAccess, existing: [String: StoredRecord], placed: [String: String], planner: RecordBatchPlanner
    ) -> (RecordBatchPlan, visible: [String: StoredRecord]) {
        let hidden = hiddenNames(in: existing, access: access, placed: placed)
        let visible = hidden.isEmpty ? existing : existing.filter { !hidden.contains($0.key) }
        var plan = planner.plan(batch, existing: visible)
        enforce(access, on: &plan, batch: batch, existing: visible, placed: placed, hidden: hidden)
        return (plan, visible)
    }

    /// Checks every operation of a participant's batch against what their shares allow.
    ///
    /// `plan` and `existing` leave out the ``hiddenNames(in:access:placed:)``, so those records answer as missing ones
    /// do. The one write that cannot behave as if a name were free is a creation that would succeed: it fails with
    /// `EXISTS`, as creating over any taken name does. Names are one namespace per zone, so that much is inherent;
    /// unguessable names (UUIDs, as clients make them) keep it from telling anything.
    ///
    /// - Parameters:
    ///   - existing: The visible records the batch reads.
    ///   - placed: For names of ``namesToPlace(_:existing:)``, the nearest ancestor (or the record itself) among
    ///     `access.roots`; absent when outside every shared hierarchy. Unused for a zone-wide share.
    ///   - hidden: Records that exist but the participant cannot see.
    public static func enforce(
        _ access: ParticipantAccess, on plan: inout RecordBatchPlan, batch: RecordBatch, existing: [String: StoredRecord], placed: [String: String],
        hidden: Set<String> = []
    ) {
        let names = batch.operations.map(\.recordName)
        var createdParents: [String: String] = [:]
        for operation in batch.operations where existing[operation.recordName] == nil {
            if case .set(let parent) = operation.parent { createdParents[operation.recordName] = parent }
        }
        // A record created in this batch is placed through its parent, which may be created in it too.
        func root(of name: String, depth: Int = 0) -> String? {
            if let root = placed[name] { return root }
            guard depth < 200, let parent = createdParents[name] else { return nil }
            return root(of: parent, depth: depth + 1)
        }

        for (index, operation) in batch.operations.enumerated() {
            let name = operation.recordName
            let current = existing[name]
            func deny(_ code: ServerErrorCode, _ reason: String) {
                plan.fail(index, RecordFailure(recordName: name, code: code, reason: reason), atomic: batch.atomic, recordNames: names)
            }
            let touchesShare =
                ShareRecord.isShareType(operation.recordType) || ShareRecord.isShareType(current?.header.recordType)
                || access.shareRecordNames.contains(name) || name == ShareRecord.zoneWideRecordName
            if access.zoneWide {
                if current == nil, operation.operationType.isDelete { continue }
                if touchesShare { deny(.accessDenied, "only the owner can change a share"); continue }
                if !access.zoneWideWritable { deny(.accessDenied, "this share is read-only for you"); continue }
                continue
            }
            if let current {
                // The share records a participant can read are theirs to see, but only the owner changes them.
                if access.shareRecordNames.contains(name) {
                    deny(.accessDenied, "only the owner can change a share")
                    continue
                }
                guard let recordRoot = root(of: name) else { deny(.notFound, "record \(name) does not exist"); continue }
                if touchesShare || ShareRecord.isShareType(current.header.recordType) {
                    deny(.accessDenied, "only the owner can change a share")
                    continue
                }
                if !access.writableRoots.contains(recordRoot) { deny(.accessDenied, "this share is read-only for you"); continue }
                if operation.operationType.isDelete, name == recordRoot {
                    deny(.accessDenied, "only the owner can delete the root record of a share")
                    continue
                }
                if case .set(let parent) = operation.parent, parent != current.header.parent {
                    guard let parentRoot = root(of: parent), access.writableRoots.contains(parentRoot) else {
                        deny(.accessDenied, "a shared record's parent must stay in the shared hierarchy")
                        continue
                    }
                }
            } else {
                if operation.operationType.isDelete { continue }  // deleting a missing record reveals nothing
                // An update of a missing record already failed (`NOT_FOUND`), as it does for anyone.
                if case .failed = plan.outcomes[index] { continue }
                if touchesShare { deny(.accessDenied, "only the owner can create a share"); continue }
                guard case .set(let parent) = operation.parent, let parentRoot = root(of: parent) else {
                    deny(.accessDenied, "records created through a share need a parent in the shared hierarchy")
                    continue
                }
                if !access.writableRoots.contains(parentRoot) { deny(.accessDenied, "this share is read-only for you"); continue }
            }
        }
        for (index, operation) in batch.operations.enumerated() where hidden.contains(operation.recordName) {
            guard case .write = plan.outcomes[index] else { continue }
            plan.fail(
                index, RecordFailure(recordName: operation.recordName, code: .exists, reason: "record \(operation.recordName) already exists"),
                atomic: batch.atomic, recordNames: names)
        }
    }
}

// MARK: - Share changes

/// A share as the checks of a change see it.
public struct ExistingShare: Sendable, Hashable {
    /// The root of a hierarchy share; `nil` for a zone-wide share.
    public var rootRecordName: String?
    public var publicPermission: SharePermission
    /// Users on the share who are not removed, the owner included.
    public var activeUsers: Set<String>

    public init(rootRecordName: String?, publicPermission: SharePermission, activeUsers: Set<String>) {
        self.rootRecordName = rootRecordName
        self.publicPermission = publicPermission
        self.activeUsers = activeUsers
    }
}

/// What a store reads about a zone before checking a batch's share changes.
public struct ZoneShareFacts: Sendable, Hashable {
    /// The zone's shares by share record name.
    public var shares: [String: ExistingShare]
    /// For each root a new share names (``SharePlanner/rootsToCheck(_:)``): whether it is a live record.
    public var liveRoots: Set<String>
    /// For each such root: a shared ancestor, if it has one.
    public var sharedAncestors: [String: String]
    /// For each such root: a shared record below it, if there is one.
    public var sharedDescendants: [String: String]

    public init(shares: [String: ExistingShare], liveRoots: Set<String>, sharedAncestors: [String: String], sharedDescendants: [String: String]) {
        self.shares = shares
        self.liveRoots = liveRoots
        self.sharedAncestors = sharedAncestors
        self.sharedDescendants = sharedDescendants
    }

    /// Roots of the zone's hierarchy shares.
    public var hierarchyRoots: Set<String> { Set(shares.values.compactMap(\.rootRecordName)) }
    public var hasZoneWideShare: Bool { shares.values.contains { $0.rootRecordName == nil } }
}

/// A share change that passed its checks, for the store to write after the batch's records.
public struct PlannedShareChange: Sendable, Hashable {
    public var recordName: String
    /// A new share (of this root, or of the zone when `nil`), or an update of the existing one.
    public var isNew: Bool
    public var rootRecordName: String?
    public var publicPermission: SharePermission?
    public var participants: [ResolvedParticipant]?
}

extension SharePlanner {
    /// The roots named by new shares of a batch, whose facts a store reads into ``ZoneShareFacts``.
    public static func rootsToCheck(_ batch: RecordBatch) -> Set<String> {
        var roots = Set<String>()
        for change in batch.shareChanges {
            if case .save(let root?, _, _) = change.kind { roots.insert(root) }
        }
        return roots
    }

    /// Checks the batch's share changes against the sharing rules, failing their operations where they break one.
    public static func checkShareChanges(_ plan: inout RecordBatchPlan, batch: RecordBatch, facts: ZoneShareFacts) -> [PlannedShareChange] {
        guard !batch.shareChanges.isEmpty else { return [] }
        let names = batch.operations.map(\.recordName)
        let writtenNames = Set(plan.writes.map(\.recordName))
        var planned: [PlannedShareChange] = []
        for change in batch.shareChanges {
            guard let index = names.firstIndex(of: change.recordName), case .write = plan.outcomes[index] else { continue }
            guard case .save(let rootName, let publicPermission, let participants) = change.kind else { continue }
            func fail(_ reason: String) {
                plan.fail(
                    index, RecordFailure(recordName: change.recordName, code: .badRequest, reason: reason), atomic: batch.atomic, recordNames: names)
            }
            if batch.zoneName == ZoneID.defaultZoneName {
                fail("shares live in custom zones; the default zone cannot be shared")
                continue
            }
            let current = facts.shares[change.recordName]
            let effectivePublic: SharePermission = publicPermission ?? current?.publicPermission ?? .none
            if effectivePublic != .none, let participants {
                let active = current?.activeUsers ?? []
                if participants.contains(where: { !$0.removed && !active.contains($0.userRecordName) }) {
                    fail("participants can be invited only while publicPermission is NONE; anyone with the link can join a public share")
                    continue
                }
            }
            if let current {
                if let rootName, rootName != current.rootRecordName {
                    fail("forRecord: a share's root cannot change")
                    continue
                }
                planned.append(
                    PlannedShareChange(
                        recordName: change.recordName, isNew: false, rootRecordName: current.rootRecordName, publicPermission: publicPermission,
                        participants: participants))
                continue
            }
            if facts.hasZoneWideShare {
                fail("the zone is already shared as a whole (cloudkit.zoneshare)")
                continue
            }
            if let rootName {
                guard writtenNames.contains(rootName) || facts.liveRoots.contains(rootName) else {
                    fail("forRecord: record \(rootName) does not exist in zone \(batch.zoneName)")
                    continue
                }
                if facts.hierarchyRoots.contains(rootName) {
                    fail("forRecord: record \(rootName) is already shared")
                    continue
                }
                if let ancestor = facts.sharedAncestors[rootName] {
                    fail("forRecord: record \(rootName) is already shared through its ancestor \(ancestor)")
                    continue
                }
                if let below = facts.sharedDescendants[rootName] {
                    fail("forRecord: record \(below) below \(rootName) is already shared")
                    continue
                }
            } else if !facts.hierarchyRoots.isEmpty {
                fail("the zone has hierarchy shares; it cannot also be shared as a whole")
                continue
            }
            planned.append(
                PlannedShareChange(
                    recordName: change.recordName, isNew: true, rootRecordName: rootName, publicPermission: publicPermission,
                    participants: participants))
        }
        return planned
    }
}

// MARK: - Participants

/// A share's participants after a change, and who is affected (their view of the zone may change).
public struct ParticipantsPlan: Sendable, Hashable {
    /// Everyone on the share, in order (the owner first): the store writes exactly this list.
    public var participants: [ShareParticipantState]
    public var affected: Set<String>
}

extension SharePlanner {
    /// The participants of a share after the owner saves it.
    ///
    /// - A new share lists its owner first (read-write, accepted).
    /// - Going public removes pending invitations (accepted participants stay); going private removes everyone but
    ///   the owner; while public, joiners through the link follow the public permission.
    /// - A saved list is the whole list: participants missing from it are removed, as when a client saves a share
    ///   without them; new ones are invited; a removed one listed again is invited again; a listed one keeps their
    ///   status and takes the listed permission.
    public static func participants(
        current: [ShareParticipantState], owner: String, previousPublicPermission: SharePermission, publicPermission: SharePermission?,
        listed: [ResolvedParticipant]?
    ) -> ParticipantsPlan {
        var participants = current
        var affected = Set<String>()
        if !participants.contains(where: { $0.type == .owner }) {
            participants.insert(ShareParticipantState(userRecordName: owner, type: .owner, permission: .readWrite, status: .accepted), at: 0)
        }
        if let permission = publicPermission {
            for index in participants.indices where participants[index].type != .owner {
                if previousPublicPermission == .none, permission != .none, participants[index].status == .invited {
                    participants[index].status = .removed
                    affected.insert(participants[index].userRecordName)
                } else if previousPublicPermission != .none, permission == .none {
                    participants[index].status = .removed
                    affected.insert(participants[index].userRecordName)
                } else if previousPublicPermission != .none, permission != .none, participants[index].type == .publicUser {
                    participants[index].permission = permission
                }
            }
        }
        if let listed {
            let kept = Set(listed.filter { !$0.removed }.map(\.userRecordName))
            let removed = Set(listed.filter(\.removed).map(\.userRecordName))
            for index in participants.indices where participants[index].type != .owner {
                let user = participants[index].userRecordName
                let dropped = participants[index].status != .removed && !kept.contains(user)
                if dropped || removed.contains(user) {
                    participants[index].status = .removed
                    affected.insert(user)
                }
            }
            for entry in listed where !entry.removed && entry.userRecordName != owner {
                affected.insert(entry.userRecordName)
                if let index = participants.firstIndex(where: { $0.userRecordName == entry.userRecordName }) {
                    participants[index].permission = entry.permission
                    if participants[index].status == .removed { participants[index].status = .invited }
                    if let email = entry.email { participants[index].email = email }
                } else {
                    participants.append(
                        ShareParticipantState(
                            userRecordName: entry.userRecordName, type: .user, permission: entry.permission, status: .invited, email: entry.email))
                }
            }
        }
        return ParticipantsPlan(participants: participants, affected: affected)
    }
}

// MARK: - Ending shares and moving records

/// A share that ends because its record or its root was deleted.
public struct ShareEnding: Sendable, Hashable {
    public var shareRecordName: String
    /// The root whose `share` reference is cleared (it survives the share).
    public var rootToClear: String?
    /// Whether the share record survives and is deleted now (the root was deleted).
    public var deletesShareRecord: Bool

    public init(shareRecordName: String, rootToClear: String?, deletesShareRecord: Bool) {
        self.shareRecordName = shareRecordName
        self.rootToClear = rootToClear
        self.deletesShareRecord = deletesShareRecord
    }
}

extension SharePlanner {
    /// Deleting a share's root, or its share record, ends the share, as in CloudKit.
    public static func endings(of shares: [(shareRecordName: String, rootRecordName: String?)], deleted: Set<String>) -> [ShareEnding] {
        shares.compactMap { share in
            let rootDeleted = share.rootRecordName.map(deleted.contains) ?? false
            guard deleted.contains(share.shareRecordName) || rootDeleted else { return nil }
            return ShareEnding(
                shareRecordName: share.shareRecordName,
                rootToClear: rootDeleted ? nil : share.rootRecordName,
                deletesShareRecord: !deleted.contains(share.shareRecordName)
            )
        }
    }

    /// Writes that move an existing record to another parent: the hierarchy it left or joined may be shared. Share
    /// roots themselves keep their share wherever they go.
    public static func moves(_ writes: [PlannedWrite], existing: [String: StoredRecord], shareRoots: Set<String>) -> [PlannedWrite] {
        writes.filter { write in
            guard let previous = existing[write.recordName], !shareRoots.contains(write.recordName) else { return false }
            return previous.header.parent != write.parent
        }
    }
}

// MARK: - A participant's view of a zone

/// What a user's accepted shares let them see in one zone.
public struct SharedViewAccess: Codable, Sendable, Hashable {
    public var zoneWide: Bool
    public var roots: [String]
    public var shareRecordNames: [String]

    public init(zoneWide: Bool, roots: [String], shareRecordNames: [String]) {
        self.zoneWide = zoneWide
        self.roots = roots
        self.shareRecordNames = shareRecordNames
    }

    /// The access given by accepted shares (root `nil`: zone-wide), or `nil` when there is none.
    public init?(acceptedShares: [(rootRecordName: String?, shareRecordName: String)]) {
        guard !acceptedShares.isEmpty else { return nil }
        let roots = acceptedShares.compactMap(\.rootRecordName)
        self.init(
            zoneWide: roots.count < acceptedShares.count, roots: roots.sorted(), shareRecordNames: acceptedShares.map(\.shareRecordName).sorted())
    }
}

/// How a user's view of a zone in their shared database changes.
public enum SharedViewTransition: Sendable, Hashable {
    /// The zone appears (the device fetches it from nothing).
    case begin(SharedViewAccess)
    /// The zone is reported deleted.
    case end
    /// What they see changed: each record seen under exactly one of the two is reported, as it is or as deleted.
    /// `previous` is `nil` for a view recorded before accesses were kept (nothing to compare).
    case change(previous: SharedViewAccess?, current: SharedViewAccess)
    case none
}

extension SharePlanner {
    /// The transition of a view, from its stored state (`nil`: never existed) and the access the shares give now.
    public static func viewTransition(stored: (ended: Bool, access: SharedViewAccess?)?, access: SharedViewAccess?) -> SharedViewTransition {
        switch (access, stored) {
        case (let access?, nil): return .begin(access)
        case (let access?, let view?) where view.ended: return .begin(access)
        case (nil, let view?) where !view.ended: return .end
        case (let access?, let view?):
            return view.access == access ? .none : .change(previous: view.access, current: access)
        case (nil, _): return .none
        }
    }
}
