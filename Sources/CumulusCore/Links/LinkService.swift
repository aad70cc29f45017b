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

/// The share-a-copy service: snapshots behind links that expire, with an abuse ceiling. It keeps as little as
/// possible: the cleaned payload, its expiry, and upload counts for a day.
public struct LinkService: Sendable {
    let store: any LinkStore
    let clock: WallClock
    public let limits: LinkLimits

    public init(store: any LinkStore, clock: WallClock = .system, limits: LinkLimits = .init()) {
        self.store = store
        self.clock = clock
        self.limits = limits
    }

    // MARK: - Uploads

    /// Cleans and stores drives (read within ``LinkLimits``: ``DriveLinksRequest/init(wire:maximumDrives:maximumPoints:)``),
    /// one link each, in order.
    public func uploadDrives(
        container: String, environment: ContainerEnvironment, uploader: LinkUploader, request: DriveLinksRequest, logger: Logger
    ) async throws -> [CreatedLink] {
        let payloads = request.drives.map { drive in
            var drive = drive
            // Names are shown on a web page: cleaned before they are stored.
            drive.customName = drive.customName.flatMap { Self.cleanName($0, maximumLength: limits.maximumNameLength) }
            var writer = JSONWriter()
            drive.write(to: &writer)
            return writer.bytes
        }
        return try await store(payloads, kind: "drive", container: container, environment: environment, uploader: uploader, logger: logger)
    }

    /// Checks and stores a generic snapshot of records, in the record JSON of the record API; one link.
    public func uploadRecords(
        container: String, environment: ContainerEnvironment, uploader: LinkUploader, request: RecordsLinkRequest, logger: Logger
    ) async throws -> [CreatedLink] {
        var writer = JSONWriter()
        writer.beginArray()
        var names = Set<String>()
        for (index, draft) in request.records.enumerated() {
            let path = "records[\(index)]"
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
            var parent: String?
            if case .set(let parentName) = draft.parent { parent = parentName }
            writer.snapshotRecord(recordName: name, recordType: type, fields: fields, parent: parent)
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

    /// Reads a stored drive payload back.
    public static func readStoredDrive(_ payload: [UInt8]) throws -> SharedDrive {
        try SharedDrive(wire: JSONValue(parsing: payload), path: "drive")
    }

    /// Milliseconds since the epoch as ISO 8601 with milliseconds.
    public static func iso8601(_ milliseconds: Int64) -> String { ISO8601Milliseconds.string(milliseconds) }
}
