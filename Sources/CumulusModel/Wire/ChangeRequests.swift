/// The body of `changes/database` and its older alias `zones/changes`.
public struct DatabaseChangesRequest: Sendable, Hashable {
    public var syncToken: String?
    public var resultsLimit: Int?

    /// Reads the request body.
    public init(wire object: WireObject) throws(WireFormatError) {
        syncToken = try object.string("syncToken")
        resultsLimit = try object.int("resultsLimit")
    }
}

/// One zone of a `changes/zone` request, with its own overrides.
public struct ZoneChangesEntry: Sendable, Hashable {
    public var zoneID: ZoneID
    public var syncToken: String?
    public var resultsLimit: Int?
    public var desiredKeys: [String]?
    public var desiredRecordTypes: [String]?

    public init(
        zoneID: ZoneID, syncToken: String? = nil, resultsLimit: Int? = nil, desiredKeys: [String]? = nil, desiredRecordTypes: [String]? = nil
    ) {
        self.zoneID = zoneID
        self.syncToken = syncToken
        self.resultsLimit = resultsLimit
        self.desiredKeys = desiredKeys
        self.desiredRecordTypes = desiredRecordTypes
    }
}

/// The body of `changes/zone`, or of the older `records/changes` (one zone at the top level).
public struct ZoneChangesRequest: Sendable, Hashable {
    public var zones: [ZoneChangesEntry]
    public var numbersAsStrings: Bool
    /// Whether the request came as `records/changes`, which answers for one zone at the top level.
    public var isLegacy: Bool

    /// A `changes/zone` request.
    public init(zones: [ZoneChangesEntry], numbersAsStrings: Bool = false) {
        self.zones = zones
        self.numbersAsStrings = numbersAsStrings
        isLegacy = false
    }

    /// Writes the `changes/zone` body, each zone with its own token and overrides.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("zones", zones) { writer, zone in
            writer.beginObject()
            writer.key("zoneID")
            writer.zoneID(zone.zoneID)
            writer.member("syncToken", zone.syncToken)
            writer.member("resultsLimit", zone.resultsLimit)
            writer.member("desiredKeys", strings: zone.desiredKeys)
            writer.member("desiredRecordTypes", strings: zone.desiredRecordTypes)
            writer.endObject()
        }
        if numbersAsStrings { writer.member("numbersAsStrings", true) }
        writer.endObject()
    }

    /// Reads a `changes/zone` body.
    public init(wire object: WireObject) throws(WireFormatError) {
        guard let values = try object.array("zones") else {
            throw WireFormatError(path: object.path("zones"), message: "is required")
        }
        let resultsLimit = try object.int("resultsLimit")
        let desiredKeys = try object.stringArray("desiredKeys")
        let desiredRecordTypes = try object.stringArray("desiredRecordTypes")
        zones = []
        for (index, value) in values.enumerated() {
            let entry = try WireObject(value, path: "\(object.path("zones"))[\(index)]")
            guard let zoneIDObject = try entry.object("zoneID") else {
                throw WireFormatError(path: entry.path("zoneID"), message: "is required")
            }
            zones.append(
                ZoneChangesEntry(
                    zoneID: try ZoneID(wire: zoneIDObject), syncToken: try entry.string("syncToken"),
                    resultsLimit: try entry.int("resultsLimit") ?? resultsLimit,
                    desiredKeys: try entry.stringArray("desiredKeys") ?? desiredKeys,
                    desiredRecordTypes: try entry.stringArray("desiredRecordTypes") ?? desiredRecordTypes
                )
            )
        }
        // Apple's page spells it `numberAsStrings` for this operation; accept both.
        if let value = try object.bool("numbersAsStrings") {
            numbersAsStrings = value
        } else {
            numbersAsStrings = try object.bool("numberAsStrings") ?? false
        }
        isLegacy = false
    }

    /// Reads a `records/changes` body: `{zoneID, syncToken, resultsLimit, desiredKeys}`.
    public init(legacyWire object: WireObject) throws(WireFormatError) {
        guard let zoneIDObject = try object.object("zoneID") else {
            throw WireFormatError(path: object.path("zoneID"), message: "is required")
        }
        zones = [
            ZoneChangesEntry(
                zoneID: try ZoneID(wire: zoneIDObject), syncToken: try object.string("syncToken"), resultsLimit: try object.int("resultsLimit"),
                desiredKeys: try object.stringArray("desiredKeys"), desiredRecordTypes: try object.stringArray("desiredRecordTypes")
            )
        ]
        numbersAsStrings = try object.bool("numbersAsStrings") ?? false
        isLegacy = true
    }
}

extension ZoneChangesRequest: WireMessage {}
