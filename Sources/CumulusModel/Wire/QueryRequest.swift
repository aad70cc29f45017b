/// The comparators of CloudKit queries.
public enum QueryComparator: String, Sendable, Hashable, CaseIterable {
    case equals = "EQUALS"
    case notEquals = "NOT_EQUALS"
    case lessThan = "LESS_THAN"
    case lessThanOrEquals = "LESS_THAN_OR_EQUALS"
    case greaterThan = "GREATER_THAN"
    case greaterThanOrEquals = "GREATER_THAN_OR_EQUALS"
    case near = "NEAR"
    case containsAllTokens = "CONTAINS_ALL_TOKENS"
    case containsAnyTokens = "CONTAINS_ANY_TOKENS"
    case `in` = "IN"
    case notIn = "NOT_IN"
    case listContains = "LIST_CONTAINS"
    case notListContains = "NOT_LIST_CONTAINS"
    case listContainsAny = "LIST_CONTAINS_ANY"
    case notListContainsAny = "NOT_LIST_CONTAINS_ANY"
    case listContainsAll = "LIST_CONTAINS_ALL"
    case notListContainsAll = "NOT_LIST_CONTAINS_ALL"
    case beginsWith = "BEGINS_WITH"
    case notBeginsWith = "NOT_BEGINS_WITH"
    case listMemberBeginsWith = "LIST_MEMBER_BEGINS_WITH"
    case notListMemberBeginsWith = "NOT_LIST_MEMBER_BEGINS_WITH"
}

/// A system field usable in queries (`systemFieldName`).
public enum QuerySystemField: String, Sendable, Hashable, CaseIterable {
    case recordName
    case createdTimestamp
    case modifiedTimestamp
    case createdUserRecordName
    case modifiedUserRecordName
    case parent
    case share

    /// Reads a system field name, accepting the `___` forms of CloudKit's schema too.
    public init?(wire name: String) {
        let aliases: [String: QuerySystemField] = [
            "___recordId": .recordName, "___createTime": .createdTimestamp, "___modTime": .modifiedTimestamp,
            "___createdBy": .createdUserRecordName, "___modifiedBy": .modifiedUserRecordName, "___parent": .parent, "___share": .share,
        ]
        if let field = QuerySystemField(rawValue: name) ?? aliases[name] {
            self = field
        } else {
            return nil
        }
    }
}

/// What a filter or sort applies to: a record field or a system field.
public enum QueryField: Sendable, Hashable {
    case field(String)
    case system(QuerySystemField)

    /// Writes `fieldName` or `systemFieldName` into a filter or sort dictionary.
    func write(to writer: inout JSONWriter) {
        switch self {
        case .field(let name):
            writer.key("fieldName")
            writer.string(name)
        case .system(let system):
            writer.key("systemFieldName")
            writer.string(system.rawValue)
        }
    }

