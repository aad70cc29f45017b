public import CumulusModel
import CumulusStore
import Foundation
public import Logging

/// The outcome of one `subscriptions/modify` operation, in request order.
public enum SubscriptionModificationResult: Sendable, Hashable {
    case saved(Subscription)
    case deleted(subscriptionID: String)
    case failed(subscriptionID: String, code: ServerErrorCode, reason: String)
}

/// The outcome of one `subscriptions/lookup` entry.
public enum SubscriptionLookupResult: Sendable, Hashable {
    case found(Subscription)
    case notFound(subscriptionID: String)
}

/// `subscriptions/list`, `subscriptions/lookup` and `subscriptions/modify`: a signed-in user's subscriptions in one of
/// their databases. Push (``PushService``) reads them; this service only keeps them.
public struct SubscriptionService: Sendable, WriteHealthReporting {
    let store: any SubscriptionStore
    let policy: AuthorizationPolicy
    let limits: Limits
    let clock: WallClock
    /// Told of every saved subscription, so the user's push connections start watching it at once.
    let changes: ChangeSignal?
    let writeHealth: WriteHealth

    /// Subscriptions belong to a signed-in user and one of their databases.
    func subscriptionOwner(caller: Caller, scope: DatabaseScope, access: DatabaseAccess) throws(CumulusError) -> SubscriptionOwner {
        _ = try policy.database(for: caller, scope: scope, access: access)
        guard let user = caller.user else {
            throw CumulusError(.authenticationRequired, "subscriptions belong to a signed-in user: send ckWebAuthToken")
        }
        return SubscriptionOwner(container: caller.container, environment: caller.environment, scope: scope, userRecordName: user.userRecordName)
    }

    /// The stored subscriptions, read back; one that no longer reads (a newer or corrupt dictionary) is skipped.
    func decoded(_ stored: [StoredSubscription]) -> [Subscription] {
        stored.compactMap(\.subscription)
    }

    /// `subscriptions/list`.
    public func list(caller: Caller, scope: DatabaseScope, logger: Logger) async throws -> [Subscription] {
        let owner = try subscriptionOwner(caller: caller, scope: scope, access: .read)
        return decoded(try await mapStoreErrors { try await store.subscriptions(of: owner, ids: nil, logger: logger) })
    }

    /// `subscriptions/lookup`.
    public func lookup(caller: Caller, scope: DatabaseScope, request: SubscriptionsLookupRequest, logger: Logger) async throws
        -> [SubscriptionLookupResult]
    {
        let owner = try subscriptionOwner(caller: caller, scope: scope, access: .read)
        try limits.checkCount(request.subscriptionIDs.count, path: "subscriptions")
        let found = decoded(
            try await mapStoreErrors {
                try await store.subscriptions(of: owner, ids: request.subscriptionIDs, logger: logger)
            })
        let byID = Dictionary(found.map { ($0.subscriptionID, $0) }, uniquingKeysWith: { first, _ in first })
        return request.subscriptionIDs.map { id in byID[id].map(SubscriptionLookupResult.found) ?? .notFound(subscriptionID: id) }
    }

