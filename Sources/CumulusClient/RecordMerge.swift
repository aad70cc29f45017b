public import CumulusModel

/// A three-way merge of a record's fields: what this device changed since the last server version it saw (the common
/// ancestor) is kept, what the server changed is taken, and a field both changed is settled by a resolver.
///
/// Two devices editing different fields of one record offline both keep their edit; only a field both changed needs a
/// rule. Pure, so it is tested without a server.
///
/// ```swift
/// let outcome = RecordMerge.merge(ancestor: lastSeen, local: row.fields, server: serverRecord.fields) { _, _, _ in .server }
/// ```
public enum RecordMerge {
    /// Which side a field both devices changed keeps.
    public enum Side: Sendable, Hashable {
        case local
        case server
    }

    /// The merged fields, and which local changes lost to the server's.
    public struct Outcome: Sendable, Hashable {
        public var fields: [String: FieldValue]
        /// Fields this device changed whose value was discarded for the server's.
        public var discardedLocalFields: Set<String>
        /// Whether the merge differs from the server's version, so it must be sent.
        public var differsFromServer: Bool
    }

    /// Merges field by field.
    ///
    /// - Parameters:
    ///   - ancestor: The server version this device last saw; `nil` when unknown, so every differing field is a conflict.
    ///   - local: The device's current fields.
    ///   - server: The server's current fields.
    ///   - names: The fields to merge (those the device maps); others are the server's business and left out.
    ///   - resolve: Settles a field both sides changed: given its name, local and server values.
    public static func merge(
        ancestor: [String: FieldValue]?, local: [String: FieldValue], server: [String: FieldValue], names: Set<String>? = nil,
        resolve: (String, FieldValue?, FieldValue?) -> Side
    ) -> Outcome {
        merge(
            ancestorHolds: ancestor.map { ancestor in { field, value in ancestor[field] == value } }, local: local, server: server, names: names,
            resolve: resolve)
    }

    /// Merges field by field against an ancestor known only by equality (a device may keep digests of large values).
    ///
    /// - Parameter ancestorHolds: Whether the ancestor's value of a field is the given one; `nil` when the ancestor is
    ///   unknown. The other parameters are those of ``merge(ancestor:local:server:names:resolve:)``.
    public static func merge(
        ancestorHolds: ((String, FieldValue?) -> Bool)?, local: [String: FieldValue], server: [String: FieldValue], names: Set<String>? = nil,
        resolve: (String, FieldValue?, FieldValue?) -> Side
    ) -> Outcome {
        let keys = names ?? Set(local.keys).union(server.keys)
        var merged: [String: FieldValue] = [:]
        var discarded = Set<String>()
        var differs = false
        for key in keys.sorted() {
            let mine = local[key]
            let theirs = server[key]
            let value: FieldValue?
            if mine == theirs {
                value = theirs
            } else if let ancestorHolds, ancestorHolds(key, mine) {
                value = theirs
            } else if let ancestorHolds, ancestorHolds(key, theirs) {
                value = mine
            } else if resolve(key, mine, theirs) == .local {
                value = mine
            } else {
                value = theirs
                discarded.insert(key)
            }
            if let value { merged[key] = value }
            if value != theirs { differs = true }
        }
        return Outcome(fields: merged, discardedLocalFields: discarded, differsFromServer: differs)
    }
}
