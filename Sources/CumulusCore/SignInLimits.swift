/// Throttles of sign-in and sign-up, counted in the store so they hold across restarts and across instances sharing
/// it. Over a limit, the answer is 429 `THROTTLED` with `retryAfter` (and `Retry-After`) until the window ends.
public struct SignInLimits: Sendable, Hashable {
    /// Sign-in attempts for one name in a container per ``accountWindow``, right or wrong, named or unknown (so the
    /// throttle tells nothing about which names exist). Password guessing gets this many tries per window.
    public var attemptsPerAccount: Int
    /// The window ``attemptsPerAccount`` counts in.
    public var accountWindow: Duration
    /// Sign-in attempts from one address per ``addressWindow``, whatever the names.
    public var attemptsPerAddress: Int
    /// The window ``attemptsPerAddress`` counts in.
    public var addressWindow: Duration
    /// Sign-ups from one address per ``signUpWindow``.
    public var signUpsPerAddress: Int
    /// The window ``signUpsPerAddress`` counts in.
    public var signUpWindow: Duration

    public init(
        attemptsPerAccount: Int = 10, accountWindow: Duration = .seconds(15 * 60), attemptsPerAddress: Int = 60,
        addressWindow: Duration = .seconds(60), signUpsPerAddress: Int = 20, signUpWindow: Duration = .seconds(3600)
    ) {
        self.attemptsPerAccount = attemptsPerAccount
        self.accountWindow = accountWindow
        self.attemptsPerAddress = attemptsPerAddress
        self.addressWindow = addressWindow
        self.signUpsPerAddress = signUpsPerAddress
        self.signUpWindow = signUpWindow
    }
}
