import Crypto
public import CumulusModel
public import CumulusStore
public import Foundation
public import Logging

/// Containers, tokens, users and keys: what the `cumulus` administration commands and the sign-in endpoints do.
public struct AccountService: Sendable {
    let store: any ContainerStore & UserStore
    let passwordHasher: PasswordHasher
    let passwordHashing: PasswordHashingQueue
    let signInLimits: SignInLimits
    let credentials: CredentialCache
    let refusals = RefusedAttempts()
    /// How long a web auth token stays valid, in milliseconds.
    let webAuthTokenLifetime: Int64
    let clock: WallClock

    /// Creates the service.
    ///
    /// - Parameters:
    ///   - store: Where accounts live.
    ///   - passwordHasher: Password hashing parameters.
    ///   - passwordHashing: Where passwords are hashed: threads of their own, a few at a time.
    ///   - signInLimits: Throttles of sign-in and sign-up over HTTP.
    ///   - webAuthTokenLifetime: Lifetime of web auth tokens; 14 days by default, CloudKit's "keep me signed in".
    ///   - credentialCacheLifetime: How long a verified API token or web auth token is trusted without a store read;
    ///     revocation through another instance takes effect within it. Zero (the default) reads the store every time.
    ///   - clock: The current time.
    public init(
        store: any ContainerStore & UserStore, passwordHasher: PasswordHasher = .init(), passwordHashing: PasswordHashingQueue = .init(),
        signInLimits: SignInLimits = .init(), webAuthTokenLifetime: Duration = .seconds(14 * 24 * 3600),
        credentialCacheLifetime: Duration = .zero, clock: WallClock = .system
    ) {
        self.store = store
        self.passwordHasher = passwordHasher
        self.passwordHashing = passwordHashing
        self.signInLimits = signInLimits
        self.credentials = CredentialCache(lifetime: credentialCacheLifetime)
        self.webAuthTokenLifetime = webAuthTokenLifetime.components.seconds * 1000
        self.clock = clock
    }

    // MARK: - Containers and API tokens

    /// Creates a container, such as `iCloud.com.example.app`.
    public func createContainer(_ container: String, logger: Logger) async throws {
        try Self.checkContainerName(container)
        do {
            try await store.createContainer(container, createdAt: clock.milliseconds(), logger: logger)
        } catch let error as StoreError where error.code == .duplicate {
            throw CumulusError(.exists, "container \(container) already exists")
        }
    }

    /// Creates an API token for a container environment and returns it. Only its hash is stored.
    public func createAPIToken(container: String, environment: ContainerEnvironment, logger: Logger) async throws -> String {
        try await requireContainer(container, logger: logger)
        let token = TokenCodec.makeAPIToken()
        try await store.saveAPIToken(
            StoredAPIToken(tokenHash: TokenCodec.hash(token), container: container, environment: environment, createdAt: clock.milliseconds()),
            logger: logger
        )
        return token
    }

    /// Revokes an API token.
    public func revokeAPIToken(_ token: String, logger: Logger) async throws {
        credentials.forget(hash: TokenCodec.hash(token))
        do {
            try await store.revokeAPIToken(hash: TokenCodec.hash(token), logger: logger)
        } catch let error as StoreError where error.code == .notFound {
            throw CumulusError(.notFound, "no such API token")
        }
    }

    /// Checks that an API token was sent and opens this container environment, or throws `AUTHENTICATION_FAILED`.
    public func authenticate(apiToken: String?, container: String, environment: ContainerEnvironment, logger: Logger) async throws {
        guard let apiToken, !apiToken.isEmpty else { throw CumulusError(.authenticationFailed, "ckAPIToken is required") }
        let token = try await authenticate(apiToken: apiToken, logger: logger)
        guard token.container == container, token.environment == environment else {
            throw CumulusError(.authenticationFailed, "ckAPIToken is not valid for \(container) \(environment.rawValue)")
        }
    }

