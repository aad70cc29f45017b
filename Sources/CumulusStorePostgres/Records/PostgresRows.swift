import CumulusModel
import CumulusStore
import Foundation
import NIOCore
import PostgresNIO

/// Reads a row's cells by position, as the SQLite store does: statements here select fixed column lists, and a feed or
/// query row carries a record's columns after a few of its own.
struct RowReader {
    let row: PostgresRandomAccessRow

    init(_ row: PostgresRow) {
        self.row = row.makeRandomAccess()
    }

    subscript<T: PostgresDecodable>(_ index: Int, as type: T.Type = T.self) -> T {
        get throws { try row[index].decode(T.self) }
    }

    /// The raw bytes of a text cell (results arrive in binary format, which for text is its UTF-8), without making a
    /// `String` first: a record's fields are spliced into answers as stored.
    func bytes(_ index: Int) -> [UInt8]? {
        row[index].bytes.map { Array($0.readableBytesView) }
    }
}

/// A PostgreSQL `text[]` parameter whose elements may be NULL: postgres-nio encodes arrays of non-optional values only,
/// and set-based writes (`UNNEST`) carry optional columns such as a record's parent.
struct NullableTextArray: PostgresNonThrowingEncodable {
    var elements: [String?]

    init(_ elements: [String?]) {
        self.elements = elements
    }

    static var psqlType: PostgresDataType { .textArray }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        // PostgreSQL's binary array: dimensions, has-nulls flag, element type, then per dimension its length and lower
        // bound, then each element as a length (-1 for NULL) and its bytes.
        buffer.writeInteger(elements.isEmpty ? 0 : 1, as: Int32.self)
        buffer.writeInteger(elements.contains(nil) ? 1 : 0, as: Int32.self)
        buffer.writeInteger(PostgresDataType.text.rawValue)
        guard !elements.isEmpty else { return }
        buffer.writeInteger(Int32(elements.count))
        buffer.writeInteger(1, as: Int32.self)
        for element in elements {
            if let element {
                buffer.writeInteger(Int32(element.utf8.count))
                buffer.writeString(element)
            } else {
                buffer.writeInteger(-1, as: Int32.self)
            }
        }
    }
}

extension PostgresRecordStore {
    /// The record columns, in the order ``storedRecord(_:zoneID:offset:)`` reads them (the same as the SQLite store's).
    static let recordColumns = """
        record_name, record_type, change_seq, fields, parent_name, share_name, short_guid,
        created_at, created_by, created_device, modified_at, modified_by, modified_device
        """

    /// ``recordColumns`` qualified by a table alias.
    static func recordColumns(_ alias: String) -> String {
        recordColumns.split(separator: ",").map { "\(alias)." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", ")
    }

    /// `FROM` items for the rows of `records`, tombstones included, named in the `text[]` expression `names` (each once)
    /// in the zone whose row ID is the expression `zone`, as `alias`; `wanted.name` is the name each row was asked by.
    ///
    /// Each name is one probe of the `(zone_id, record_name)` key, whatever PostgreSQL's statistics say of the zone.
    /// `zone_id = … AND record_name = ANY(…)` lets the planner choose between that probe and a scan of the zone (every
    /// other index on `records` starts with `zone_id`), and it sizes the zone from statistics: the average zone when
    /// the zone comes from a join, nothing for a zone that grew since the last `ANALYZE`. A batch then read a large zone
    /// whole (docs/BENCHMARKS.md, fourth measurement). An equality probe per name ties with the zone scan where the
    /// statistics say a zone holds one record, and PostgreSQL breaks the tie toward the smaller index. The first name
    /// at or after the wanted one, in the key's order, is served without a sort by the key alone; any other index
    /// would sort the zone first, so no statistics make that cheaper.
    static func recordsNamed(_ names: String, inZone zone: String, as alias: String) -> String {
        "(SELECT DISTINCT unnest(\(names)::text[]) AS name) AS wanted CROSS JOIN \(recordNamed("wanted.name", inZone: zone)) AS \(alias)"
    }

    /// A `LATERAL` item: the row of `records`, tombstone or live, named by the expression `name` in the zone whose row ID
    /// is the expression `zone`, found as ``recordsNamed(_:inZone:as:)`` finds each.
    static func recordNamed(_ name: String, inZone zone: String) -> String {
        """
        LATERAL (
            SELECT next.* FROM (
                SELECT * FROM records WHERE zone_id = \(zone) AND record_name >= \(name) ORDER BY record_name LIMIT 1
            ) AS next WHERE next.record_name = \(name)
        )
        """
    }

    /// Decodes a row selected with ``recordColumns`` starting at column `offset`.
    static func storedRecord(_ row: RowReader, zoneID: ZoneID, offset: Int = 0) throws -> StoredRecord {
        let sequence: Int64 = try row[offset + 2]
        let shareName: String? = try row[offset + 5]
        return StoredRecord(
            header: RecordHeader(
                recordName: try row[offset], recordType: try row[offset + 1], recordChangeTag: ChangeTag.make(sequence),
                created: RecordStamp(timestamp: try row[offset + 7], userRecordName: try row[offset + 8], deviceID: try row[offset + 9]),
                modified: RecordStamp(timestamp: try row[offset + 10], userRecordName: try row[offset + 11], deviceID: try row[offset + 12]),
                parent: try row[offset + 4],
                share: shareName.map { Reference(recordName: $0, zoneID: zoneID) },
                zoneID: zoneID, shortGUID: try row[offset + 6]
            ),
            fieldsJSON: row.bytes(offset + 3) ?? Array("{}".utf8),
            changeSequence: sequence
        )
    }
}
