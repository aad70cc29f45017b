public import CumulusModel

/// Identifies one database: a container's environment, a scope, and the owner whose database it is.
///
/// Every user has their own private database; the public database has the single owner ``ZoneID/publicOwnerName``.
public struct DatabaseRef: Sendable, Hashable, CustomStringConvertible {
    public var container: String
    public var environment: ContainerEnvironment
    public var scope: DatabaseScope
    public var ownerRecordName: String

    public init(container: String, environment: ContainerEnvironment, scope: DatabaseScope, ownerRecordName: String) {
        self.container = container
        self.environment = environment
        self.scope = scope
        self.ownerRecordName = ownerRecordName
    }

    /// The public database of a container environment.
    public static func publicDatabase(container: String, environment: ContainerEnvironment) -> DatabaseRef {
        DatabaseRef(container: container, environment: environment, scope: .public, ownerRecordName: ZoneID.publicOwnerName)
    }

    /// The zone ID of a zone of this database, as written on the wire.
    public func zoneID(_ zoneName: String) -> ZoneID {
        ZoneID(zoneName: zoneName, ownerRecordName: ownerRecordName)
    }

    public var description: String { "\(container)/\(environment.rawValue)/\(scope.rawValue)/\(ownerRecordName)" }
}

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
}

/// The outcome of one `zones/modify` operation.
public enum ZoneModificationResult: Sendable, Hashable {
    case saved(ZoneState)
    case deleted(ZoneID)
    case failed(ZoneID, ServerErrorCode, String)
}

/// A stored record: system fields plus canonical fields JSON.
public struct StoredRecord: Sendable, Hashable {
    public var header: RecordHeader
    /// The fields as canonical JSON (see `RecordFieldsCoding`).
    public var fieldsJSON: [UInt8]
    /// The zone change sequence of the record's last write.
    public var changeSequence: Int64

    public init(header: RecordHeader, fieldsJSON: [UInt8], changeSequence: Int64) {
        self.header = header
        self.fieldsJSON = fieldsJSON
        self.changeSequence = changeSequence
    }

    /// The parsed fields.
    public func fields() throws -> [String: FieldValue] {
        try RecordFieldsCoding.parseCanonical(fieldsJSON)
    }
}