    /// The container environment an API token opens, or `AUTHENTICATION_FAILED`.
    public func authenticate(apiToken: String, logger: Logger) async throws -> StoredAPIToken {
        let hash = TokenCodec.hash(apiToken)
        let now = clock.milliseconds()
        if let record = credentials.apiToken(hash: hash, now: now) { return record }
        guard let record = try await store.apiToken(hash: hash, logger: logger), !record.revoked else {
            throw CumulusError(.authenticationFailed, "ckAPIToken is not valid")
        }
        credentials.keep(apiToken: record, hash: hash, now: now)
        return record
    }

    // MARK: - Users and web auth tokens

    /// Creates a user and returns it.
    public func createUser(container: String, name: String, password: String?, email: String?, logger: Logger) async throws -> UserAccount {
        try await requireContainer(container, logger: logger)
        let trimmed = name.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, trimmed.count <= 255 else { throw CumulusError(.badRequest, "name: must be 1 to 255 characters") }
        // Both stores hold the same names: PostgreSQL cannot hold U+0000, and no name needs a control character.
        if Self.holdsControlCharacter(trimmed) { throw CumulusError(.badRequest, "name: must not hold control characters") }
        if let email, Self.holdsControlCharacter(email) { throw CumulusError(.badRequest, "email: must not hold control characters") }
        if let password, password.count < 8 {
            throw CumulusError(.badRequest, "password: must be at least 8 characters")
        }
        if let email, !email.contains("@") {
            throw CumulusError(.badRequest, "email: is not an email address")
        }
        var passwordHash: String?
        if let password {
            let hasher = passwordHasher
            passwordHash = try await passwordHashing.run { try hasher.hash(password) }
        }
        let user = UserAccount(
            userRecordName: TokenCodec.makeUserRecordName(), container: container, name: trimmed, email: email,
            passwordHash: passwordHash, createdAt: clock.milliseconds()
        )
        do {
            try await store.createUser(user, logger: logger)
        } catch let error as StoreError where error.code == .duplicate {
            throw CumulusError(.exists, "a user named \(trimmed) (or with that email) already exists")
        }
        return user
    }

    /// Whether a text holds a control character (U+0000–U+001F, U+007F).
    static func holdsControlCharacter(_ text: String) -> Bool {
        text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }

    /// Issues a new web auth token for a user named in a container.
    public func issueWebAuthToken(container: String, name: String, logger: Logger) async throws -> String {
        guard let user = try await store.user(container: container, name: name, logger: logger) else {
            throw CumulusError(.notFound, "no user named \(name) in \(container)")
        }
        return try await issueWebAuthToken(for: user, logger: logger)
    }

    /// Issues a new web auth token for a user.
    public func issueWebAuthToken(for user: UserAccount, logger: Logger) async throws -> String {
        let token = TokenCodec.makeToken()
        let now = clock.milliseconds()
        try await store.saveWebAuthToken(
            StoredWebAuthToken(
                tokenHash: TokenCodec.hash(token), userRecordName: user.userRecordName, createdAt: now, expiresAt: now + webAuthTokenLifetime),
            logger: logger
        )
        return token
    }

    /// Creates a user with a password and signs them in.
    ///
    /// - Parameter address: The client's address, counted against ``SignInLimits/signUpsPerAddress``; `nil` counts nothing.
    public func signUp(
        container: String, name: String, password: String, email: String?, address: String? = nil, logger: Logger
    ) async throws -> (UserAccount, String) {
        if let address {
            try await throttle(
                [Attempt("signup-address:" + address, limit: signInLimits.signUpsPerAddress, window: signInLimits.signUpWindow, action: "sign-ups")],
                logger: logger)
        }
        let user = try await createUser(container: container, name: name, password: password, email: email, logger: logger)
        return (user, try await issueWebAuthToken(for: user, logger: logger))
    }

