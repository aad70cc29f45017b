public import CumulusModel

/// Identifies one database: a container's environment, a scope, and the owner whose database it is.
///
/// Every user has their own private database; the public database has the single owner ``ZoneID/publicOwnerName``.
public struct DatabaseRef: Sendable, Hashable, CustomStringConvertible {
    public var container: String
    public var environment: ContainerEnvironment
    public var scope: DatabaseScope
    public var ownerRecordName: String

    public init(container: String, environment: ContainerEnvironment, scope: DatabaseScope, ownerRecordName: String) {
        self.container = container
        self.environment = environment
        self.scope = scope
        self.ownerRecordName = ownerRecordName
    }

    /// The public database of a container environment.
    public static func publicDatabase(container: String, environment: ContainerEnvironment) -> DatabaseRef {
        DatabaseRef(container: container, environment: environment, scope: .public, ownerRecordName: ZoneID.publicOwnerName)
    }

    /// The zone ID of a zone of this database, as written on the wire.
    public func zoneID(_ zoneName: String) -> ZoneID {
        ZoneID(zoneName: zoneName, ownerRecordName: ownerRecordName)
    }

    public var description: String { "\(container)/\(environment.rawValue)/\(scope.rawValue)/\(ownerRecordName)" }
}

extension DatabaseRef {
    /// The key a commit to this database is announced under, between instances and to push connections.
    public var changeKey: String { "db|\(container)|\(environment.rawValue)|\(scope.rawValue)|\(ownerRecordName)" }

    /// The database a ``changeKey`` names; `nil` for a key that names none.
    public init?(changeKey: String) {
        let parts = changeKey.split(separator: "|", omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0] == "db", let environment = ContainerEnvironment(rawValue: String(parts[2])),
            let scope = DatabaseScope(rawValue: String(parts[3]))
        else { return nil }
        self.init(container: String(parts[1]), environment: environment, scope: scope, ownerRecordName: String(parts[4]))
    }
}
