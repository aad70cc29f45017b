/// A zone as `zones/list`, `zones/lookup`, `zones/modify` and `changes/database` answer it.
public struct ZoneInfo: Sendable, Hashable {
    public var zoneID: ZoneID
    /// The zone's current change token, where the answer carries one.
    public var syncToken: String?
    /// Whether a batch of the zone is atomic by default (every zone but the default zone).
    public var atomic: Bool

    public init(zoneID: ZoneID, syncToken: String? = nil, atomic: Bool? = nil) {
        self.zoneID = zoneID
        self.syncToken = syncToken
        self.atomic = atomic ?? !zoneID.isDefaultZone
    }
}

/// One zone of an answer: the zone, its deletion, or its error.
public enum ZoneResult: Sendable, Hashable {
    case zone(ZoneInfo)
    case deleted(ZoneID)
    case failed(ZoneID, ItemError)

    /// The zone the result is about.
    public var zoneID: ZoneID {
        switch self {
        case .zone(let zone): zone.zoneID
        case .deleted(let zoneID), .failed(let zoneID, _): zoneID
        }
    }

    init(wire object: WireObject) throws(WireFormatError) {
        let zoneID = try object.object("zoneID").map { object throws(WireFormatError) in try ZoneID(wire: object) } ?? ZoneID()
        if let error = try ItemError(wire: object) {
            self = .failed(zoneID, error)
        } else if try object.bool("deleted") == true {
            self = .deleted(zoneID)
        } else {
            self = .zone(ZoneInfo(zoneID: zoneID, syncToken: try object.string("syncToken"), atomic: try object.bool("atomic")))
        }
    }

    func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("zoneID")
        writer.zoneID(zoneID)
        switch self {
        case .zone(let zone):
            if let syncToken = zone.syncToken {
                writer.key("syncToken")
                writer.string(syncToken)
            }
            writer.key("atomic")
            writer.bool(zone.atomic)
        case .deleted:
            writer.key("deleted")
            writer.bool(true)
        case .failed(_, let error):
            error.write(to: &writer)
        }
        writer.endObject()
    }
}

/// The answer of `zones/list`, `zones/lookup` and `zones/modify`: one result per zone, in the request's order.
public struct ZonesResponse: WireMessage, Hashable {
    public var zones: [ZoneResult]

    public init(zones: [ZoneResult]) {
        self.zones = zones
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        zones = try object.objects("zones") { object throws(WireFormatError) in try ZoneResult(wire: object) }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("zones", zones) { writer, zone in zone.write(to: &writer) }
        writer.endObject()
    }
}

extension ZonesModifyRequest: WireMessage {
    public init(operations: [ZoneOperation]) {
        self.operations = operations
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("operations", operations) { writer, operation in
            writer.beginObject()
            writer.key("operationType")
            writer.string(operation.operationType.rawValue)
            writer.key("zone")
            writer.beginObject()
            writer.key("zoneID")
            writer.zoneID(operation.zoneID)
            writer.endObject()
            writer.endObject()
        }
        writer.endObject()
    }
}

extension ZonesLookupRequest: WireMessage {
    public init(zones: [ZoneID]) {
        self.zones = zones
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("zones", zones) { writer, zoneID in writer.zoneID(zoneID) }
        writer.endObject()
    }
}

/// The answer of `changes/database` (and `zones/changes`): zones changed or deleted since a token, the token to ask
/// from next time, and whether more changes wait.
public struct DatabaseChangesResponse: WireMessage, Hashable {
    /// Changed zones (with their sync tokens) and deleted ones (`deleted: true`, as native CloudKit reports them; not
    /// in the 2016 documents).
    public var zones: [ZoneResult]
    public var syncToken: String
    public var moreComing: Bool

    public init(zones: [ZoneResult], syncToken: String, moreComing: Bool) {
        self.zones = zones
        self.syncToken = syncToken
        self.moreComing = moreComing
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        zones = try ZonesResponse(wire: object).zones
        syncToken = try object.requiredString("syncToken")
        moreComing = try object.bool("moreComing") ?? false
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("zones", zones) { writer, zone in zone.write(to: &writer) }
        writer.key("syncToken")
        writer.string(syncToken)
        writer.key("moreComing")
        writer.bool(moreComing)
        writer.endObject()
    }
}

extension DatabaseChangesRequest: WireMessage {
    public init(syncToken: String?, resultsLimit: Int? = nil) {
        self.syncToken = syncToken
        self.resultsLimit = resultsLimit
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        if let syncToken {
            writer.key("syncToken")
            writer.string(syncToken)
        }
        if let resultsLimit {
            writer.key("resultsLimit")
            writer.int(resultsLimit)
        }
        writer.endObject()
    }
}
