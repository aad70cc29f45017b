/// Identifies a record zone: `{zoneName, ownerRecordName}`.
public struct ZoneID: Sendable, Hashable, CustomStringConvertible {
    /// The name of the zone every database has.
    public static let defaultZoneName = "_defaultZone"
    /// The owner name of the public database's zone.
    public static let publicOwnerName = "_defaultOwner"
    /// CloudKit's name for "the current user" as a zone's owner (`CKCurrentUserDefaultName`).
    public static let currentUserOwnerName = "__defaultOwner__"

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

    public var description: String { "\(zoneName):\(ownerRecordName ?? Self.currentUserOwnerName)" }

    /// Whether two zone IDs name the same zone, the one rule everywhere a caller's zone ID meets a stored one. A zone
    /// named without an owner (or as the current user's, `__defaultOwner__`) is the caller's own: it is the same zone as
    /// that name with the owner the server gives it. Two named owners must be equal. (`==` is exact identity: a shared
    /// database's zones always carry their owner.)
    public func isSameZone(as other: ZoneID) -> Bool {
        guard zoneName == other.zoneName else { return false }
        func named(_ owner: String?) -> String? {
            guard let owner, !owner.isEmpty, owner != Self.currentUserOwnerName else { return nil }
            return owner
        }
        guard let first = named(ownerRecordName), let second = named(other.ownerRecordName) else { return true }
        return first == second
    }

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

extension ZoneID {
    /// Reads a zone ID dictionary straight from a scanner, as ``init(wire:)`` reads it from a tree: every record of a
    /// feed page carries one, and building a tree for each was a tenth of reading the page.
    static func read(scanning scanner: inout JSONScanner, path: String) throws -> ZoneID {
        guard try scanner.peek() == .object else {
            throw WireFormatError(path: path, message: "expected an object, found \(try scanner.readValue().kindDescription)")
        }
        var zoneName: String?
        var ownerRecordName: String?
        var ownerName: String?
        try scanner.beginObject()
        while let key = try scanner.nextKey() {
            guard key == "zoneName" || key == "ownerRecordName" || key == "ownerName" else {
                try scanner.skipValue()
                continue
            }
            // A null member is an absent one, as in a tree.
            if try scanner.readNull() { continue }
            guard try scanner.peek() == .string else {
                throw WireFormatError(path: "\(path).\(key)", message: "expected a string, found \(try scanner.readValue().kindDescription)")
            }
            let value = try scanner.readString()
            switch key {
            case "zoneName": zoneName = value
            case "ownerRecordName": ownerRecordName = value
            default: ownerName = value
            }
        }
        return ZoneID(zoneName: zoneName ?? defaultZoneName, ownerRecordName: ownerRecordName ?? ownerName)
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
