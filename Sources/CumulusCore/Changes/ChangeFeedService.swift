public import CumulusModel
public import CumulusStore
public import Logging

/// A zone as `zones/list`, `zones/lookup` and the database change feed describe it.
public struct ZoneSummary: Sendable, Hashable {
    public var state: ZoneState
    /// The zone's current change token: a client can start its zone feed here.
    public var syncToken: String
}

extension ZoneSummary {
    /// The zone as the wire messages carry it.
    public var info: ZoneInfo { ZoneInfo(zoneID: state.zoneID, syncToken: syncToken) }
}

/// The outcome of one zone of a `changes/zone` request.
public enum ZoneChangesResult: Sendable {
    /// A page, with the shares behind its share records by record name.
    case page(ZoneChangePage, syncToken: String, desiredKeys: Set<String>?, shares: [String: ShareState])
    case failed(ZoneID, CumulusError)
}

/// `changes/database`, `changes/zone` and `records/changes`: what changed since a token, a page at a time, for the
/// private and shared databases.
public struct ChangeFeedService: Sendable {
    let store: any RecordZoneStore
    let policy: AuthorizationPolicy
    let limits: Limits
    let clock: WallClock
    let secrets: TokenSecrets
    /// Where a device that read to the end of its feed is noted.
    let devices: DeviceTracker
    let zones: ZoneAccess
    /// The shared database's feed, and the shares behind share records in a page.
    let shares: ShareService

    /// Change feeds belong to the private and shared databases, as in CloudKit.
    private func checkFeedScope(_ scope: DatabaseScope) throws(CumulusError) {
        if scope == .public {
            throw CumulusError(.badRequest, "change feeds are not available in the public database; use records/query")
        }
    }

    private func resultsLimit(_ limit: Int?, path: String) throws(CumulusError) -> Int {
        guard let limit else { return limits.maximumResultsLimit }
        guard limit > 0 else { throw CumulusError(.badRequest, "\(path): must be at least 1") }
        return min(limit, limits.maximumResultsLimit)
    }

    /// `changes/database`: the zones changed or deleted since a token.
    public func databaseChanges(caller: Caller, scope: DatabaseScope, request: DatabaseChangesRequest, logger: Logger) async throws
        -> DatabaseChangesResponse
    {
        let database = try policy.database(for: caller, scope: scope, access: .read)
        try checkFeedScope(scope)
        let limit = try resultsLimit(request.resultsLimit, path: "resultsLimit")
        let codec = try await secrets.codec(logger: logger)
        let after =
            try request.syncToken.map { (token) throws(CumulusError) in try codec.decodeDatabaseToken(token, database: database).sequence } ?? 0
        if scope == .shared {
            return try await shares.sharedDatabaseChanges(caller: caller, database: database, request: request, limit: limit, logger: logger)
        }
        let page = try await mapStoreErrors { try await store.databaseChanges(in: database, after: after, limit: limit, logger: logger) }
        // The device has fetched to the page's position once it reads the last page.
        await devices.note(
            caller, now: clock.milliseconds(), position: page.moreComing ? nil : page.sequence, behind: page.moreComing ? nil : page.sequence - after,
            logger: logger)
        let zones: [ZoneResult] = page.zones.map { change in
            switch change {
            case .changed(let zone):
                .zone(
                    ZoneInfo(
                        zoneID: zone.zoneID,
                        syncToken: codec.zoneToken(
                            database, zoneName: zone.zoneID.zoneName, incarnation: zone.incarnation, sequence: zone.changeSequence)))
            case .deleted(let zoneID): .deleted(zoneID)
            }
        }
        return DatabaseChangesResponse(zones: zones, syncToken: codec.databaseToken(database, sequence: page.sequence), moreComing: page.moreComing)
    }

    /// `changes/zone` and `records/changes`: records changed or deleted in each zone since its token.
    public func zoneChanges(caller: Caller, scope: DatabaseScope, request: ZoneChangesRequest, logger: Logger) async throws -> [ZoneChangesResult] {
        let database = try policy.database(for: caller, scope: scope, access: .read)
        try checkFeedScope(scope)
        try limits.checkCount(request.zones.count, path: "zones")
        let codec = try await secrets.codec(logger: logger)
        var results: [ZoneChangesResult] = []
        for (index, entry) in request.zones.enumerated() {
            let path = request.isLegacy ? "" : "zones[\(index)]."
            let zoneID = ZoneID(
                zoneName: entry.zoneID.zoneName, ownerRecordName: scope == .shared ? entry.zoneID.ownerRecordName : database.ownerRecordName
            )
            do {
                var zoneName: String
                var zoneDatabase = database
                var tokenDatabase = database
                var access: ParticipantAccess?
                if scope == .shared {
                    (zoneDatabase, zoneName, access) = try await zones.sharedZone(caller: caller, zoneID: entry.zoneID, logger: logger)
                    tokenDatabase = ShareService.tokenDatabase(caller, owner: zoneDatabase.ownerRecordName)
                } else {
                    zoneName = try policy.zoneName(entry.zoneID, in: database)
                }
                let limit = try resultsLimit(entry.resultsLimit, path: "\(path)resultsLimit")
                var position: SyncTokenCodec.ZonePosition?
                if let token = entry.syncToken {
                    do {
                        position = try codec.decodeZoneToken(token, database: tokenDatabase, zoneName: zoneName)
                    } catch {
                        throw CumulusError(error.code, "\(path)\(error.reason)")
                    }
                }
                let page = try await store.zoneChanges(
                    ZoneChangeRequest(
                        database: zoneDatabase, zoneName: zoneName, incarnation: position?.incarnation, after: position?.sequence ?? 0, limit: limit,
                        recordTypes: entry.desiredRecordTypes.map(Set.init), access: access
                    ),
                    logger: logger
                )
                let token = codec.zoneToken(tokenDatabase, zoneName: zoneName, incarnation: page.zone.incarnation, sequence: page.sequence)
                let changed = page.changes.compactMap { if case .changed(let record) = $0 { record } else { nil } }
                let shares = try await self.shares.states(for: changed, database: zoneDatabase, zoneName: zoneName, logger: logger)
                results.append(.page(page, syncToken: token, desiredKeys: entry.desiredKeys.map(Set.init), shares: shares))
            } catch let error as CumulusError {
                if request.isLegacy { throw error }
                results.append(.failed(zoneID, error))
            } catch let error as StoreError {
                let mapped: CumulusError
                switch error.code {
                case .zoneNotFound: mapped = CumulusError(.zoneNotFound, "zone \(entry.zoneID.zoneName) does not exist")
                case .invalidState:
                    // The zone was deleted and created again: the token points into a zone that no longer exists.
                    mapped = CumulusError(
                        .changeTokenExpired,
                        "\(path)syncToken: has expired because zone \(entry.zoneID.zoneName) was deleted and created again; fetch again without a syncToken"
                    )
                default: mapped = CumulusError(.internalError, "internal error", underlying: error)
                }
                if request.isLegacy || mapped.code == .internalError { throw mapped }
                results.append(.failed(zoneID, mapped))
            }
        }
        return results
    }
}
