public import CumulusModel
public import CumulusStore
public import Logging

/// The result of looking up one zone.
public enum ZoneLookupResult: Sendable, Hashable {
    case found(ZoneSummary)
    case notFound(ZoneID)
}

/// `zones/list`, `zones/lookup` and `zones/modify`: a database's zones, each with the token its feed starts from.
public struct ZoneService: Sendable, WriteHealthReporting {
    let store: any RecordZoneStore
    let policy: AuthorizationPolicy
    let limits: Limits
    let clock: WallClock
    let writeHealth: WriteHealth
    let secrets: TokenSecrets
    /// Told of every zone created or deleted, so waiting push polls re-check at once.
    let changes: ChangeSignal?
    /// The shared database's zones.
    let shares: ShareService

    /// `zones/list`.
    public func list(caller: Caller, scope: DatabaseScope, logger: Logger) async throws -> [ZoneSummary] {
        let database = try policy.database(for: caller, scope: scope, access: .read)
        if scope == .shared { return try await shares.sharedZones(caller: caller, logger: logger) }
        return try await summaries(store.zones(in: database, logger: logger), in: database, logger: logger)
    }

    /// `zones/lookup`.
    public func lookup(caller: Caller, scope: DatabaseScope, request: ZonesLookupRequest, logger: Logger) async throws -> [ZoneLookupResult] {
        let database = try policy.database(for: caller, scope: scope, access: .read)
        try limits.checkCount(request.zones.count, path: "zones")
        if scope == .shared {
            let shared = try await shares.sharedZones(caller: caller, logger: logger)
            return request.zones.map { zoneID in
                if let zone = shared.first(where: { $0.state.zoneID == zoneID }) {
                    return .found(zone)
                }
                return .notFound(zoneID)
            }
        }
        var names: [String] = []
        for zoneID in request.zones {
            if let name = try? policy.zoneName(zoneID, in: database) { names.append(name) }
        }
        let found = scope == .shared ? [:] : try await store.zones(named: names, in: database, logger: logger)
        let summaries = Dictionary(
            uniqueKeysWithValues: try await summaries(Array(found.values), in: database, logger: logger).map { ($0.state.zoneID.zoneName, $0) }
        )
        return request.zones.map { zoneID in
            if let name = try? policy.zoneName(zoneID, in: database), let zone = summaries[name] { return .found(zone) }
            return .notFound(ZoneID(zoneName: zoneID.zoneName, ownerRecordName: zoneID.ownerRecordName ?? database.ownerRecordName))
        }
    }

    /// `zones/modify`: create and delete custom zones in the private database.
    public func modify(caller: Caller, scope: DatabaseScope, request: ZonesModifyRequest, logger: Logger) async throws
        -> [ZoneModificationResult]
    {
        let database = try policy.database(for: caller, scope: scope, access: .write)
        guard scope == .private else {
            throw CumulusError(.badRequest, "zones can be created and deleted only in the private database, not the \(scope.rawValue) database")
        }
        try limits.checkCount(request.operations.count, path: "operations")
        var operations: [ZoneOperation] = []
        for (index, operation) in request.operations.enumerated() {
            let path = "operations[\(index)].zone.zoneID.zoneName"
            if operation.zoneID.isDefaultZone {
                throw CumulusError(.badRequest, "\(path): the default zone always exists and cannot be created or deleted")
            }
            try NameRules.checkZoneName(operation.zoneID.zoneName, path: path, limits: limits)
            let name = try policy.zoneName(operation.zoneID, in: database)
            operations.append(ZoneOperation(operationType: operation.operationType, zoneID: ZoneID(zoneName: name)))
        }
        let results = try await mapStoreErrors {
            try await store.modifyZones(
                operations, in: database, timestamp: clock.milliseconds(), maximumZones: limits.maximumZones, logger: logger)
        }
        changes?.changed([ChangeSignal.key(database)])
        return results
    }

    /// Zones with the tokens their feeds start from.
    func summaries(_ zones: [ZoneState], in database: DatabaseRef, logger: Logger) async throws -> [ZoneSummary] {
        let codec = try await secrets.codec(logger: logger)
        return zones.map { zone in
            ZoneSummary(
                state: zone,
                syncToken: codec.zoneToken(database, zoneName: zone.zoneID.zoneName, incarnation: zone.incarnation, sequence: zone.changeSequence)
            )
        }
    }
}
