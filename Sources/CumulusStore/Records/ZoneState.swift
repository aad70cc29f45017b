public import CumulusModel

/// The state of a zone.
public struct ZoneState: Sendable, Hashable {
    public var zoneID: ZoneID
    /// The zone's change counter; bumped by every record write in the zone.
    public var changeSequence: Int64
    /// The store's identity for this incarnation of the zone; a zone deleted and created again gets a new one.
    public var incarnation: Int64

    public init(zoneID: ZoneID, changeSequence: Int64, incarnation: Int64) {
        self.zoneID = zoneID
        self.changeSequence = changeSequence
        self.incarnation = incarnation
    }

    /// The default zone of a database never written: it exists, empty, before the database's first write creates it.
    public static func unwrittenDefaultZone(of database: DatabaseRef) -> ZoneState {
        ZoneState(zoneID: database.zoneID(ZoneID.defaultZoneName), changeSequence: 0, incarnation: 0)
    }
}

/// The outcome of one `zones/modify` operation.
public enum ZoneModificationResult: Sendable, Hashable {
    case saved(ZoneState)
    case deleted(ZoneID)
    case failed(ZoneID, ServerErrorCode, String)
}
