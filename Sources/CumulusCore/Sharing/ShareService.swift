public import CumulusModel
public import CumulusStore
import Foundation
public import Logging

/// The result of resolving or accepting one short GUID.
public enum ShareLinkResult: Sendable {
    case resolved(ShareLinkInfo)
    case failed(shortGUID: String, CumulusError)
}

/// What `records/resolve` and `records/accept` tell a caller about a share.
public struct ShareLinkInfo: Sendable {
    public var share: ShareState
    public var scope: DatabaseScope
    public var rootRecord: StoredRecord?
    public var rootRecordDesiredKeys: Set<String>?
    /// The caller's own participation, if they are listed.
    public var participant: ShareParticipantState?
    public var owner: UserAccount?
}

/// Live shares: the share records of `records/modify` turned into share changes, the shares behind share records in
/// answers, `records/resolve` and `records/accept`, a share link's preview, and the shared database's zones and feed.
/// Who may see which participant is ``ShareVisibility``'s rule, applied where answers are written.
public struct ShareService: Sendable, WriteHealthReporting {
    /// Shares, the users participants name, and the root records links lead to.
    let store: any ShareStore & UserStore & RecordZoneStore
    let policy: AuthorizationPolicy
    let limits: Limits
    let clock: WallClock
    let writeHealth: WriteHealth
    let secrets: TokenSecrets

    // MARK: - The shared database

    /// The token scope of a shared zone: the participant's own shared database, so tokens are theirs alone.
    static func tokenDatabase(_ caller: Caller, owner: String) -> DatabaseRef {
        DatabaseRef(
            container: caller.container, environment: caller.environment, scope: .shared,
            ownerRecordName: "\(caller.user?.userRecordName ?? "")>\(owner)"
        )
    }

    /// `zones/list` of the shared database: the owners' zones the caller has accepted a share in.
    func sharedZones(caller: Caller, logger: Logger) async throws -> [ZoneSummary] {
        guard let user = caller.user else { throw CumulusError(.authenticationRequired, "request needs authorization") }
        let codec = try await secrets.codec(logger: logger)
        return try await store.sharedZones(
            userRecordName: user.userRecordName, container: caller.container, environment: caller.environment, logger: logger
        )
        .map { zone in
            let tokenDatabase = Self.tokenDatabase(caller, owner: zone.zoneID.ownerRecordName ?? "")
            return ZoneSummary(
                state: ZoneState(zoneID: zone.zoneID, changeSequence: zone.changeSequence, incarnation: zone.incarnation),
                syncToken: codec.zoneToken(
                    tokenDatabase, zoneName: zone.zoneID.zoneName, incarnation: zone.incarnation, sequence: zone.changeSequence)
            )
        }
    }

    func sharedDatabaseChanges(caller: Caller, database: DatabaseRef, request: DatabaseChangesRequest, limit: Int, logger: Logger) async throws
        -> DatabaseChangesResponse
    {
        guard let user = caller.user else { throw CumulusError(.authenticationRequired, "request needs authorization") }
        let codec = try await secrets.codec(logger: logger)
        let after =
            try request.syncToken.map { (token) throws(CumulusError) in try codec.decodeSharedDatabaseToken(token, database: database) }
            ?? SharedDatabasePosition()
        let page = try await store.sharedDatabaseChanges(
            userRecordName: user.userRecordName, container: caller.container, environment: caller.environment, after: after, limit: limit,
            logger: logger
        )
        let zones: [ZoneResult] = page.zones.map { zone in
            if zone.deleted { return .deleted(zone.zoneID) }
            let tokenDatabase = Self.tokenDatabase(caller, owner: zone.zoneID.ownerRecordName ?? "")
            return .zone(
                ZoneInfo(
                    zoneID: zone.zoneID,
                    syncToken: codec.zoneToken(
                        tokenDatabase, zoneName: zone.zoneID.zoneName, incarnation: zone.incarnation, sequence: zone.changeSequence)))
        }
        return DatabaseChangesResponse(
            zones: zones, syncToken: codec.sharedDatabaseToken(database, position: page.position), moreComing: page.moreComing)
    }

    // MARK: - Shares in records/modify

    /// Turns the owner's `cloudkit.share` operations into share changes, resolving participants to users.
    func shareChanges(for request: RecordsModifyRequest, modifications: [RecordModification], caller: Caller, logger: Logger) async throws
        -> [ShareChange]
    {
        var changes: [ShareChange] = []
        for (index, operation) in request.operations.enumerated() {
            let modification = modifications[index]
            let isShare = ShareRecord.isShareType(operation.record.recordType) || modification.recordName == ShareRecord.zoneWideRecordName
            guard isShare else { continue }
            let path = "operations[\(index)].record"
            if operation.operationType.isDelete {
                changes.append(ShareChange(recordName: modification.recordName, kind: .delete))
                continue
            }
            let draft = try ShareDraft(otherKeys: operation.record.otherKeys, path: path)
            if modification.recordName == ShareRecord.zoneWideRecordName, draft.rootRecordName != nil {
                throw CumulusError(.badRequest, "\(path).forRecord: a zone-wide share (cloudkit.zoneshare) has no root record")
            }
            if modification.recordName != ShareRecord.zoneWideRecordName, draft.rootRecordName == nil, operation.operationType == .create {
                throw CumulusError(
                    .badRequest, "\(path).forRecord: a share needs forRecord (its root), or the record name cloudkit.zoneshare to share the zone")
            }
            var resolved: [ResolvedParticipant]?
            if let participants = draft.participants {
                if participants.count > limits.maximumShareParticipants {
                    throw CumulusError(.badRequest, "\(path).participants: a share has at most \(limits.maximumShareParticipants) participants")
                }
                let emails = participants.compactMap { if case .emailAddress(let email) = $0.lookup { email } else { nil } }
                let names = participants.compactMap { if case .userRecordName(let name) = $0.lookup { name } else { nil } }
                let users = try await store.users(container: caller.container, emails: emails, userRecordNames: names, logger: logger)
                resolved = []
                for (position, participant) in participants.enumerated() {
                    let user: UserAccount?
                    switch participant.lookup {
                    case .emailAddress(let email): user = users.first { $0.email?.lowercased() == email.lowercased() }
                    case .userRecordName(let name): user = users.first { $0.userRecordName == name }
                    }
                    guard let user else {
                        throw CumulusError(
                            .badRequest, "\(path).participants[\(position)].userIdentity: no user of this container has that lookup key")
                    }
                    resolved?.append(
                        ResolvedParticipant(
                            userRecordName: user.userRecordName, email: user.email, permission: participant.permission,
                            removed: participant.status == .removed)
                    )
                }
            }
            changes.append(
                ShareChange(
                    recordName: modification.recordName,
                    kind: .save(rootRecordName: draft.rootRecordName, publicPermission: draft.publicPermission, participants: resolved)
                )
            )
        }
        return changes
    }