    /// `subscriptions/modify`. A `create` of an existing ID replaces it (as CloudKit's own save does, so a client that
    /// lost the answer can send it again); an `update` or `delete` of a missing one fails with `NOT_FOUND`.
    public func modify(caller: Caller, scope: DatabaseScope, request: SubscriptionsModifyRequest, logger: Logger) async throws
        -> [SubscriptionModificationResult]
    {
        let owner = try subscriptionOwner(caller: caller, scope: scope, access: .read)
        try limits.checkCount(request.operations.count, path: "operations")
        var operations = request.operations
        for index in operations.indices {
            let path = "operations[\(index)].subscription"
            if operations[index].operationType == .create, operations[index].subscription.subscriptionID.isEmpty {
                operations[index].subscription.subscriptionID = UUID.random().uuidString
            }
            try NameRules.checkRecordName(operations[index].subscription.subscriptionID, path: "\(path).subscriptionID", limits: limits)
            if operations[index].operationType != .delete {
                try check(operations[index].subscription, scope: scope, path: path)
            }
        }
        let existing = Set(
            try await mapStoreErrors { try await store.subscriptions(of: owner, ids: nil, logger: logger) }.map(
                \.subscriptionID))
        var live = existing
        var results: [SubscriptionModificationResult] = []
        var saving: [String: StoredSubscription] = [:]
        var deleting: [String] = []
        let now = clock.milliseconds()
        for operation in operations {
            let subscription = operation.subscription
            let id = subscription.subscriptionID
            switch operation.operationType {
            case .create, .update:
                if operation.operationType == .update, !live.contains(id) {
                    results.append(.failed(subscriptionID: id, code: .notFound, reason: "subscription \(id) does not exist"))
                    continue
                }
                if !live.contains(id), live.count >= limits.maximumSubscriptions {
                    results.append(
                        .failed(
                            subscriptionID: id, code: .quotaExceeded,
                            reason: "a user may have \(limits.maximumSubscriptions) subscriptions in the \(scope.rawValue) database"))
                    continue
                }
                var writer = JSONWriter()
                writer.subscription(subscription)
                saving[id] = StoredSubscription(subscriptionID: id, json: writer.bytes, createdAt: now)
                deleting.removeAll { $0 == id }
                live.insert(id)
                results.append(.saved(subscription))
            case .delete:
                guard live.contains(id) else {
                    results.append(.failed(subscriptionID: id, code: .notFound, reason: "subscription \(id) does not exist"))
                    continue
                }
                live.remove(id)
                saving[id] = nil
                if existing.contains(id) { deleting.append(id) }
                results.append(.deleted(subscriptionID: id))
            }
        }
        try await mapStoreErrors {
            try await store.modifySubscriptions(of: owner, saving: Array(saving.values), deleting: deleting, logger: logger)
        }
        // The user's push connections look now, so a new subscription starts from here rather than from whichever
        // later commit makes them look (every connection of the user watches their private database).
        if !saving.isEmpty {
            changes?.changed([
                ChangeSignal.key(
                    DatabaseRef(container: owner.container, environment: owner.environment, scope: .private, ownerRecordName: owner.userRecordName))
            ])
        }
        return results
    }

    /// What each kind of subscription needs, and where it may live.
    private func check(_ subscription: Subscription, scope: DatabaseScope, path: String) throws(CumulusError) {
        switch subscription.kind {
        case .zone:
            guard let zoneID = subscription.zoneID else { throw CumulusError(.badRequest, "\(path).zoneID: a zone subscription names its zone") }
            guard scope != .public else {
                throw CumulusError(.badRequest, "\(path).subscriptionType: zone subscriptions are not supported in the public database")
            }
            try NameRules.checkZoneName(zoneID.zoneName, path: "\(path).zoneID.zoneName", limits: limits)
            if scope == .shared, zoneID.ownerRecordName == nil {
                throw CumulusError(.badRequest, "\(path).zoneID.ownerRecordName: a zone of the shared database names its owner")
            }
        case .database:
            guard scope != .public else {
                throw CumulusError(.badRequest, "\(path).subscriptionType: database subscriptions are for the private and shared databases")
            }
        case .query:
            guard let query = subscription.query else { throw CumulusError(.badRequest, "\(path).query: is required") }
            try NameRules.checkIdentifier(query.recordType, kind: "record type", path: "\(path).query.recordType", limits: limits)
            guard query.filters.count <= limits.maximumQueryFilters else {
                throw CumulusError(.badRequest, "\(path).query.filterBy: at most \(limits.maximumQueryFilters) filters")
            }
            for (index, filter) in query.filters.enumerated() {
                if case .field(let name) = filter.field {
                    try NameRules.checkIdentifier(name, kind: "field name", path: "\(path).query.filterBy[\(index)].fieldName", limits: limits)
                }
            }
            if !subscription.zoneWide {
                guard let zoneID = subscription.zoneID else {
                    throw CumulusError(.badRequest, "\(path).zoneID: a query subscription that is not zoneWide names its zone")
                }
                try NameRules.checkZoneName(zoneID.zoneName, path: "\(path).zoneID.zoneName", limits: limits)
            }
        }
    }
}

extension StoredSubscription {
    /// The Subscription dictionary read back, or `nil` if it no longer reads (a newer or corrupt dictionary).
    var subscription: Subscription? {
        guard let value = try? JSONValue(parsing: json), let object = try? WireObject(value, path: "") else { return nil }
        return try? Subscription(wire: object)
    }
}
