public import CumulusStore
public import Logging

/// What the `cumulus` command line lists and changes: containers, API tokens, users and server-to-server keys.
extension AccountService {
    /// Every container.
    public func listContainers(logger: Logger) async throws -> [StoredContainer] {
        try await store.listContainers(logger: logger)
    }

    /// A container's API tokens, revoked ones included. Only their hashes are stored: a token is shown by its
    /// ``tokenFingerprint(_:)``.
    public func listAPITokens(container: String, logger: Logger) async throws -> [StoredAPIToken] {
        try await requireContainer(container, logger: logger)
        return try await store.listAPITokens(container: container, logger: logger)
    }

    /// How `cumulus tokens list` names a token whose value is not kept: the first 12 hex digits of its SHA-256.
    public static func tokenFingerprint(_ token: StoredAPIToken) -> String {
        token.tokenHash.prefix(6).map { byte in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined()
    }

    /// Revokes a container's API token, named by its value or by its fingerprint (for a token whose value is lost).
    public func revokeAPIToken(container: String, tokenOrFingerprint: String, logger: Logger) async throws {
        let tokens = try await listAPITokens(container: container, logger: logger)
        let hash = TokenCodec.hash(tokenOrFingerprint)
        if tokens.contains(where: { $0.tokenHash == hash }) {
            try await revokeAPIToken(tokenOrFingerprint, logger: logger)
            return
        }
        let named = tokens.filter { Self.tokenFingerprint($0) == tokenOrFingerprint.lowercased() }
        guard named.count == 1, let token = named.first else {
            throw CumulusError(.notFound, "no API token of \(container) is \(tokenOrFingerprint) or has that fingerprint")
        }
        credentials.forget(hash: token.tokenHash)
        try await store.revokeAPIToken(hash: token.tokenHash, logger: logger)
    }

    /// A container's users, by sign-in name.
    public func listUsers(container: String, logger: Logger) async throws -> [UserAccount] {
        try await requireContainer(container, logger: logger)
        return try await store.listUsers(container: container, logger: logger)
    }

    /// Sets a user's password and signs the user out everywhere (their web auth tokens are deleted; another server's
    /// cached copy lasts at most ``ServerConfiguration`` `credentialCacheLifetime`).
    public func setPassword(container: String, name: String, password: String, logger: Logger) async throws {
        guard password.count >= 8 else { throw CumulusError(.badRequest, "password: must be at least 8 characters") }
        let user = try await requireUser(container: container, name: name, logger: logger)
        let hasher = passwordHasher
        let hash = try await passwordHashing.run { try hasher.hash(password) }
        try await store.updateUser(userRecordName: user.userRecordName, email: user.email, passwordHash: hash, signOut: true, logger: logger)
    }

    /// Sets a user's email; `nil` removes it.
    public func setEmail(container: String, name: String, email: String?, logger: Logger) async throws {
        if let email, !email.contains("@") { throw CumulusError(.badRequest, "email: is not an email address") }
        let user = try await requireUser(container: container, name: name, logger: logger)
        do {
            try await store.updateUser(
                userRecordName: user.userRecordName, email: email, passwordHash: user.passwordHash, signOut: false, logger: logger)
        } catch let error as StoreError where error.code == .duplicate {
            throw CumulusError(.exists, "another user of \(container) has the email \(email ?? "")")
        }
    }

    /// A container's server-to-server keys, revoked ones included.
    public func listServerKeys(container: String, logger: Logger) async throws -> [StoredServerKey] {
        try await requireContainer(container, logger: logger)
        return try await store.listServerKeys(container: container, logger: logger)
    }

    /// Revokes one of a container's server-to-server keys: requests it signs are refused from then on.
    public func revokeServerKey(container: String, keyID: String, logger: Logger) async throws {
        guard let key = try await store.serverKey(id: keyID, logger: logger), key.container == container else {
            throw CumulusError(.notFound, "no key \(keyID) in \(container)")
        }
        try await store.revokeServerKey(id: keyID, logger: logger)
    }

    /// Deletes a container and everything in it. Servers that cached one of its credentials stop accepting it within
    /// ``ServerConfiguration`` `credentialCacheLifetime`.
    public func deleteContainer(_ container: String, logger: Logger) async throws {
        do {
            try await store.deleteContainer(container, logger: logger)
        } catch let error as StoreError where error.code == .notFound {
            throw CumulusError(.notFound, "container \(container) does not exist")
        }
    }

    /// Erases a user and everything they own (GDPR article 17; `docs/OPERATIONS.md`, "Erase a user"): their private
    /// zones (participants' devices drop them, the shares they owned end), their place in other users' shares, the
    /// records they created in the public database, their credentials, devices, subscriptions, push tokens, history,
    /// sign-in attempt counts and asset files (deleted from `assets` after the store's transaction). Records they
    /// wrote in other users' zones stay, by ``UserErasure/erasedUserRecordName``. Answers the receipt.
    public func eraseUser(container: String, name: String, assets: (any AssetStorage)?, logger: Logger) async throws -> UserErasure {
        let user = try await requireUser(container: container, name: name, logger: logger)
        let account = "\(container)\n\(user.name.lowercased())"
        let erasure = try await store.eraseUser(
            userRecordName: user.userRecordName, attemptKeyPrefixes: ["signin-account:" + account, "signin-account-address:" + account + "\n"],
            timestamp: clock.milliseconds(), logger: logger)
        // The receipts are gone first: a file is never deleted while a receipt still names it.
        try await assets?.delete(fileIDs: erasure.assetFiles)
        logger.notice(
            "erased a user",
            metadata: [
                "cumulus.container": "\(container)", "cumulus.user": "\(user.userRecordName)", "cumulus.erase.zones": "\(erasure.zones)",
                "cumulus.erase.records": "\(erasure.records)", "cumulus.erase.public_records": "\(erasure.publicRecords)",
                "cumulus.erase.asset_files": "\(erasure.assetFiles.count)",
            ])
        return erasure
    }

    private func requireUser(container: String, name: String, logger: Logger) async throws -> UserAccount {
        guard let user = try await store.user(container: container, name: name, logger: logger) else {
            throw CumulusError(.notFound, "no user named \(name) in \(container)")
        }
        return user
    }
}
