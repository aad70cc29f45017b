public import CumulusModel
import Foundation

/// One change of a record, as subscriptions see it: what it was and what it is now.
public struct RecordChangeEvent: Sendable, Hashable {
    /// The record's header now (for a deletion, as it was last stored).
    public var header: RecordHeader
    public var event: Subscription.Event
    /// The fields after the change; for a deletion, the fields it had.
    public var fields: [String: FieldValue]

    public init(header: RecordHeader, event: Subscription.Event, fields: [String: FieldValue]) {
        self.header = header
        self.event = event
        self.fields = fields
    }
}

/// Decides which subscriptions a change fires, without a store: so the rules are the same for every store and every
/// instance, and tested on their own.
///
/// A `database` subscription fires for any change in its database, a `zone` subscription for any change in its zone,
/// and a `query` subscription when the change's event is in `firesOn`, the record is of its type and in its zone (or it
/// is zone-wide), and the record matches every filter: as it is after a create or update, as it was before a delete.
public enum SubscriptionMatcher {
    /// Whether `subscription` fires for `change`, which happened in the zone `zoneID` of the subscription's database.
    public static func fires(_ subscription: Subscription, for change: RecordChangeEvent, in zoneID: ZoneID) -> Bool {
        switch subscription.kind {
        case .database:
            return true
        case .zone:
            guard let zone = subscription.zoneID else { return false }
            return zone.isSameZone(as: zoneID)
        case .query:
            guard let query = subscription.query, subscription.firesOn.contains(change.event), query.recordType == change.header.recordType
            else {
                return false
            }
            if !subscription.zoneWide {
                guard let zone = subscription.zoneID, zone.isSameZone(as: zoneID) else { return false }
            }
            return query.filters.allSatisfy { matches($0, change) }
        }
    }

    // MARK: - Filters

    /// Whether a record satisfies one filter, as `records/query` would decide it.
    static func matches(_ filter: QueryFilter, _ change: RecordChangeEvent) -> Bool {
        let value = fieldValue(filter.field, change)
        let wanted = filter.value
        switch filter.comparator {
        case .equals: return value.map { compare($0, wanted) == .orderedSame } ?? false
        case .notEquals: return value.map { compare($0, wanted) != .orderedSame } ?? false
        case .lessThan: return value.map { compare($0, wanted) == .orderedAscending } ?? false
        case .lessThanOrEquals: return value.map { [.orderedAscending, .orderedSame].contains(compare($0, wanted)) } ?? false
        case .greaterThan: return value.map { compare($0, wanted) == .orderedDescending } ?? false
        case .greaterThanOrEquals: return value.map { [.orderedDescending, .orderedSame].contains(compare($0, wanted)) } ?? false
        case .beginsWith: return beginsWith(value, wanted)
        case .notBeginsWith: return value != nil && !beginsWith(value, wanted)
        case .in: return value.map { member in elements(wanted).contains { compare(member, $0) == .orderedSame } } ?? false
        case .notIn: return value.map { member in !elements(wanted).contains { compare(member, $0) == .orderedSame } } ?? false
        case .listContains: return elements(value).contains { compare($0, wanted) == .orderedSame }
        case .notListContains: return !elements(value).contains { compare($0, wanted) == .orderedSame }
        case .listContainsAny, .notListContainsAny:
            let any = elements(value).contains { element in elements(wanted).contains { compare(element, $0) == .orderedSame } }
            return filter.comparator == .listContainsAny ? any : !any
        case .listContainsAll, .notListContainsAll:
            let list = elements(value)
            let all = elements(wanted).allSatisfy { wanted in list.contains { compare($0, wanted) == .orderedSame } }
            return filter.comparator == .listContainsAll ? all : !all
        case .listMemberBeginsWith: return elements(value).contains { beginsWith($0, wanted) }
        case .notListMemberBeginsWith: return !elements(value).contains { beginsWith($0, wanted) }
        case .near:
            guard case .location(let location)? = value, case .location(let center) = wanted, let distance = filter.distance else { return false }
            return greatCircleDistance(location, center) <= distance
        case .containsAllTokens, .containsAnyTokens:
            return false  // not supported by queries either
        }
    }

    static func fieldValue(_ field: QueryField, _ change: RecordChangeEvent) -> FieldValue? {
        switch field {
        case .field(let name): return change.fields[name]
        case .system(let system):
            let header = change.header
            switch system {
            case .recordName: return .string(header.recordName)
            case .createdTimestamp: return .timestamp(header.created.timestamp)
            case .modifiedTimestamp: return .timestamp(header.modified.timestamp)
            case .createdUserRecordName: return .string(header.created.userRecordName)
            case .modifiedUserRecordName: return .string(header.modified.userRecordName)
            case .parent: return header.parent.map { .string($0) }
            case .share: return header.share.map { .string($0.recordName) }
            }
        }
    }

    /// The comparable form of a value: numbers (integers, doubles, timestamps) as numbers, references by record name,
    /// bytes by their base64 text.
    private enum Scalar {
        case number(Double)
        case text(String)
        case other
    }

    private static func scalar(_ value: FieldValue) -> Scalar {
        switch value {
        case .int64(let int): .number(Double(int))
        case .double(let double): .number(double)
        case .timestamp(let milliseconds): .number(Double(milliseconds))
        case .string(let string): .text(string)
        case .reference(let reference): .text(reference.recordName)
        case .bytes(let data): .text(data.base64EncodedString())
        case .location, .asset, .list: .other
        }
    }

    static func compare(_ left: FieldValue, _ right: FieldValue) -> ComparisonResult? {
        switch (scalar(left), scalar(right)) {
        case (.number(let a), .number(let b)): return a < b ? .orderedAscending : a > b ? .orderedDescending : .orderedSame
        case (.text(let a), .text(let b)):
            // Byte order, as the stores compare names.
            let (x, y) = (Array(a.utf8), Array(b.utf8))
            return x.lexicographicallyPrecedes(y) ? .orderedAscending : y.lexicographicallyPrecedes(x) ? .orderedDescending : .orderedSame
        default: return left == right ? .orderedSame : nil
        }
    }

    private static func beginsWith(_ value: FieldValue?, _ prefix: FieldValue) -> Bool {
        guard let value, case .text(let text) = scalar(value), case .string(let start) = prefix else { return false }
        return text.utf8.starts(with: start.utf8)
    }

    private static func elements(_ value: FieldValue?) -> [FieldValue] {
        if case .list(_, let elements)? = value { return elements }
        return []
    }

    private static func greatCircleDistance(_ a: Location, _ b: Location) -> Double {
        let radius = 6_371_008.8
        let (p1, p2) = (a.latitude * .pi / 180, b.latitude * .pi / 180)
        let (dp, dl) = ((b.latitude - a.latitude) * .pi / 180, (b.longitude - a.longitude) * .pi / 180)
        let h = sin(dp / 2) * sin(dp / 2) + cos(p1) * cos(p2) * sin(dl / 2) * sin(dl / 2)
        return 2 * radius * atan2(h.squareRoot(), (1 - h).squareRoot())
    }
}
