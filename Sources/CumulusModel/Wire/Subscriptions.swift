/// A subscription: which changes of a database a user wants to be notified of (CloudKit Web Services' Subscription
/// dictionary).
///
/// - `zone`: any change to the records of one zone.
/// - `query`: records of a type that match `filterBy`, on the events in `firesOn`, in one zone or every zone
///   (`zoneWide`, the default).
/// - `database`: any change in the database (the subscription CKSyncEngine relies on); Cumulus accepts it on the wire as
///   `subscriptionType: "database"`.
public struct Subscription: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case zone, query, database
    }

    /// The record events a query subscription fires on.
    public enum Event: String, Sendable, Hashable, CaseIterable {
        case create, update, delete
    }

    public var subscriptionID: String
    public var kind: Kind
    /// The zone of a `zone` subscription, or of a `query` subscription that is not zone-wide.
    public var zoneID: ZoneID?
    /// Whether a `query` subscription covers every zone of the database.
    public var zoneWide: Bool
    /// The record type and filters of a `query` subscription.
    public var query: RecordsQueryRequest?
    /// The `query` dictionary as sent, echoed in answers.
    public var queryJSON: JSONValue?
    public var firesOn: [Event]
    public var firesOnce: Bool
    /// Kept and echoed as sent: how a push shows to the user (alert, sound, badge, content-available).
    public var notificationInfo: JSONValue?

    public init(
        subscriptionID: String, kind: Kind, zoneID: ZoneID? = nil, zoneWide: Bool = false, query: RecordsQueryRequest? = nil,
        queryJSON: JSONValue? = nil, firesOn: [Event] = [], firesOnce: Bool = false, notificationInfo: JSONValue? = nil
    ) {
        self.subscriptionID = subscriptionID
        self.kind = kind
        self.zoneID = zoneID
        self.zoneWide = zoneWide
        self.query = query
        self.queryJSON = queryJSON
        self.firesOn = firesOn
        self.firesOnce = firesOnce
        self.notificationInfo = notificationInfo
    }

    /// Reads a Subscription dictionary. `subscriptionID` may be absent (the server names a new subscription); a missing
    /// `subscriptionType` is `query` when a `query` is present and `zone` otherwise, as clients that send only what they
    /// need expect.
    public init(wire object: WireObject) throws(WireFormatError) {
        subscriptionID = try object.string("subscriptionID") ?? ""
        let typeName = try object.string("subscriptionType") ?? (object["query"] != nil ? "query" : "zone")
        guard let kind = Kind(rawValue: typeName.lowercased()) else {
            throw WireFormatError(path: object.path("subscriptionType"), message: "expected zone, query or database, found \(typeName)")
        }
        self.kind = kind
        zoneID = try object.object("zoneID").map { zone throws(WireFormatError) in try ZoneID(wire: zone) }
        firesOnce = try object.bool("firesOnce") ?? false
        notificationInfo = object["notificationInfo"]
        if let info = notificationInfo, info.objectValue == nil {
            throw WireFormatError(path: object.path("notificationInfo"), message: "must be an object")
        }
        switch kind {
        case .query:
            guard object["query"] != nil else { throw WireFormatError(path: object.path("query"), message: "is required for a query subscription") }
            zoneWide = try object.bool("zoneWide") ?? (zoneID == nil)
            var query = try RecordsQueryRequest(wire: object)
            // The query's scope is the subscription's, however it was spelled.
            query.zoneWide = zoneWide
            self.query = query
            queryJSON = object["query"]
            var events: [Event] = []
            for (index, name) in (try object.stringArray("firesOn") ?? Event.allCases.map(\.rawValue)).enumerated() {
                guard let event = Event(rawValue: name.lowercased()) else {
                    throw WireFormatError(path: "\(object.path("firesOn"))[\(index)]", message: "expected create, update or delete, found \(name)")
                }
                if !events.contains(event) { events.append(event) }
            }
            guard !events.isEmpty else { throw WireFormatError(path: object.path("firesOn"), message: "names no event") }
            firesOn = events
        case .zone, .database:
            query = nil
            queryJSON = nil
            zoneWide = false
            firesOn = []
        }
    }
}

extension JSONWriter {
    /// Writes a Subscription dictionary.
    public mutating func subscription(_ subscription: Subscription) {
        beginObject()
        key("subscriptionID")
        string(subscription.subscriptionID)
        key("subscriptionType")
        string(subscription.kind.rawValue)
        if let zoneID = subscription.zoneID {
            key("zoneID")
            self.zoneID(zoneID)
        }
        if subscription.kind == .query {
            if let query = subscription.queryJSON {
                key("query")
                write(query)
            }
            key("firesOn")
            beginArray()
            for event in subscription.firesOn { string(event.rawValue) }
            endArray()
            key("zoneWide")
            bool(subscription.zoneWide)
        }
        key("firesOnce")
        bool(subscription.firesOnce)
        if let info = subscription.notificationInfo {
            key("notificationInfo")
            write(info)
        }
        endObject()
    }
}

/// The body of `subscriptions/modify`.
public struct SubscriptionsModifyRequest: Sendable, Hashable {
    public enum OperationType: String, Sendable, Hashable {
        case create, update, delete
    }

    public struct Operation: Sendable, Hashable {
        public var operationType: OperationType
        /// The subscription to save; for a delete, only its `subscriptionID` matters.
        public var subscription: Subscription
    }

    public var operations: [Operation]

    /// Reads the request body: `{operations: [{operationType, subscription}]}`.
    public init(wire object: WireObject) throws(WireFormatError) {
        guard let values = try object.array("operations") else {
            throw WireFormatError(path: object.path("operations"), message: "is required")
        }
        operations = []
        for (index, value) in values.enumerated() {
            let operation = try WireObject(value, path: "\(object.path("operations"))[\(index)]")
            let typeName = try operation.requiredString("operationType")
            guard let type = OperationType(rawValue: typeName.lowercased()) else {
                throw WireFormatError(path: operation.path("operationType"), message: "expected create, update or delete, found \(typeName)")
            }
            guard let body = try operation.object("subscription") else {
                throw WireFormatError(path: operation.path("subscription"), message: "is required")
            }
            let subscription: Subscription
            if type == .delete {
                subscription = Subscription(subscriptionID: try body.requiredString("subscriptionID"), kind: .zone)
            } else {
                subscription = try Subscription(wire: body)
            }
            operations.append(Operation(operationType: type, subscription: subscription))
        }
    }
}

/// The body of `subscriptions/lookup`: `{subscriptions: [{subscriptionID}]}`.
public struct SubscriptionsLookupRequest: Sendable, Hashable {
    public var subscriptionIDs: [String]

    public init(wire object: WireObject) throws(WireFormatError) {
        guard let values = try object.array("subscriptions") else {
            throw WireFormatError(path: object.path("subscriptions"), message: "is required")
        }
        subscriptionIDs = []
        for (index, value) in values.enumerated() {
            subscriptionIDs.append(try WireObject(value, path: "\(object.path("subscriptions"))[\(index)]").requiredString("subscriptionID"))
        }
    }
}
