import Crypto
import CumulusModel
public import CumulusStore
import Foundation

/// Opaque, tamper-evident change tokens and continuation markers.
///
/// A token is `base64(payload ‖ HMAC-SHA256(secret, payload)[0..<16])`, standard base64 with padding as CloudKit's
/// own tokens are (third-party clients decode them with a strict standard decoder); the unpadded base64url form that
/// earlier versions issued is still accepted. The payload names what the token is for (a
/// database feed, a zone feed, a query) by a digest of the database and zone, so a token of another user or zone is
/// rejected, never read as a position somewhere else. The secret lives in the store, so tokens survive restarts and
/// work on every server sharing the store.
public struct SyncTokenCodec: Sendable {
    /// The HMAC with its key already mixed in: each token copies it rather than deriving the key's pads again (two
    /// SHA-256 blocks, half of a push token's check).
    private let keyed: HMAC<SHA256>

    public init(secret: [UInt8]) {
        keyed = HMAC<SHA256>(key: SymmetricKey(data: secret))
    }

    /// A position in a database's change feed.
    public struct DatabasePosition: Sendable, Hashable {
        public var sequence: Int64
    }

    /// A position in a zone's change feed.
    public struct ZonePosition: Sendable, Hashable {
        public var incarnation: Int64
        public var sequence: Int64
    }

    private enum Kind: UInt8 {
        case database = 1
        case zone = 2
        case query = 3
    }

    private static let version: UInt8 = 1
    private static let macLength = 16

    // MARK: - Change tokens

    public func databaseToken(_ database: DatabaseRef, sequence: Int64) -> String {
        seal(.database, scope: Self.digest("\(database)"), numbers: [sequence], extra: [])
    }

    public func decodeDatabaseToken(_ token: String, database: DatabaseRef) throws(CumulusError) -> DatabasePosition {
        let numbers = try open(token, kind: .database, scope: Self.digest("\(database)"), count: 1, what: "syncToken").numbers
        return DatabasePosition(sequence: numbers[0])
    }

    /// A shared database's token: the position of database 0 as a database token's, and those of the other databases
    /// of a sharded store after it, so that a store of one database issues the same tokens as before.
    public func sharedDatabaseToken(_ database: DatabaseRef, position: SharedDatabasePosition) -> String {
        var extra: [UInt8] = []
        for (number, sequence) in position.sequences.sorted(by: { $0.key < $1.key }) where number != 0 {
            withUnsafeBytes(of: UInt32(truncatingIfNeeded: number).bigEndian) { extra.append(contentsOf: $0) }
            withUnsafeBytes(of: sequence.bigEndian) { extra.append(contentsOf: $0) }
        }
        return seal(.database, scope: Self.digest("\(database)"), numbers: [position[0]], extra: extra)
    }

