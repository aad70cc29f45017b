public import CumulusModel
public import CumulusStore
import Foundation
public import Logging

/// Limits of the share-a-copy service. The defaults are the ones the seed describes.
public struct LinkLimits: Sendable, Hashable {
    public var maximumDrivesPerRequest: Int
    public var maximumPointsPerDrive: Int
    public var maximumRecordsPerSnapshot: Int
    public var maximumBodySize: Int
    /// Longest kept name, in characters, after cleaning.
    public var maximumNameLength: Int
    public var lifetime: Duration
    public var quota: LinkQuota

    public init(
        maximumDrivesPerRequest: Int = 6, maximumPointsPerDrive: Int = 10_000, maximumRecordsPerSnapshot: Int = 200,
        maximumBodySize: Int = 5 * 1024 * 1024, maximumNameLength: Int = 100, lifetime: Duration = .seconds(24 * 3600), quota: LinkQuota = .init()
    ) {
        self.maximumDrivesPerRequest = maximumDrivesPerRequest
        self.maximumPointsPerDrive = maximumPointsPerDrive
        self.maximumRecordsPerSnapshot = maximumRecordsPerSnapshot
        self.maximumBodySize = maximumBodySize
        self.maximumNameLength = maximumNameLength
        self.lifetime = lifetime
        self.quota = quota
    }
}

/// A link just created.
public struct CreatedLink: Sendable, Hashable {
    public var id: String
    /// Milliseconds since the epoch.
    public var expiresAt: Int64
}

/// A drive in the flat shape Ghost Car shares, validated and cleaned.
public struct SharedDrive: Sendable, Hashable {
    /// Milliseconds since the epoch.
    public var startTime: Int64
    /// Seconds.
    public var duration: Double
    /// Metres.
    public var distance: Double
    /// Metres per second.
    public var averageSpeed: Double
    public var maxSpeed: Double
    public var points: [(lat: Double, lon: Double)]
    public var customName: String?

    public static func == (lhs: SharedDrive, rhs: SharedDrive) -> Bool {
        lhs.startTime == rhs.startTime && lhs.duration == rhs.duration && lhs.distance == rhs.distance && lhs.averageSpeed == rhs.averageSpeed
            && lhs.maxSpeed == rhs.maxSpeed && lhs.customName == rhs.customName && lhs.points.elementsEqual(rhs.points, by: { $0 == $1 })
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(startTime)
        hasher.combine(customName)
    }
}

/// The share-a-copy service: snapshots behind links that expire, with an abuse ceiling. It keeps as little as
/// possible: the cleaned payload, its expiry, and upload counts for a day.
public struct LinkService: Sendable {
    let store: any RecordStore
    let clock: WallClock
    public let limits: LinkLimits

    public init(store: any RecordStore, clock: WallClock = .system, limits: LinkLimits = .init()) {
        self.store = store
        self.clock = clock
        self.limits = limits
    }

    // MARK: - Uploads

    /// Validates and stores drives, one link each, in order.
    public func uploadDrives(
        container: String, environment: ContainerEnvironment, uploader: LinkUploader, body: WireObject, logger: Logger
    ) async throws -> [CreatedLink] {
        guard let values = try body.array("drives") else { throw CumulusError(.badRequest, "drives: is required") }
        guard !values.isEmpty else { throw CumulusError(.badRequest, "drives: must not be empty") }
        guard values.count <= limits.maximumDrivesPerRequest else {
            throw CumulusError(.badRequest, "drives: \(values.count) drives; at most \(limits.maximumDrivesPerRequest) per request")
        }
        let drives = try values.enumerated().map { index, value in try Self.readDrive(value, path: "drives[\(index)]", limits: limits) }
        let payloads = drives.map { drive in
            var writer = JSONWriter()
            Self.write(drive, to: &writer)
            return writer.bytes
        }
        return try await store(payloads, kind: "drive", container: container, environment: environment, uploader: uploader, logger: logger)
    }

