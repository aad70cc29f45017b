/// Throttles of sign-in and sign-up, counted in the store so they hold across restarts and across instances sharing
/// it. Over a limit, the answer is 429 `THROTTLED` with `retryAfter` (and `Retry-After`) until the window ends.
public struct SignInLimits: Sendable, Hashable {
    /// Sign-in attempts for one name in a container from all addresses together per ``accountWindow``, right or wrong,
    /// named or unknown (so the throttle tells nothing about which names exist): the most password guessing one name
    /// gets, from however many addresses.
    public var attemptsPerAccount: Int
    /// The window ``attemptsPerAccount`` counts in.
    public var accountWindow: Duration
    /// Sign-in attempts for one name from one address per ``accountAndAddressWindow``. A stranger who fails on purpose
    /// from one address locks the name out there only; locking the owner out everywhere takes ``attemptsPerAccount``
    /// attempts, from at least that many over this many addresses.
    public var attemptsPerAccountAndAddress: Int
    /// The window ``attemptsPerAccountAndAddress`` counts in.
    public var accountAndAddressWindow: Duration
    /// Sign-in attempts from one address per ``addressWindow``, whatever the names.
    public var attemptsPerAddress: Int
    /// The window ``attemptsPerAddress`` counts in.
    public var addressWindow: Duration
    /// Sign-ups from one address per ``signUpWindow``.
    public var signUpsPerAddress: Int
    /// The window ``signUpsPerAddress`` counts in.
    public var signUpWindow: Duration

    public init(
        attemptsPerAccount: Int = 50, accountWindow: Duration = .seconds(3600), attemptsPerAccountAndAddress: Int = 10,
        accountAndAddressWindow: Duration = .seconds(15 * 60), attemptsPerAddress: Int = 60, addressWindow: Duration = .seconds(60),
        signUpsPerAddress: Int = 20, signUpWindow: Duration = .seconds(3600)
    ) {
        self.attemptsPerAccount = attemptsPerAccount
        self.accountWindow = accountWindow
        self.attemptsPerAccountAndAddress = attemptsPerAccountAndAddress
        self.accountAndAddressWindow = accountAndAddressWindow
        self.attemptsPerAddress = attemptsPerAddress
        self.addressWindow = addressWindow
        self.signUpsPerAddress = signUpsPerAddress
        self.signUpWindow = signUpWindow
    }
}