    /// Checks a name and password and issues a web auth token.
    ///
    /// A wrong password and an unknown name give the same answer, in the same time, under the same throttle, so sign-in
    /// does not reveal who has an account.
    ///
    /// - Parameter address: The client's address, counted against ``SignInLimits/attemptsPerAddress``; `nil` counts
    ///   only the name.
    public func signIn(container: String, name: String, password: String, address: String? = nil, logger: Logger) async throws -> (
        UserAccount, String
    ) {
        // No account's name holds a control character (``createUser`` refuses them): the answer is the unknown name's.
        if Self.holdsControlCharacter(name) { throw CumulusError(.authenticationFailed, "name or password is not correct") }
        let account = "\(container)\n\(name.trimmingCharacters(in: .whitespaces).lowercased())"
        // The name from this address first: a stranger's failures from their own address stop there, and do not count
        // against the name everywhere once they are refused.
        var attempts: [Attempt] = []
        if let address {
            attempts.append(
                Attempt(
                    "signin-account-address:" + account + "\n" + address, limit: signInLimits.attemptsPerAccountAndAddress,
                    window: signInLimits.accountAndAddressWindow, action: "sign-in attempts for this name from this address"))
        }
        attempts.append(
            Attempt(
                "signin-account:" + account, limit: signInLimits.attemptsPerAccount, window: signInLimits.accountWindow, action: "sign-in attempts"))
        if let address {
            attempts.append(
                Attempt(
                    "signin-address:" + address, limit: signInLimits.attemptsPerAddress, window: signInLimits.addressWindow,
                    action: "sign-in attempts"))
        }
        try await throttle(attempts, logger: logger)
        let user = try await store.user(container: container, name: name, logger: logger)
        // An unknown name costs the same key derivation as a wrong password, so sign-in time does not reveal names.
        let hasher = passwordHasher
        let stored = user?.passwordHash ?? hasher.decoy
        let matches = try await passwordHashing.run { hasher.verify(password, against: stored) }
        guard let user, user.passwordHash != nil, matches else {
            throw CumulusError(.authenticationFailed, "name or password is not correct")
        }
        return (user, try await issueWebAuthToken(for: user, logger: logger))
    }

    /// Ends a web auth token.
    public func signOut(webAuthToken: String, logger: Logger) async throws {
        credentials.forget(hash: TokenCodec.hash(webAuthToken))
        try await store.deleteWebAuthToken(hash: TokenCodec.hash(webAuthToken), logger: logger)
    }

    /// The user a web auth token identifies in a container, or `AUTHENTICATION_FAILED`.
    public func authenticate(webAuthToken: String, container: String, logger: Logger) async throws -> UserAccount {
        let hash = TokenCodec.hash(webAuthToken)
        let now = clock.milliseconds()
        var found = credentials.webAuthToken(hash: hash, now: now)
        if found == nil {
            found = try await store.webAuthToken(hash: hash, logger: logger)
            if let found { credentials.keep(webAuthToken: found, hash: hash, now: now) }
        }
        guard let (token, user) = found, user.container == container, token.expiresAt > now else {
            throw CumulusError(.authenticationFailed, "ckWebAuthToken is not valid or has expired")
        }
        return user
    }

    // MARK: - Server-to-server keys

    /// Registers an ECDSA P-256 public key (PEM) for a container environment and returns its key ID.
    public func addServerKey(container: String, environment: ContainerEnvironment, publicKeyPEM: String, logger: Logger) async throws -> String {
        try await requireContainer(container, logger: logger)
        let key: P256.Signing.PublicKey
        do {
            key = try P256.Signing.PublicKey(pemRepresentation: publicKeyPEM)
        } catch {
            throw CumulusError(.badRequest, "public key: not an ECDSA P-256 public key in PEM form (openssl ec -in eckey.pem -pubout)")
        }
        let keyID = TokenCodec.makeKeyID()
        try await store.saveServerKey(
            StoredServerKey(
                keyID: keyID, container: container, environment: environment, publicKeyPEM: key.pemRepresentation, createdAt: clock.milliseconds()),
            logger: logger
        )
        return keyID
    }

    /// A registered, unrevoked server-to-server key.
    public func serverKey(id: String, logger: Logger) async throws -> StoredServerKey? {
        guard let key = try await store.serverKey(id: id, logger: logger), !key.revoked else { return nil }
        return key
    }

