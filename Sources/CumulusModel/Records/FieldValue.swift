public import Foundation

/// The type tag of a record field, as CloudKit Web Services writes it in `type`.
public enum FieldType: String, Sendable, Hashable, CaseIterable {
    case string = "STRING"
    case int64 = "INT64"
    case double = "DOUBLE"
    case timestamp = "TIMESTAMP"
    case bytes = "BYTES"
    case reference = "REFERENCE"
    case location = "LOCATION"
    case asset = "ASSETID"
}

/// A reference from one record to another (`REFERENCE`).
public struct Reference: Sendable, Hashable {
    /// What happens to the referring record when the target is deleted.
    public enum Action: String, Sendable, Hashable {
        /// Nothing happens.
        case none = "NONE"
        /// The referring record is deleted with its target.
        case deleteSelf = "DELETE_SELF"
        /// Saving checks that the target exists.
        case validate = "VALIDATE"
    }

    /// Name of the target record.
    public var recordName: String
    /// Zone of the target record, when given.
    public var zoneID: ZoneID?
    /// The reference action.
    public var action: Action

    /// Creates a reference.
    public init(recordName: String, zoneID: ZoneID? = nil, action: Action = .none) {
        self.recordName = recordName
        self.zoneID = zoneID
        self.action = action
    }
}

/// A geographic location (`LOCATION`).
public struct Location: Sendable, Hashable {
    public var latitude: Double
    public var longitude: Double
    public var horizontalAccuracy: Double?
    public var verticalAccuracy: Double?
    public var altitude: Double?
    public var speed: Double?
    public var speedAccuracy: Double?
    public var course: Double?
    public var courseAccuracy: Double?
    /// Milliseconds since the epoch.
    public var timestamp: Int64?

    /// Creates a location.
    public init(
        latitude: Double, longitude: Double, horizontalAccuracy: Double? = nil, verticalAccuracy: Double? = nil,
        altitude: Double? = nil, speed: Double? = nil, speedAccuracy: Double? = nil, course: Double? = nil,
        courseAccuracy: Double? = nil, timestamp: Int64? = nil
    ) {
        self.latitude = latitude
        self.longitude = longitude
        self.horizontalAccuracy = horizontalAccuracy
        self.verticalAccuracy = verticalAccuracy
        self.altitude = altitude
        self.speed = speed
        self.speedAccuracy = speedAccuracy
        self.course = course
        self.courseAccuracy = courseAccuracy
        self.timestamp = timestamp
    }
}

/// Asset metadata (`ASSETID`). Cumulus stores the dictionary as sent; asset bytes are not served yet.
public struct Asset: Sendable, Hashable {
    public var fileChecksum: String?
    public var size: Int64?
    public var referenceChecksum: String?
    public var wrappingKey: String?
    public var receipt: String?
    public var downloadURL: String?

    /// Creates asset metadata.
    public init(
        fileChecksum: String? = nil, size: Int64? = nil, referenceChecksum: String? = nil, wrappingKey: String? = nil,
        receipt: String? = nil, downloadURL: String? = nil
    ) {
        self.fileChecksum = fileChecksum
        self.size = size
        self.referenceChecksum = referenceChecksum
        self.wrappingKey = wrappingKey
        self.receipt = receipt
        self.downloadURL = downloadURL
    }
}

/// The value of a record field.
///
/// ```swift
/// record.fields["distance"] = .double(12_400)
/// record.fields["tags"] = .list(.string, [.string("commute"), .string("morning")])
/// ```
public enum FieldValue: Sendable, Hashable {
    case string(String)
    case int64(Int64)
    case double(Double)
    /// Milliseconds since the epoch, kept exact.
    case timestamp(Int64)
    case bytes(Data)
    // The large payloads live boxed, so a value is 17 bytes rather than a location's 137: values are copied into and out
    // of every fields dictionary, sorted and compared, and most are scalars.
    indirect case reference(Reference)
    indirect case location(Location)
    indirect case asset(Asset)
    /// A list whose elements all have `elementType`; `nil` is CloudKit's `UNKNOWN_LIST` (an empty list of no type).
    indirect case list(FieldType?, [FieldValue])

    /// The scalar type of the value, or of its elements for a list.
    public var type: FieldType? {
        switch self {
        case .string: .string
        case .int64: .int64
        case .double: .double
        case .timestamp: .timestamp
        case .bytes: .bytes
        case .reference: .reference
        case .location: .location
        case .asset: .asset
        case .list(let elementType, _): elementType
        }
    }

    /// The wire type tag: `STRING`, `INT64_LIST`, `UNKNOWN_LIST`, and so on.
    public var typeTag: String {
        switch self {
        case .list(let elementType, _): (elementType?.rawValue ?? "UNKNOWN") + "_LIST"
        default: type!.rawValue
        }
    }

    /// A timestamp from a date, to the millisecond.
    public static func timestamp(_ date: Date) -> FieldValue {
        .timestamp(Int64((date.timeIntervalSince1970 * 1000).rounded()))
    }
}
