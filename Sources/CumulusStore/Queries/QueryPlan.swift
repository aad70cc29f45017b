public import CumulusModel
import Foundation

/// A `records/query`'s filters and sorts, checked once and reduced to the few forms every store compiles.
///
/// The rules of what a query may ask live here, not in the stores: a store's compiler only turns each ``Condition``
/// and ``Order`` into its SQL, so SQLite and PostgreSQL accept and refuse the same queries with the same words.
///
/// ```swift
/// let plan = try QueryPlan(filters: query.filters, sorts: query.sorts)
/// for condition in plan.conditions { … }
/// ```
public struct QueryPlan: Sendable, Hashable {
    /// A value a filter compares with, as stored fields hold it: a timestamp as its milliseconds, bytes as base64, a
    /// reference as its record name.
    public enum Operand: Sendable, Hashable {
        case integer(Int64)
        case real(Double)
        case text(String)
    }

    /// A comparison of one value with another, by its SQL operator.
    public enum Comparison: String, Sendable, Hashable {
        case equal = "="
        case notEqual = "<>"
        case less = "<"
        case lessOrEqual = "<="
        case greater = ">"
        case greaterOrEqual = ">="
    }

    /// What a filter reads.
    public enum Target: Sendable, Hashable {
        /// A system column.
        case system(QuerySystemField)
        /// A field's scalar value.
        case value(String)
        /// The record name of a field's reference.
        case referenceName(String)
    }

    /// One filter, in a form a store compiles without deciding anything.
    public enum Condition: Sendable, Hashable {
        case compare(Target, Comparison, Operand)
        case beginsWith(Target, prefix: String, negated: Bool)
        /// `IN` (or `NOT_IN`): the target is one of the operands.
        case among(Target, [Operand], negated: Bool)
        /// A list field holds the operand (its elements' record names, for a list of references).
        case listContains(field: String, Operand, references: Bool, negated: Bool)
        case listContainsAny(field: String, [Operand], references: Bool, negated: Bool)
        case listContainsAll(field: String, [Operand], references: Bool, negated: Bool)
        case listMemberBeginsWith(field: String, prefix: String, negated: Bool)
        /// A location field within `distance` metres of `center`.
        case near(field: String, center: Location, distance: Double)
    }

    /// One sort key.
    public enum Order: Sendable, Hashable {
        case system(QuerySystemField, ascending: Bool)
        case value(String, ascending: Bool)
        /// By distance from a point, of a location field.
        case distance(field: String, from: Location, ascending: Bool)
    }

    /// Why a query was refused: the JSON path of what is wrong, and what.
    public struct Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        public var path: String
        public var message: String

