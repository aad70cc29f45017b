public import CumulusModel
public import Foundation

/// A drive in the flat shape Ghost Car shares.
public struct DriveSnapshot: Sendable, Hashable {
    /// A point of the route.
    public struct Point: Sendable, Hashable {
        public var lat: Double
        public var lon: Double

        public init(lat: Double, lon: Double) {
            self.lat = lat
            self.lon = lon
        }
    }

    public var startTime: Date
    /// Seconds.
    public var duration: Double
    /// Metres.
    public var distance: Double
    /// Metres per second.
    public var averageSpeed: Double
    public var maxSpeed: Double
    public var points: [Point]
    public var customName: String?

    public init(
        startTime: Date, duration: Double, distance: Double, averageSpeed: Double, maxSpeed: Double, points: [Point], customName: String? = nil
    ) {
        self.startTime = startTime
        self.duration = duration
        self.distance = distance
        self.averageSpeed = averageSpeed
        self.maxSpeed = maxSpeed
        self.points = points
        self.customName = customName
    }

    /// The name a received copy gets: "Morning commute (Shared)", or "Shared Drive" when it had none.
    public var sharedCopyName: String {
        customName.map { "\($0) (Shared)" } ?? "Shared Drive"
    }
}

/// A drive imported from a link: an independent copy with its own identifier.
public struct ImportedDrive: Sendable, Hashable {
    /// A new identifier, never the sender's.
    public var id: UUID
    public var name: String
    public var drive: DriveSnapshot
}

/// A record in a generic snapshot: what a copy keeps of it.
public struct SnapshotRecord: Sendable, Hashable {
    public var recordName: String
    public var recordType: String
    public var fields: [String: FieldValue]
    public var parent: String?

    public init(recordName: String, recordType: String, fields: [String: FieldValue], parent: String? = nil) {
        self.recordName = recordName
        self.recordType = recordType
        self.fields = fields
        self.parent = parent
    }

    /// Fresh copies of a set of records: new record names, with parents and references inside the set pointing at the
    /// new names, so nothing refers back to the sender's records. `nameField`, if given, gets the "(Shared)" naming.
    public static func freshCopies(of records: [SnapshotRecord], nameField: String? = nil) -> [SnapshotRecord] {
        var renamed: [String: String] = [:]
        for record in records { renamed[record.recordName] = UUID().uuidString }
        func remap(_ value: FieldValue) -> FieldValue {
            switch value {
            case .reference(var reference):
                if let name = renamed[reference.recordName] {
                    reference.recordName = name
                    reference.zoneID = nil
                }
                return .reference(reference)
            case .list(let type, let values):
                return .list(type, values.map(remap))
            default:
                return value
            }
        }
        return records.map { record in
            var copy = record
            copy.recordName = renamed[record.recordName]!
            copy.parent = record.parent.map { renamed[$0] ?? $0 }
            copy.fields = record.fields.mapValues(remap)
            if let nameField {
                if case .string(let name)? = record.fields[nameField] {
                    copy.fields[nameField] = .string("\(name) (Shared)")
                }
            }
            return copy
        }
    }
}

/// A link created by an upload.
public struct SharedLink: Sendable, Hashable {
    public var id: String
    public var url: URL
    public var expiresAt: Date
}

/// Why a share-a-copy call failed, in terms an app can show to a person.
public enum LinkError: Error, Sendable, Hashable {
    /// Too many links from this device or network; retry after this many seconds.
    case rateLimited(retryAfter: Int?)
    /// The link expired or never existed.
    case expired
    /// The API key is wrong.
    case unauthorized
    /// Too many drives, points or bytes.
    case tooLarge(String)
    /// The server rejected the content; the reason names the field.
    case invalid(String)
    /// No answer from the server.
    case unreachable(String)
    /// Anything else.
    case server(status: Int, reason: String)

    /// A sentence for the person using the app.
    public var userMessage: String {
        switch self {
        case .rateLimited: "You've reached the sharing limit. Try again later."
        case .expired: "This link has expired."
        case .unauthorized: "Sharing isn't available right now (the app's key was refused)."
        case .tooLarge: "This is too large to share."
        case .invalid: "This can't be shared: some of its data is invalid."
        case .unreachable: "Couldn't reach the sharing service. Check your connection."
        case .server: "Something went wrong while sharing."
        }
    }
}

/// Uploads snapshots to Cumulus's share-a-copy service and downloads them.
///
/// ```swift
/// let links = LinkClient(serverURL: url, container: "iCloud.com.example.app", apiToken: key, deviceID: deviceID)
/// let link = try await links.upload([drive]).first!
/// let copy = try await links.downloadDrive(link.url).importedCopy()
/// ```
public struct LinkClient: Sendable {
    public var serverURL: URL
    public var container: String
    public var environment: ContainerEnvironment
    public var apiToken: String
    public var deviceID: String
    public var transport: any Transport

    public init(
        serverURL: URL, container: String, environment: ContainerEnvironment = .development, apiToken: String, deviceID: String,
        transport: any Transport = URLSessionTransport()
    ) {
        self.serverURL = serverURL
        self.container = container
        self.environment = environment
        self.apiToken = apiToken
        self.deviceID = deviceID
        self.transport = transport
    }

    // MARK: - Upload

