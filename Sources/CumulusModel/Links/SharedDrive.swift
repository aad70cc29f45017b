import Foundation

/// A point of a drive's route.
public struct DrivePoint: Sendable, Hashable {
    public var lat: Double
    public var lon: Double

    public init(lat: Double, lon: Double) {
        self.lat = lat
        self.lon = lon
    }
}

/// A drive in the flat JSON shape of share-a-copy links (seed 000): what the app uploads and downloads.
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
    public var points: [DrivePoint]
    public var customName: String?

    public init(
        startTime: Int64, duration: Double, distance: Double, averageSpeed: Double, maxSpeed: Double, points: [DrivePoint], customName: String?
    ) {
        self.startTime = startTime
        self.duration = duration
        self.distance = distance
        self.averageSpeed = averageSpeed
        self.maxSpeed = maxSpeed
        self.points = points
        self.customName = customName
    }

    /// Reads and checks a drive: `startTime` as ISO 8601 or milliseconds, numbers finite and not negative, coordinates
    /// in range. Errors name the field.
    public init(wire value: JSONValue, path: String, maximumPoints: Int = .max) throws(WireFormatError) {
        let object = try WireObject(value, path: path)
        func number(_ key: String) throws(WireFormatError) -> Double {
            guard let member = object[key] else { throw WireFormatError(path: object.path(key), message: "is required") }
            let value = try FieldValue.readDouble(member, type: .double, path: object.path(key))
            if value < 0 { throw WireFormatError(path: object.path(key), message: "must not be negative") }
            return value
        }
        switch object["startTime"] {
        case .string(let text):
            guard let milliseconds = ISO8601Milliseconds.milliseconds(text) else {
                throw WireFormatError(path: object.path("startTime"), message: "not an ISO 8601 date or milliseconds since the epoch")
            }
            startTime = milliseconds
        case .number(let text):
            guard let milliseconds = Double(text), milliseconds.isFinite, milliseconds >= 0 else {
                throw WireFormatError(path: object.path("startTime"), message: "not a valid time")
            }
            startTime = Int64(milliseconds.rounded())
        case nil:
            throw WireFormatError(path: object.path("startTime"), message: "is required")
        default:
            throw WireFormatError(path: object.path("startTime"), message: "not an ISO 8601 date or milliseconds since the epoch")
        }
        guard let pointValues = object["points"]?.arrayValue else { throw WireFormatError(path: object.path("points"), message: "is required") }
        guard pointValues.count <= maximumPoints else {
            throw WireFormatError(path: object.path("points"), message: "\(pointValues.count) coordinates; at most \(maximumPoints) per drive")
        }
        points = []
        points.reserveCapacity(pointValues.count)
        for (index, pointValue) in pointValues.enumerated() {
            let pointPath = "\(object.path("points"))[\(index)]"
            guard let point = pointValue.objectValue else { throw WireFormatError(path: pointPath, message: "expected {\"lat\", \"lon\"}") }
            func coordinate(_ keys: [String], limit: Double) throws(WireFormatError) -> Double {
                guard let key = keys.first(where: { point[$0] != nil }), case .number(let text)? = point[key], let value = Double(text) else {
                    throw WireFormatError(path: "\(pointPath).\(keys[0])", message: "expected a number")
                }
                guard value.isFinite, (-limit...limit).contains(value) else {
                    throw WireFormatError(path: "\(pointPath).\(keys[0])", message: "must be between \(Int(-limit)) and \(Int(limit))")
                }
                return value
            }
            points.append(
                DrivePoint(lat: try coordinate(["lat", "latitude"], limit: 90), lon: try coordinate(["lon", "longitude", "lng"], limit: 180)))
        }
        duration = try number("duration")
        distance = try number("distance")
        averageSpeed = try number("averageSpeed")
        maxSpeed = try number("maxSpeed")
        customName = try object.string("customName")
    }

    /// Writes the drive in its flat shape, `startTime` as ISO 8601 with milliseconds.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("startTime")
        writer.string(ISO8601Milliseconds.string(startTime))
        for (key, value) in [("duration", duration), ("distance", distance), ("averageSpeed", averageSpeed), ("maxSpeed", maxSpeed)] {
            writer.key(key)
            writer.double(value)
        }
        writer.key("points")
        writer.beginArray()
        for point in points {
            writer.beginObject()
            writer.key("lat")
            writer.double(point.lat)
            writer.key("lon")
            writer.double(point.lon)
            writer.endObject()
        }
        writer.endArray()
        if let customName {
            writer.key("customName")
            writer.string(customName)
        }
        writer.endObject()
    }
}

/// ISO 8601 dates with milliseconds, as links write them; reading accepts whole seconds too.
public enum ISO8601Milliseconds {
    public static func string(_ milliseconds: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }

    public static func milliseconds(_ text: String) -> Int64? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard let date = formatter.date(from: text) ?? ISO8601DateFormatter().date(from: text) else { return nil }
        return Int64((date.timeIntervalSince1970 * 1000).rounded())
    }
}