    /// Records the use of a verified server-to-server signature (named by its key and its `r`), or throws
    /// `AUTHENTICATION_FAILED` if it was used before: an exact replay of a captured request.
    public func useServerToServerSignature(keyID: String, signatureR: [UInt8], validUntil: Date, logger: Logger) async throws {
        var hasher = SHA256()
        hasher.update(data: Array(keyID.utf8))
        hasher.update(data: [0])
        hasher.update(data: signatureR)
        let digest = Array(hasher.finalize())
        let expiresAt = Int64((validUntil.timeIntervalSince1970 * 1000).rounded(.up))
        guard try await store.useSignature(digest: digest, expiresAt: expiresAt, now: clock.milliseconds(), logger: logger) else {
            throw CumulusError(.authenticationFailed, "X-Apple-CloudKit-Request-SignatureV1: this signature was used before; sign each request anew")
        }
    }

    /// One count an attempt makes: a key, its limit per window, and what the refusal calls the attempts.
    struct Attempt {
        var key: String
        var limit: Int
        var window: Duration
        var action: String

        init(_ key: String, limit: Int, window: Duration, action: String) {
            self.key = key
            self.limit = limit
            self.window = window
            self.action = action
        }
    }

    /// Counts an attempt against each key in turn, in the current window of each, or throws `THROTTLED` with the seconds
    /// left in the window of the first key over its limit. A key this instance already saw over its limit refuses
    /// before anything is counted: a refused attempt writes nothing (``RefusedAttempts``).
    private func throttle(_ attempts: [Attempt], logger: Logger) async throws {
        let now = clock.milliseconds()
        func refusal(_ attempt: Attempt, windowEnd: Int64) -> CumulusError {
            let length = max(1, attempt.window.components.seconds * 1000)
            let retryAfter = Int((windowEnd - now + 999) / 1000)
            return CumulusError(
                .throttled, "too many \(attempt.action): at most \(attempt.limit) per \(length / 1000) s; retry in \(retryAfter) s",
                retryAfter: retryAfter)
        }
        for attempt in attempts {
            if let end = refusals.refused(attempt.key, now: now) { throw refusal(attempt, windowEnd: end) }
        }
        // Counts are forgotten once the longest window that could hold them has passed.
        let longest =
            [signInLimits.accountWindow, signInLimits.accountAndAddressWindow, signInLimits.addressWindow, signInLimits.signUpWindow].max()!
            .components.seconds * 1000
        for attempt in attempts {
            let length = max(1, attempt.window.components.seconds * 1000)
            let windowStart = now - now % length
            let counts = try await store.countAttempts(keys: [attempt.key], windowStart: windowStart, forgetBefore: now - longest, logger: logger)
            if let count = counts.first, count > attempt.limit {
                refusals.refuse(attempt.key, until: windowStart + length, now: now)
                throw refusal(attempt, windowEnd: windowStart + length)
            }
        }
    }

    // MARK: - Helpers

    func requireContainer(_ container: String, logger: Logger) async throws {
        guard try await store.containerExists(container, logger: logger) else {
            throw CumulusError(.notFound, "container \(container) does not exist; create it with `cumulus containers create \(container)`")
        }
    }

    /// Container identifiers: 1 to 255 characters of letters, digits, `.`, `-` and `_`.
    static func checkContainerName(_ container: String) throws(CumulusError) {
        let allowed = container.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "_")
        }
        guard !container.isEmpty, container.utf8.count <= 255, allowed else {
            throw CumulusError(.badRequest, "container: must be 1 to 255 letters, digits, '.', '-' or '_' (for example iCloud.com.example.app)")
        }
    }
}

/// The current wall-clock time, injectable so tests control it.
public struct WallClock: Sendable {
    private let now: @Sendable () -> Date

    /// A clock reading `now`.
    public init(now: @escaping @Sendable () -> Date) {
        self.now = now
    }

    /// The system clock.
    public static var system: WallClock { WallClock(now: { Date() }) }

    /// The current time.
    public func date() -> Date { now() }

    /// The current time in milliseconds since the epoch.
    public func milliseconds() -> Int64 { Int64((now().timeIntervalSince1970 * 1000).rounded()) }
}