    /// The shares behind share records in a list of results, by record name, for answers that show share keys.
    public func states(for records: [StoredRecord], database: DatabaseRef, zoneName: String, logger: Logger) async throws -> [String: ShareState] {
        let names = records.filter { ShareRecord.isShareType($0.header.recordType) }.map(\.header.recordName)
        guard !names.isEmpty else { return [:] }
        let shares = try await store.shares(named: names, zoneName: zoneName, in: database, logger: logger)
        return Dictionary(shares.map { ($0.shareRecordName, $0) }, uniquingKeysWith: { first, _ in first })
    }

    // MARK: - Resolve and accept

    /// `records/resolve`: what a share link leads to, for someone entitled to know.
    public func resolve(caller: Caller, request: ShortGUIDRequest, accept: Bool, logger: Logger) async throws -> [ShareLinkResult] {
        guard let user = caller.user else {
            throw CumulusError(.authenticationRequired, "request needs authorization: resolving and accepting shares needs ckWebAuthToken")
        }
        try limits.checkCount(request.entries.count, path: "shortGUIDs")
        var results: [ShareLinkResult] = []
        for entry in request.entries {
            guard var share = try await store.share(shortGUID: entry.value, logger: logger),
                share.database.container == caller.container, share.database.environment == caller.environment
            else {
                results.append(.failed(shortGUID: entry.value, CumulusError(.notFound, "no share has this link")))
                continue
            }
            let standing = policy.standing(of: user.userRecordName, in: share)
            if standing == .denied {
                results.append(.failed(shortGUID: entry.value, CumulusError(.accessDenied, "you are not a participant of this share")))
                continue
            }
            // Invitations are capped in the request; joining a public share by its link is where the cap can be reached.
            if accept, standing == .publicCandidate,
                share.participants.filter({ $0.status != .removed && $0.type != .owner }).count >= limits.maximumShareParticipants
            {
                results.append(
                    .failed(
                        shortGUID: entry.value, CumulusError(.quotaExceeded, "a share has at most \(limits.maximumShareParticipants) participants")))
                continue
            }
            if accept, standing != .owner {
                share = try await mapStoreErrors {
                    try await store.acceptShare(shortGUID: entry.value, userRecordName: user.userRecordName, logger: logger)
                }
            }
            var root: StoredRecord?
            if entry.shouldFetchRootRecord, let rootName = share.rootRecordName {
                root = try await store.records(named: [rootName], zoneName: share.zoneName, in: share.database, access: nil, logger: logger)[rootName]
            }
            results.append(
                .resolved(
                    ShareLinkInfo(
                        share: share, scope: standing == .owner ? .private : .shared, rootRecord: root,
                        rootRecordDesiredKeys: entry.rootRecordDesiredKeys.map(Set.init), participant: share.participant(user.userRecordName),
                        owner: try await store.user(userRecordName: share.database.ownerRecordName, logger: logger)
                    )
                )
            )
        }
        return results
    }
}

/// What the web page of a share link shows anyone holding the link: never the shared records themselves.
public struct SharePreview: Sendable {
    public var share: ShareState
    /// The share's `cloudkit.title`, if the owner set one.
    public var title: String?
    /// The record type of a hierarchy share's root; `nil` for a zone-wide share.
    public var rootRecordType: String?
    /// The owner's display name.
    public var ownerName: String?
}

extension ShareService {
    /// The preview of a live share for its web page, or `nil` if the link leads to no share (never shared, or stopped).
    public func preview(shortGUID: String, logger: Logger) async throws -> SharePreview? {
        guard let share = try await mapStoreErrors({ try await store.share(shortGUID: shortGUID, logger: logger) }) else { return nil }
        var title: String?
        if let record = share.shareRecord, case .string(let text)? = try? record.fields()["cloudkit.title"] {
            title = text
        }
        var rootRecordType: String?
        if let rootName = share.rootRecordName {
            rootRecordType = try await mapStoreErrors {
                try await store.records(named: [rootName], zoneName: share.zoneName, in: share.database, access: nil, logger: logger)[rootName]?
                    .header.recordType
            }
        }
        let owner = try await mapStoreErrors { try await store.user(userRecordName: share.database.ownerRecordName, logger: logger) }
        return SharePreview(share: share, title: title, rootRecordType: rootRecordType, ownerName: owner?.name)
    }
}