    /// Validates and stores a generic snapshot of records, in the record JSON of the record API; one link.
    public func uploadRecords(
        container: String, environment: ContainerEnvironment, uploader: LinkUploader, body: WireObject, logger: Logger
    ) async throws -> [CreatedLink] {
        guard let values = try body.array("records") else { throw CumulusError(.badRequest, "records: is required") }
        guard !values.isEmpty, values.count <= limits.maximumRecordsPerSnapshot else {
            throw CumulusError(.badRequest, "records: 1 to \(limits.maximumRecordsPerSnapshot) records per snapshot")
        }
        var writer = JSONWriter()
        writer.beginArray()
        var names = Set<String>()
        for (index, value) in values.enumerated() {
            let path = "records[\(index)]"
            let draft = try RecordDraft(wire: WireObject(value, path: path))
            guard let name = draft.recordName else { throw CumulusError(.badRequest, "\(path).recordName: is required") }
            guard let type = draft.recordType else { throw CumulusError(.badRequest, "\(path).recordType: is required") }
            let nameLimits = Limits()
            try NameRules.checkRecordName(name, path: "\(path).recordName", limits: nameLimits)
            try NameRules.checkIdentifier(type, kind: "record type", path: "\(path).recordType", limits: nameLimits)
            guard names.insert(name).inserted else { throw CumulusError(.badRequest, "\(path).recordName: \(name) appears twice") }
            var fields: [String: FieldValue] = [:]
            for (field, fieldValue) in draft.fields {
                try NameRules.checkIdentifier(field, kind: "field name", path: "\(path).fields.\(field)", limits: nameLimits)
                if let fieldValue { fields[field] = fieldValue }
            }
            writer.beginObject()
            writer.key("recordName")
            writer.string(name)
            writer.key("recordType")
            writer.string(type)
            writer.key("fields")
            writer.fields(fields)
            if case .set(let parent) = draft.parent {
                writer.key("parent")
                writer.beginObject()
                writer.key("recordName")
                writer.string(parent)
                writer.endObject()
            }
            writer.endObject()
        }
        writer.endArray()
        return try await store([writer.bytes], kind: "records", container: container, environment: environment, uploader: uploader, logger: logger)
    }

    private func store(
        _ payloads: [[UInt8]], kind: String, container: String, environment: ContainerEnvironment, uploader: LinkUploader, logger: Logger
    ) async throws -> [CreatedLink] {
        let now = clock.milliseconds()
        let expiresAt = now + limits.lifetime.components.seconds * 1000
        let snapshots = payloads.map { payload in
            LinkSnapshot(
                id: TokenCodec.makeToken().prefix(22).description, container: container, environment: environment, kind: kind, payload: payload,
                createdAt: now, expiresAt: expiresAt
            )
        }
        switch try await store.createLinkSnapshots(snapshots, uploader: uploader, quota: limits.quota, now: now, logger: logger) {
        case .accepted:
            return snapshots.map { CreatedLink(id: $0.id, expiresAt: $0.expiresAt) }
        case .rejected(let retryAfter, let reason):
            throw CumulusError(.throttled, "You've reached the sharing limit (\(reason)); try again later", retryAfter: retryAfter)
        }
    }

    // MARK: - Downloads and cleanup