    public func decodeSharedDatabaseToken(_ token: String, database: DatabaseRef) throws(CumulusError) -> SharedDatabasePosition {
        let (numbers, extra) = try open(token, kind: .database, scope: Self.digest("\(database)"), count: 1, what: "syncToken")
        guard extra.count % 12 == 0 else { throw CumulusError(.changeTokenExpired, "syncToken: is not a token issued by this server") }
        var position = SharedDatabasePosition(sequence: numbers[0])
        var offset = 0
        while offset < extra.count {
            let number = extra[offset..<offset + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            position[Int(number)] = extra[offset + 4..<offset + 12].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            offset += 12
        }
        return position
    }

    public func zoneToken(_ database: DatabaseRef, zoneName: String, incarnation: Int64, sequence: Int64) -> String {
        seal(.zone, scope: Self.digest("\(database)/\(zoneName)"), numbers: [incarnation, sequence], extra: [])
    }

    public func decodeZoneToken(_ token: String, database: DatabaseRef, zoneName: String) throws(CumulusError) -> ZonePosition {
        let numbers = try open(token, kind: .zone, scope: Self.digest("\(database)/\(zoneName)"), count: 2, what: "syncToken").numbers
        return ZonePosition(incarnation: numbers[0], sequence: numbers[1])
    }

    // MARK: - Continuation markers

    /// Seals a query cursor, bound to the query it continues (`fingerprint`).
    public func continuationMarker(_ cursor: QueryCursor, fingerprint: String) -> String {
        var writer = JSONWriter()
        writer.beginArray()
        for key in cursor.keys {
            switch key {
            case .null: writer.null()
            case .integer(let int): writer.string("i\(int)")
            case .real(let double): writer.string("r\(double)")
            case .text(let text): writer.string("t" + text)
            }
        }
        writer.endArray()
        return seal(.query, scope: Self.digest(fingerprint), numbers: [cursor.rowID], extra: writer.bytes)
    }

    public func decodeContinuationMarker(_ marker: String, fingerprint: String) throws(CumulusError) -> QueryCursor {
        let (numbers, extra) = try open(marker, kind: .query, scope: Self.digest(fingerprint), count: 1, what: "continuationMarker")
        guard let keys = try? JSONValue(parsing: extra).arrayValue else {
            throw CumulusError(.badRequest, "continuationMarker: is not valid")
        }
        var values: [QueryKeyValue] = []
        for key in keys {
            switch key {
            case .null: values.append(.null)
            case .string(let text) where text.hasPrefix("i"): values.append(.integer(Int64(text.dropFirst()) ?? 0))
            case .string(let text) where text.hasPrefix("r"): values.append(.real(Double(text.dropFirst()) ?? 0))
            case .string(let text): values.append(.text(String(text.dropFirst())))
            default: throw CumulusError(.badRequest, "continuationMarker: is not valid")
            }
        }
        return QueryCursor(keys: values, rowID: numbers[0])
    }

    // MARK: - Sealing

    /// HMAC-SHA256 of `message` under the server's secret (push tokens label their messages apart).
    func mac(_ message: [UInt8]) -> [UInt8] {
        var hmac = keyed
        hmac.update(data: message)
        return Array(hmac.finalize())
    }

    private static func digest(_ text: String) -> [UInt8] {
        Array(SHA256.hash(data: Data(text.utf8)).prefix(8))
    }

    private func seal(_ kind: Kind, scope: [UInt8], numbers: [Int64], extra: [UInt8]) -> String {
        var payload: [UInt8] = [Self.version, kind.rawValue] + scope
        for number in numbers {
            withUnsafeBytes(of: number.bigEndian) { payload.append(contentsOf: $0) }
        }
        payload += extra
        let mac = self.mac(payload)
        return Data(payload + mac.prefix(Self.macLength)).base64EncodedString()
    }

    /// Opens a sealed token. A change token that cannot be opened is reported as expired (its remedy, fetching
    /// without one, is right whatever the cause: a token secret replaced, a token of another zone, a token never
    /// issued); a continuation marker that cannot be opened is a bad request.
    private func open(_ token: String, kind: Kind, scope: [UInt8], count: Int, what: String) throws(CumulusError) -> (
        numbers: [Int64], extra: [UInt8]
    ) {
        let code: CumulusError.Code = kind == .query ? .badRequest : .changeTokenExpired
        let minimum = 2 + 8 + 8 * count + Self.macLength
        guard let data = Data(lenientBase64: token), data.count >= minimum else {
            throw CumulusError(code, "\(what): is not a token issued by this server")
        }
        let bytes = Array(data)
        let payload = Array(bytes.dropLast(Self.macLength))
        let mac = self.mac(payload)
        guard mac.prefix(Self.macLength).elementsEqual(bytes.suffix(Self.macLength)), payload[0] == Self.version else {
            throw CumulusError(code, "\(what): is not a token issued by this server")
        }
        guard payload[1] == kind.rawValue, Array(payload[2..<10]) == scope else {
            throw CumulusError(code, "\(what): belongs to another database, zone or query")
        }
        var numbers: [Int64] = []
        var offset = 10
        for _ in 0..<count {
            let number = payload[offset..<offset + 8].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            numbers.append(number)
            offset += 8
        }
        return (numbers, Array(payload[offset...]))
    }
}

extension Data {
    /// Decodes standard base64 or base64url, with or without padding.
    init?(lenientBase64 string: String) {
        var base64 = string.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        if base64.utf8.count % 4 != 0 {
            guard !base64.hasSuffix("=") else { return nil }
            base64.append(String(repeating: "=", count: 4 - base64.utf8.count % 4))
        }
        self.init(base64Encoded: base64)
    }
}
