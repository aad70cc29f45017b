import CumulusModel
public import Logging

/// Users and their sessions: web auth tokens, console sign-in links and console sessions; discovery.
public protocol UserStore: Sendable {
    /// Creates a user. Throws ``StoreError/Code/duplicate`` if the name or email is taken in the container.
    func createUser(_ user: UserAccount, logger: Logger) async throws

    /// The user with this sign-in name (ignoring case) in a container.
    func user(container: String, name: String, logger: Logger) async throws -> UserAccount?

    /// The user with this user record name.
    func user(userRecordName: String, logger: Logger) async throws -> UserAccount?

    /// Stores a new web auth token.
    func saveWebAuthToken(_ token: StoredWebAuthToken, logger: Logger) async throws

    /// The web auth token with this hash and its user.
    func webAuthToken(hash: [UInt8], logger: Logger) async throws -> (StoredWebAuthToken, UserAccount)?

    /// Deletes a web auth token (signing out). Does nothing if there is none.
    func deleteWebAuthToken(hash: [UInt8], logger: Logger) async throws

    /// Live users of a container with these emails (ignoring case) or user record names.
    func users(container: String, emails: [String], userRecordNames: [String], logger: Logger) async throws -> [UserAccount]

    /// Sets whether a user can be found by `users/discover`.
    func setDiscoverable(userRecordName: String, _ discoverable: Bool, logger: Logger) async throws

    /// A container's users, by sign-in name.
    func listUsers(container: String, logger: Logger) async throws -> [UserAccount]

    /// Sets a user's email and password hash; with `signOut`, deletes the user's web auth tokens in the same
    /// transaction. Throws ``StoreError/Code/notFound`` for no such user, ``StoreError/Code/duplicate`` for an email
    /// another user of the container has.
    func updateUser(userRecordName: String, email: String?, passwordHash: String?, signOut: Bool, logger: Logger) async throws

    /// Saves a console credential, forgetting expired ones.
    func saveConsoleCredential(_ credential: ConsoleCredential, now: Int64, logger: Logger) async throws

    /// Deletes and answers a console credential of this kind that has not expired: a sign-in token works once.
    func takeConsoleCredential(hash: [UInt8], kind: ConsoleCredential.Kind, now: Int64, logger: Logger) async throws -> ConsoleCredential?

    /// A console credential that has not expired.
    func consoleCredential(hash: [UInt8], now: Int64, logger: Logger) async throws -> ConsoleCredential?

    /// Erases a user and what is theirs, in one transaction (GDPR article 17): their private zones go as a zone deletion
    /// goes (the participants' feeds report them deleted, with the shares they owned), they leave every share they were
    /// invited to (each share record takes a new change tag), the records they created in the public database are
    /// deleted, and their credentials, devices, subscriptions, push tokens, shared database, history, asset receipts
    /// and the sign-in attempt counts whose keys start with one of `attemptKeyPrefixes` go; `timestamp` stamps the deletions. Records they created or
    /// changed in other users' zones stay, by ``UserErasure/erasedUserRecordName``. Then, where the store can, its
    /// files are rewritten so the deleted bytes are gone. Throws ``StoreError/Code/notFound`` for no such user.
    func eraseUser(userRecordName: String, attemptKeyPrefixes: [String], timestamp: Int64, logger: Logger) async throws -> UserErasure
}