    /// The snapshot behind a link, or `nil` when it expired or never existed.
    public func snapshot(id: String, logger: Logger) async throws -> LinkSnapshot? {
        guard id.utf8.count <= 64,
            id.utf8.allSatisfy({
                $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A)
            })
        else {
            return nil
        }
        return try await store.linkSnapshot(id: id, now: clock.milliseconds(), logger: logger)
    }

    /// Deletes expired snapshots for good; the hourly cleanup calls this.
    public func deleteExpired(logger: Logger) async throws -> Int {
        try await store.deleteExpiredLinkSnapshots(now: clock.milliseconds(), logger: logger)
    }

    // MARK: - Drives

    /// Strips angle brackets and quotes and control characters, trims, and truncates: names are shown on a web page.
    public static func cleanName(_ name: String, maximumLength: Int) -> String? {
        let kept = name.unicodeScalars.filter { !"<>\"'`".unicodeScalars.contains($0) && !CharacterSet.controlCharacters.contains($0) }
        let cleaned = String(String.UnicodeScalarView(kept)).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !cleaned.isEmpty else { return nil }
        return String(cleaned.prefix(maximumLength))
    }

    /// Reads and checks a drive: numbers finite and not negative, coordinates in range, the name cleaned.
    static func readDrive(_ value: JSONValue, path: String, limits: LinkLimits) throws -> SharedDrive {
        let object = try WireObject(value, path: path)
        func number(_ key: String, minimum: Double? = 0) throws -> Double {
            guard let member = object[key] else { throw CumulusError(.badRequest, "\(object.path(key)): is required") }
            let value: Double
            do {
                value = try FieldValue.readDouble(member, type: .double, path: object.path(key))
            } catch let error as WireFormatError {
                throw CumulusError(.badRequest, error.description)
            }
            if let minimum, value < minimum { throw CumulusError(.badRequest, "\(object.path(key)): must not be negative") }
            return value
        }
        let startTime: Int64
        switch object["startTime"] {
        case .string(let text):
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            guard let date = formatter.date(from: text) ?? ISO8601DateFormatter().date(from: text) else {
                throw CumulusError(.badRequest, "\(object.path("startTime")): not an ISO 8601 date or milliseconds since the epoch")
            }
            startTime = Int64((date.timeIntervalSince1970 * 1000).rounded())
        case .number(let text):
            guard let milliseconds = Double(text), milliseconds.isFinite, milliseconds >= 0 else {
                throw CumulusError(.badRequest, "\(object.path("startTime")): not a valid time")
            }
            startTime = Int64(milliseconds.rounded())
        case nil:
            throw CumulusError(.badRequest, "\(object.path("startTime")): is required")
        default:
            throw CumulusError(.badRequest, "\(object.path("startTime")): not an ISO 8601 date or milliseconds since the epoch")
        }
        guard let pointValues = object["points"]?.arrayValue else { throw CumulusError(.badRequest, "\(object.path("points")): is required") }
        guard pointValues.count <= limits.maximumPointsPerDrive else {
            throw CumulusError(
                .badRequest, "\(object.path("points")): \(pointValues.count) coordinates; at most \(limits.maximumPointsPerDrive) per drive")
        }
        var points: [(lat: Double, lon: Double)] = []
        points.reserveCapacity(pointValues.count)
        for (index, pointValue) in pointValues.enumerated() {
            let pointPath = "\(object.path("points"))[\(index)]"
            guard let point = pointValue.objectValue else { throw CumulusError(.badRequest, "\(pointPath): expected {\"lat\", \"lon\"}") }
            func coordinate(_ keys: [String], range: ClosedRange<Double>) throws -> Double {
                guard let key = keys.first(where: { point[$0] != nil }), case .number(let text) = point[key]!, let value = Double(text) else {
                    throw CumulusError(.badRequest, "\(pointPath).\(keys[0]): expected a number")
                }
                guard value.isFinite, range.contains(value) else {
                    throw CumulusError(.badRequest, "\(pointPath).\(keys[0]): must be between \(Int(range.lowerBound)) and \(Int(range.upperBound))")
                }
                return value
            }
            points.append((try coordinate(["lat", "latitude"], range: -90...90), try coordinate(["lon", "longitude", "lng"], range: -180...180)))
        }
        var customName: String?
        if let name = try object.string("customName") { customName = cleanName(name, maximumLength: limits.maximumNameLength) }
        return SharedDrive(
            startTime: startTime, duration: try number("duration"), distance: try number("distance"), averageSpeed: try number("averageSpeed"),
            maxSpeed: try number("maxSpeed"), points: points, customName: customName
        )
    }

    /// Writes a drive in its flat JSON shape, `startTime` as ISO 8601.
    public static func write(_ drive: SharedDrive, to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("startTime")
        writer.string(iso8601(drive.startTime))
        writer.key("duration")
        writer.double(drive.duration)
        writer.key("distance")
        writer.double(drive.distance)
        writer.key("averageSpeed")
        writer.double(drive.averageSpeed)
        writer.key("maxSpeed")
        writer.double(drive.maxSpeed)
        writer.key("points")
        writer.beginArray()
        for point in drive.points {
            writer.beginObject()
            writer.key("lat")
            writer.double(point.lat)
            writer.key("lon")
            writer.double(point.lon)
            writer.endObject()
        }
        writer.endArray()
        if let name = drive.customName {
            writer.key("customName")
            writer.string(name)
        }
        writer.endObject()
    }

    /// Reads a stored drive payload back.
    public static func readStoredDrive(_ payload: [UInt8]) throws -> SharedDrive {
        try readDrive(JSONValue(parsing: payload), path: "drive", limits: LinkLimits(maximumPointsPerDrive: .max))
    }

    /// Milliseconds since the epoch as ISO 8601 with milliseconds.
    public static func iso8601(_ milliseconds: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }
}
