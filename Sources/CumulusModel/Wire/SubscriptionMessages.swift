/// One subscription of an answer: the subscription, its deletion, or its error.
public enum SubscriptionResult: Sendable, Hashable {
    case subscription(Subscription)
    case deleted(subscriptionID: String)
    case failed(subscriptionID: String, ItemError)

    init(wire object: WireObject) throws(WireFormatError) {
        if let error = try ItemError(wire: object) {
            self = .failed(subscriptionID: try object.string("subscriptionID") ?? "", error)
        } else if try object.bool("deleted") == true {
            self = .deleted(subscriptionID: try object.requiredString("subscriptionID"))
        } else {
            self = .subscription(try Subscription(wire: object))
        }
    }

    func write(to writer: inout JSONWriter) {
        switch self {
        case .subscription(let subscription):
            writer.subscription(subscription)
        case .deleted(let id):
            writer.beginObject()
            writer.key("subscriptionID")
            writer.string(id)
            writer.key("deleted")
            writer.bool(true)
            writer.endObject()
        case .failed(let id, let error):
            writer.beginObject()
            writer.key("subscriptionID")
            writer.string(id)
            error.write(to: &writer)
            writer.endObject()
        }
    }
}

/// The answer of `subscriptions/list`, `subscriptions/lookup` and `subscriptions/modify`.
public struct SubscriptionsResponse: WireMessage, Hashable {
    public var subscriptions: [SubscriptionResult]

    public init(subscriptions: [SubscriptionResult]) {
        self.subscriptions = subscriptions
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        subscriptions = try object.objects("subscriptions") { object throws(WireFormatError) in try SubscriptionResult(wire: object) }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("subscriptions", subscriptions) { writer, subscription in subscription.write(to: &writer) }
        writer.endObject()
    }
}

extension SubscriptionsModifyRequest: WireMessage {
    public init(operations: [Operation]) {
        self.operations = operations
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("operations", operations) { writer, operation in
            writer.beginObject()
            writer.key("operationType")
            writer.string(operation.operationType.rawValue)
            writer.key("subscription")
            if operation.operationType == .delete {
                writer.beginObject()
                writer.key("subscriptionID")
                writer.string(operation.subscription.subscriptionID)
                writer.endObject()
            } else {
                writer.subscription(operation.subscription)
            }
            writer.endObject()
        }
        writer.endObject()
    }
}

extension SubscriptionsModifyRequest.Operation {
    public init(_ operationType: SubscriptionsModifyRequest.OperationType, _ subscription: Subscription) {
        self.operationType = operationType
        self.subscription = subscription
    }
}

extension SubscriptionsLookupRequest: WireMessage {
    public init(subscriptionIDs: [String]) {
        self.subscriptionIDs = subscriptionIDs
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("subscriptions", subscriptionIDs) { writer, id in
            writer.beginObject()
            writer.key("subscriptionID")
            writer.string(id)
            writer.endObject()
        }
        writer.endObject()
    }
}