    static func read(_ object: WireObject) throws(WireFormatError) -> QueryField {
        if let system = try object.string("systemFieldName") {
            guard let field = QuerySystemField(wire: system) else {
                throw WireFormatError(
                    path: object.path("systemFieldName"),
                    message: "unknown system field \(system); expected one of \(QuerySystemField.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            return .system(field)
        }
        guard let name = try object.string("fieldName") else {
            throw WireFormatError(path: object.path("fieldName"), message: "fieldName or systemFieldName is required")
        }
        return .field(name)
    }
}

/// A query filter.
public struct QueryFilter: Sendable, Hashable {
    public var comparator: QueryComparator
    public var field: QueryField
    /// The value compared with; a list for `IN`, `NOT_IN` and the `LIST_*_ANY`/`_ALL` comparators.
    public var value: FieldValue
    /// Metres, for `NEAR`.
    public var distance: Double?

    public init(comparator: QueryComparator, field: QueryField, value: FieldValue, distance: Double? = nil) {
        self.comparator = comparator
        self.field = field
        self.value = value
        self.distance = distance
    }
}

/// A sort descriptor.
public struct QuerySort: Sendable, Hashable {
    public var field: QueryField
    public var ascending: Bool
    /// Sort by distance from this location (for `LOCATION` fields).
    public var relativeLocation: Location?

    public init(field: QueryField, ascending: Bool = true, relativeLocation: Location? = nil) {
        self.field = field
        self.ascending = ascending
        self.relativeLocation = relativeLocation
    }
}

/// The body of `records/query`.
public struct RecordsQueryRequest: Sendable, Hashable {
    public var recordType: String
    public var filters: [QueryFilter]
    public var sorts: [QuerySort]
    public var zoneID: ZoneID?
    public var zoneWide: Bool
    public var resultsLimit: Int?
    public var continuationMarker: String?
    public var desiredKeys: [String]?
    public var numbersAsStrings: Bool

    public init(
        recordType: String, filters: [QueryFilter] = [], sorts: [QuerySort] = [], zoneID: ZoneID? = nil, zoneWide: Bool = false,
        resultsLimit: Int? = nil, continuationMarker: String? = nil, desiredKeys: [String]? = nil, numbersAsStrings: Bool = false
    ) {
        self.recordType = recordType
        self.filters = filters
        self.sorts = sorts
        self.zoneID = zoneID
        self.zoneWide = zoneWide
        self.resultsLimit = resultsLimit
        self.continuationMarker = continuationMarker
        self.desiredKeys = desiredKeys
        self.numbersAsStrings = numbersAsStrings
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("zoneID", zoneID)
        if zoneWide { writer.member("zoneWide", true) }
        writer.member("resultsLimit", resultsLimit)
        writer.member("continuationMarker", continuationMarker)
        writer.key("query")
        writer.beginObject()
        writer.key("recordType")
        writer.string(recordType)
        writer.array("filterBy", filters) { writer, filter in
            writer.beginObject()
            writer.key("comparator")
            writer.string(filter.comparator.rawValue)
            filter.field.write(to: &writer)
            writer.key("fieldValue")
            writer.field(filter.value)
            if let distance = filter.distance {
                writer.key("distance")
                writer.double(distance)
            }
            writer.endObject()
        }
        writer.array("sortBy", sorts) { writer, sort in
            writer.beginObject()
            sort.field.write(to: &writer)
            writer.key("ascending")
            writer.bool(sort.ascending)
            if let location = sort.relativeLocation {
                writer.key("relativeLocation")
                writer.field(.location(location))
            }
            writer.endObject()
        }
        writer.endObject()
        writer.member("desiredKeys", strings: desiredKeys)
        if numbersAsStrings { writer.member("numbersAsStrings", true) }
        writer.endObject()
    }

    /// Reads the request body.
    public init(wire object: WireObject) throws(WireFormatError) {
        guard let query = try object.object("query") else {
            throw WireFormatError(path: object.path("query"), message: "is required")
        }
        recordType = try query.requiredString("recordType")
        filters = []
        for (index, value) in (try query.array("filterBy") ?? []).enumerated() {
            let filter = try WireObject(value, path: "\(query.path("filterBy"))[\(index)]")
            let name = try filter.requiredString("comparator")
            guard let comparator = QueryComparator(rawValue: name.uppercased()) else {
                throw WireFormatError(path: filter.path("comparator"), message: "unknown comparator \(name)")
            }
            guard let fieldValue = filter["fieldValue"] else {
                throw WireFormatError(path: filter.path("fieldValue"), message: "is required")
            }
            guard let value = try FieldValue.read(field: fieldValue, path: filter.path("fieldValue")) else {
                throw WireFormatError(path: filter.path("fieldValue.value"), message: "is required")
            }
            var distance: Double?
            if let member = filter["distance"] {
                distance = try FieldValue.readDouble(member, type: .double, path: filter.path("distance"))
            }
            filters.append(QueryFilter(comparator: comparator, field: try QueryField.read(filter), value: value, distance: distance))
        }
        sorts = []
        for (index, value) in (try query.array("sortBy") ?? []).enumerated() {
            let sort = try WireObject(value, path: "\(query.path("sortBy"))[\(index)]")
            var relativeLocation: Location?
            if let location = sort["relativeLocation"] {
                // Either a bare location or a field dictionary {value, type: LOCATION}.
                let locationObject = try WireObject(location, path: sort.path("relativeLocation"))
                relativeLocation = try Location(wire: locationObject["value"] ?? location, path: sort.path("relativeLocation"))
            }
            sorts.append(
                QuerySort(field: try QueryField.read(sort), ascending: try sort.bool("ascending") ?? true, relativeLocation: relativeLocation))
        }
        if let zone = try object.object("zoneID") {
            zoneID = try ZoneID(wire: zone)
        } else {
            zoneID = nil
        }
        zoneWide = try object.bool("zoneWide") ?? false
        resultsLimit = try object.int("resultsLimit")
        continuationMarker = try object.string("continuationMarker")
        desiredKeys = try object.stringArray("desiredKeys")
        numbersAsStrings = try object.bool("numbersAsStrings") ?? false
    }
}

/// The body of `users/discover` (`lookupInfos`) and `users/lookup/email` and `users/lookup/id` (`users`).
public struct UserLookupRequest: Sendable, Hashable {
    /// One lookup key.
    public enum Key: Sendable, Hashable {
        case emailAddress(String)
        case userRecordName(String)
        case phoneNumber(String)
    }

    public var keys: [Key]

    /// Reads `{lookupInfos: […]}` or `{users: […]}`; each entry may carry `emailAddress`, `userRecordName` or `phoneNumber`.
    public init(wire object: WireObject) throws(WireFormatError) {
        let listKey = object["lookupInfos"] != nil ? "lookupInfos" : "users"
        guard let values = try object.array(listKey) else {
            throw WireFormatError(path: object.path("lookupInfos"), message: "is required")
        }
        keys = []
        for (index, value) in values.enumerated() {
            let entry = try WireObject(value, path: "\(object.path(listKey))[\(index)]")
            if let email = try entry.string("emailAddress") {
                keys.append(.emailAddress(email))
            } else if let name = try entry.string("userRecordName") {
                keys.append(.userRecordName(name))
            } else if let phone = try entry.string("phoneNumber") {
                keys.append(.phoneNumber(phone))
            } else {
                throw WireFormatError(path: entry.path("emailAddress"), message: "emailAddress, userRecordName or phoneNumber is required")
            }
        }
    }
}

extension RecordsQueryRequest: WireMessage {}
