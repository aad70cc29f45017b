/// A device's report of its last verification (`SyncEngine.verify()`), so the operator sees which devices hold what the
/// server holds: `POST /database/1/{container}/{environment}/private/devices/verification`, a Cumulus extension. The
/// device is the request's `X-Cumulus-Device`; each zone says how many records differed.
public struct DeviceVerificationReport: WireMessage, Hashable {
    /// One zone's comparison.
    public struct Zone: Sendable, Hashable {
        public var zoneID: ZoneID
        /// Records the server holds that the device does not, the device holds that the server does not, and both hold
        /// in different versions.
        public var missing: Int
        public var extra: Int
        public var stale: Int

        public init(zoneID: ZoneID, missing: Int, extra: Int, stale: Int) {
            self.zoneID = zoneID
            self.missing = missing
            self.extra = extra
            self.stale = stale
        }

        public var isInSync: Bool { missing == 0 && extra == 0 && stale == 0 }
    }

    public var zones: [Zone]

    public init(zones: [Zone]) {
        self.zones = zones
    }

    /// The most records one zone's count may say: a 32-bit count, as stores keep it.
    public static let maximumCount = Int(Int32.max)

    public init(wire object: WireObject) throws(WireFormatError) {
        zones = try object.requiredObjects("zones") { zone throws(WireFormatError) in
            func count(_ key: String) throws(WireFormatError) -> Int {
                let value = try zone.int(key) ?? 0
                guard value >= 0, value <= Self.maximumCount else {
                    throw WireFormatError(path: zone.path(key), message: "must be from 0 to \(Self.maximumCount)")
                }
                return value
            }
            return Zone(
                zoneID: try ZoneID(wire: zone.requiredObject("zoneID")), missing: try count("missing"), extra: try count("extra"),
                stale: try count("stale"))
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("zones", zones) { writer, zone in
            writer.beginObject()
            writer.key("zoneID")
            writer.zoneID(zone.zoneID)
            writer.member("missing", zone.missing)
            writer.member("extra", zone.extra)
            writer.member("stale", zone.stale)
            writer.endObject()
        }
        writer.endObject()
    }
}

/// The answer to a verification report: whether the server now counts the device in sync, and when it was verified.
public struct DeviceVerificationResponse: WireMessage, Hashable {
    public var inSync: Bool
    /// Milliseconds since 1970, the server's clock.
    public var verifiedAt: Int64

    public init(inSync: Bool, verifiedAt: Int64) {
        self.inSync = inSync
        self.verifiedAt = verifiedAt
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        guard let inSync = try object.bool("inSync") else { throw WireFormatError(path: object.path("inSync"), message: "is required") }
        self.inSync = inSync
        verifiedAt = Int64(try object.int("verifiedAt") ?? 0)
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("inSync", inSync)
        writer.key("verifiedAt")
        writer.int(Int(verifiedAt))
        writer.endObject()
    }
}