    /// Uploads drives (at most 6); one link each, in order.
    public func upload(_ drives: [DriveSnapshot]) async throws(LinkError) -> [SharedLink] {
        try await upload(path: "drives", body: Data(DriveLinksRequest(drives: drives.map(\.wire)).wireBytes))
    }

    /// Uploads a generic snapshot of records; one link.
    public func upload(records: [SnapshotRecord]) async throws(LinkError) -> SharedLink {
        let drafts = records.map { record in
            RecordDraft(
                recordName: record.recordName, recordType: record.recordType, fields: record.fields.mapValues { .some($0) },
                parent: record.parent.map(FieldPatch.set) ?? .unchanged)
        }
        guard let link = try await upload(path: "records", body: Data(RecordsLinkRequest(records: drafts).wireBytes)).first else {
            throw .server(status: 200, reason: "no link in the answer")
        }
        return link
    }

    private func upload(path: String, body: Data) async throws(LinkError) -> [SharedLink] {
        var components = URLComponents(
            url: serverURL.appendingPathComponent("links/1/\(container)/\(environment.rawValue)/\(path)"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "ckAPIToken", value: apiToken)]
        let response = try await send(
            TransportRequest(
                method: "POST", url: components.url!, headers: ["Content-Type": "application/json", "X-Cumulus-Device": deviceID], body: body)
        )
        try check(response)
        let answer: CreatedLinksResponse
        do {
            answer = try CreatedLinksResponse(wireBytes: response.body)
        } catch {
            throw .server(status: response.status, reason: "an answer without its links: \(error)")
        }
        return answer.links.compactMap { link in
            URL(string: link.url).map { SharedLink(id: link.id, url: $0, expiresAt: Date(timeIntervalSince1970: Double(link.expiresAt) / 1000)) }
        }
    }

    // MARK: - Download

    /// Downloads a drive by link (`…/s/{id}`) or ID.
    public func downloadDrive(_ link: String) async throws(LinkError) -> DriveSnapshot {
        guard case .drive(let drive) = try await download(link).content else { throw .invalid("the link is not a drive") }
        return DriveSnapshot(drive)
    }

    /// Downloads a generic snapshot of records by link or ID.
    public func downloadRecords(_ link: String) async throws(LinkError) -> [SnapshotRecord] {
        guard case .records(let drafts) = try await download(link).content else { throw .invalid("the link is not a record snapshot") }
        var records: [SnapshotRecord] = []
        for (index, draft) in drafts.enumerated() {
            guard let name = draft.recordName, let type = draft.recordType else {
                throw .invalid("records[\(index)]: a name and a type are required")
            }
            var parent: String?
            if case .set(let name) = draft.parent { parent = name }
            records.append(SnapshotRecord(recordName: name, recordType: type, fields: draft.fields.compactMapValues { $0 }, parent: parent))
        }
        return records
    }

    private func download(_ link: String) async throws(LinkError) -> LinkSnapshotResponse {
        let id = link.split(separator: "/").last.map(String.init) ?? link
        let url = serverURL.appendingPathComponent("s/\(id).json")
        let response = try await send(TransportRequest(method: "GET", url: url, headers: ["Accept": "application/json"]))
        try check(response)
        do {
            return try LinkSnapshotResponse(wireBytes: response.body)
        } catch {
            throw .invalid(error.description)
        }
    }

    // MARK: - Helpers

    private func send(_ request: TransportRequest) async throws(LinkError) -> TransportResponse {
        do {
            return try await transport.send(request)
        } catch {
            throw .unreachable("\(error)")
        }
    }

    /// Maps the service's refusals (CloudKit's error envelope) to ``LinkError``.
    private func check(_ response: TransportResponse) throws(LinkError) {
        guard !(200..<300).contains(response.status) else { return }
        let envelope = try? ErrorResponse(wireBytes: response.body)
        let reason = envelope?.reason ?? "HTTP \(response.status)"
        switch response.status {
        case 401: throw .unauthorized
        case 404: throw .expired
        case 413: throw .tooLarge(reason)
        case 429: throw .rateLimited(retryAfter: envelope?.retryAfter)
        case 400: throw .invalid(reason)
        default: throw .server(status: response.status, reason: reason)
        }
    }
}

extension DriveSnapshot {
    /// The drive in its wire shape.
    var wire: SharedDrive {
        SharedDrive(
            startTime: Int64((startTime.timeIntervalSince1970 * 1000).rounded()), duration: duration, distance: distance, averageSpeed: averageSpeed,
            maxSpeed: maxSpeed, points: points.map { DrivePoint(lat: $0.lat, lon: $0.lon) }, customName: customName
        )
    }

    init(_ wire: SharedDrive) {
        self.init(
            startTime: Date(timeIntervalSince1970: Double(wire.startTime) / 1000), duration: wire.duration, distance: wire.distance,
            averageSpeed: wire.averageSpeed, maxSpeed: wire.maxSpeed, points: wire.points.map { Point(lat: $0.lat, lon: $0.lon) },
            customName: wire.customName
        )
    }

    /// An independent copy: a new identifier and the honest "(Shared)" name.
    public func importedCopy() -> ImportedDrive {
        ImportedDrive(id: UUID(), name: sharedCopyName, drive: self)
    }
}
