/// Identifies a record zone: `{zoneName, ownerRecordName}`.
public struct ZoneID: Sendable, Hashable, CustomStringConvertible {
    /// The name of the zone every database has.
    public static let defaultZoneName = "_defaultZone"
    /// The owner name of the public database's zone.
    public static let publicOwnerName = "_defaultOwner"

    /// The zone's name.
    public var zoneName: String
    /// The user record name of the zone's owner; `nil` means the caller.
    public var ownerRecordName: String?

    /// Creates a zone ID.
    public init(zoneName: String = ZoneID.defaultZoneName, ownerRecordName: String? = nil) {
        self.zoneName = zoneName
        self.ownerRecordName = ownerRecordName
    }

    /// Whether this is the default zone.
    public var isDefaultZone: Bool { zoneName == Self.defaultZoneName }

    public var description: String { "\(zoneName):\(ownerRecordName ?? "__defaultOwner__")" }

    /// Reads a zone ID dictionary, accepting `ownerName` for `ownerRecordName` as some clients send it.
    public init(wire object: WireObject) throws(WireFormatError) {
        self.zoneName = try object.string("zoneName") ?? Self.defaultZoneName
        if let owner = try object.string("ownerRecordName") {
            self.ownerRecordName = owner
        } else {
            self.ownerRecordName = try object.string("ownerName")
        }
    }
}

extension JSONWriter {
    /// Writes a zone ID dictionary.
    public mutating func zoneID(_ zoneID: ZoneID) {
        beginObject()
        key("zoneName")
        string(zoneID.zoneName)
        if let owner = zoneID.ownerRecordName {
            key("ownerRecordName")
            string(owner)
        }
        key("zoneType")
        string(zoneID.isDefaultZone ? "DEFAULT_ZONE" : "REGULAR_CUSTOM_ZONE")
        endObject()
    }
}
