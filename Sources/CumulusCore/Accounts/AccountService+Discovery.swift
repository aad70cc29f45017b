public import CumulusModel
public import CumulusStore
public import Logging

/// A user as discovery shows them: only public identity fields.
public struct DiscoveredUser: Sendable, Hashable {
    public var userRecordName: String
    public var name: String
    /// The email, only when the caller looked the user up by it.
    public var emailAddress: String?
}

extension AccountService {
    /// `users/discover`, `users/lookup/email` and `users/lookup/id`: users of the caller's container who chose to be
    /// discoverable. Everyone else is simply absent, so discovery cannot tell whether an account exists.
    ///
    /// A signed-in user may discover from any database's path. A server-to-server key, the app's own backend, finds
    /// the same users (they chose to be found by the app's users) at the public database's path, where keys act; at
    /// another it is refused with `ACCESS_DENIED`, which a key can act on, never with a sign-in redirect it cannot follow.
    public func discover(caller: Caller, scope: DatabaseScope, request: UserLookupRequest, logger: Logger) async throws -> [DiscoveredUser] {
        try checkMayDiscover(caller, scope: scope)
        var emails: [String] = []
        var names: [String] = []
        for key in request.keys {
            switch key {
            case .emailAddress(let email): emails.append(email)
            case .userRecordName(let name): names.append(name)
            case .phoneNumber: break  // Cumulus keeps no phone numbers.
            }
        }
        let found = try await store.users(container: caller.container, emails: emails, userRecordNames: names, logger: logger)
            .filter(\.discoverable)
        var results: [DiscoveredUser] = []
        for key in request.keys {
            switch key {
            case .emailAddress(let email):
                if let user = found.first(where: { $0.email?.lowercased() == email.lowercased() }) {
                    results.append(DiscoveredUser(userRecordName: user.userRecordName, name: user.name, emailAddress: user.email))
                }
            case .userRecordName(let name):
                if let user = found.first(where: { $0.userRecordName == name }) {
                    results.append(DiscoveredUser(userRecordName: user.userRecordName, name: user.name, emailAddress: nil))
                }
            case .phoneNumber:
                continue
            }
        }
        return results
    }

    /// Refuses a caller who may not discover users: nobody signed in, or a key outside the public database.
    public func checkMayDiscover(_ caller: Caller, scope: DatabaseScope) throws(CumulusError) {
        if case .serverKey = caller.credential, caller.user == nil {
            guard scope == .public else {
                throw CumulusError(
                    .accessDenied,
                    "server-to-server keys act on the public database only: discover users at /database/1/{container}/{environment}/public/users/…")
            }
            return
        }
        guard caller.user != nil else {
            throw CumulusError(.authenticationRequired, "request needs authorization: discovering users needs ckWebAuthToken")
        }
    }

    /// Sets whether the signed-in user can be discovered by others (off by default).
    public func setDiscoverable(_ user: UserAccount, _ discoverable: Bool, logger: Logger) async throws {
        try await store.setDiscoverable(userRecordName: user.userRecordName, discoverable, logger: logger)
    }

    /// Sets whether a user named in a container can be discovered.
    public func setDiscoverable(container: String, name: String, _ discoverable: Bool, logger: Logger) async throws {
        guard let user = try await store.user(container: container, name: name, logger: logger) else {
            throw CumulusError(.notFound, "no user named \(name) in \(container)")
        }
        try await setDiscoverable(user, discoverable, logger: logger)
    }
}