        public var description: String { "\(path): \(message)" }
    }

    public var conditions: [Condition]
    public var orders: [Order]

    /// Checks filters and sorts; throws the first ``Refusal``, naming `query.filterBy[i]` or `query.sortBy[i]`.
    public init(filters: [QueryFilter], sorts: [QuerySort]) throws(Refusal) {
        conditions = []
        for (index, filter) in filters.enumerated() {
            conditions.append(try Self.condition(filter, path: "query.filterBy[\(index)]"))
        }
        orders = sorts.map { sort in
            switch sort.field {
            case .system(let system): .system(system, ascending: sort.ascending)
            case .field(let name):
                sort.relativeLocation.map { .distance(field: name, from: $0, ascending: sort.ascending) } ?? .value(name, ascending: sort.ascending)
            }
        }
    }

    /// Whether a system field holds integers (the timestamps) rather than text.
    private static func isInteger(_ field: QuerySystemField) -> Bool {
        field == .createdTimestamp || field == .modifiedTimestamp
    }

    private static func condition(_ filter: QueryFilter, path: String) throws(Refusal) -> Condition {
        let comparator = filter.comparator.rawValue
        func refuse(_ key: String, _ message: String) -> Refusal { Refusal(path: "\(path).\(key)", message: message) }
        func string() throws(Refusal) -> String {
            guard case .string(let text) = filter.value else { throw refuse("fieldValue", "\(comparator) needs a STRING value") }
            return text
        }
        func listField() throws(Refusal) -> String {
            guard case .field(let name) = filter.field else { throw refuse("systemFieldName", "\(comparator) applies to list fields") }
            return name
        }
        func elements() throws(Refusal) -> [Operand] {
            guard case .list(let type, let values) = filter.value else { throw refuse("fieldValue", "\(comparator) needs a list value") }
            if let type, type == .location || type == .asset { throw refuse("fieldValue", "\(comparator) cannot compare \(type.rawValue) values") }
            var operands: [Operand] = []
            for value in values {
                guard let operand = operand(value) else { throw refuse("fieldValue", "\(comparator) cannot compare \(value.typeTag) values") }
                operands.append(operand)
            }
            return operands
        }
        func single() throws(Refusal) -> Operand {
            guard let operand = operand(filter.value) else {
                throw refuse("fieldValue", "\(comparator) needs a single STRING, INT64, DOUBLE, TIMESTAMP, BYTES or REFERENCE value")
            }
            return operand
        }
        let references = isReference(filter.value)
        let target: Target =
            switch filter.field {
            case .system(let system): .system(system)
            case .field(let name): references ? .referenceName(name) : .value(name)
            }

        switch filter.comparator {
        case .equals, .notEquals, .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals:
            let operand = try single()
            if case .system(let system) = filter.field, !fits(filter.value, system) {
                throw refuse("fieldValue", "a \(filter.value.typeTag) value cannot be compared with \(system.rawValue)")
            }
            let comparisons: [QueryComparator: Comparison] = [
                .equals: .equal, .notEquals: .notEqual, .lessThan: .less, .lessThanOrEquals: .lessOrEqual, .greaterThan: .greater,
                .greaterThanOrEquals: .greaterOrEqual,
            ]
            return .compare(target, comparisons[filter.comparator]!, operand)
        case .beginsWith, .notBeginsWith:
            let prefix = try string()
            return .beginsWith(target, prefix: prefix, negated: filter.comparator == .notBeginsWith)
        case .in, .notIn:
            return .among(target, try elements(), negated: filter.comparator == .notIn)
        case .listContains, .notListContains:
            let operand = try single()
            return .listContains(field: try listField(), operand, references: references, negated: filter.comparator == .notListContains)
        case .listContainsAny, .notListContainsAny:
            let operands = try elements()
            return .listContainsAny(field: try listField(), operands, references: references, negated: filter.comparator == .notListContainsAny)
        case .listContainsAll, .notListContainsAll:
            let operands = try elements()
            return .listContainsAll(field: try listField(), operands, references: references, negated: filter.comparator == .notListContainsAll)
        case .listMemberBeginsWith, .notListMemberBeginsWith:
            let prefix = try string()
            return .listMemberBeginsWith(field: try listField(), prefix: prefix, negated: filter.comparator == .notListMemberBeginsWith)
        case .near:
            guard case .location(let center) = filter.value else { throw refuse("fieldValue", "NEAR needs a LOCATION value") }
            guard case .field(let name) = filter.field else { throw refuse("fieldName", "NEAR needs a LOCATION field") }
            guard let distance = filter.distance, distance >= 0 else { throw refuse("distance", "NEAR needs a distance in metres") }
            return .near(field: name, center: center, distance: distance)
        case .containsAllTokens, .containsAnyTokens:
            throw refuse("comparator", "\(comparator) (full-text search) is not supported yet")
        }
    }

    /// A scalar value as stored fields hold it; `nil` for what no filter compares (locations, assets, lists).
    private static func operand(_ value: FieldValue) -> Operand? {
        switch value {
        case .string(let text): .text(text)
        case .int64(let integer): .integer(integer)
        case .double(let real): .real(real)
        case .timestamp(let milliseconds): .integer(milliseconds)
        case .bytes(let data): .text(data.base64EncodedString())
        case .reference(let reference): .text(reference.recordName)
        case .location, .asset, .list: nil
        }
    }

    /// Whether a filter compares references, by their record names.
    private static func isReference(_ value: FieldValue) -> Bool {
        switch value {
        case .reference, .list(.reference, _): true
        default: false
        }
    }

    /// Whether a value may be compared with a system column: numbers with the timestamps, text and references with the
    /// names.
    private static func fits(_ value: FieldValue, _ field: QuerySystemField) -> Bool {
        switch value {
        case .int64, .double, .timestamp: isInteger(field)
        case .string, .reference: !isInteger(field)
        default: false
        }
    }
}
