import CumulusCore
import CumulusModel
import CumulusServer
import CumulusStore
import Foundation
import HTTPTypes
import Logging
import Synchronization
import Testing

/// What one holder of the app's API token could do at scale, and the limits that stop it (`docs/SECURITY.md`).
@Suite("Abuse resistance")
struct AbuseTests {
    // MARK: - Sign-in and sign-up

    @Test(arguments: TestStore.all)
    func signInIsThrottledPerAccountAndPerAddressAlikeForUnknownNames(_ store: TestStore) async throws {
        let time = LockedTime(Date(timeIntervalSince1970: 1_800_000_000))
        var prepared = try await TestWorld.make(store: store, clock: WallClock { time.now })
        prepared.configuration.signInLimits = SignInLimits(
            attemptsPerAccount: 3, accountWindow: .seconds(900), attemptsPerAddress: 8, addressWindow: .seconds(60), signUpsPerAddress: 2,
            signUpWindow: .seconds(3600))
        let world = prepared
        try await world.test { client in
            let base = "/auth/1/\(TestWorld.container)/development"
            func signIn(_ name: String, _ password: String) async throws -> CloudKitResponse {
                try await client.raw("\(base)/signin?ckAPIToken=\(world.apiToken)", body: #"{"name":"\#(name)","password":"\#(password)"}"#)
            }
            for _ in 0..<3 { #expect(try await signIn("alice", "guess").status == 401) }
            // The fourth attempt is refused before the password is looked at, even the right one.
            let throttled = try await signIn("alice", "password-alice")
            #expect(throttled.status == 429)
            #expect(throttled.serverErrorCode == "THROTTLED")
            let retryAfter = try #require(throttled.json["retryAfter"].flatMap { if case .number(let text) = $0 { Int(text) } else { nil } })
            #expect(retryAfter > 0 && retryAfter <= 900)
            #expect(throttled.headers[.retryAfter] == String(retryAfter))
            #expect(throttled.reason?.hasPrefix("too many sign-in attempts") == true)

            // An unknown name meets the same throttle at the same count: it tells nothing about who has an account.
            for _ in 0..<3 { #expect(try await signIn("nobody", "guess").status == 401) }
            let unknown = try await signIn("nobody", "guess")
            #expect(unknown.status == 429)
            #expect(unknown.reason == throttled.reason)

            // Another account is served, until this address has made its eight attempts in the minute.
            #expect(try await signIn("bob", "password-bob").status == 200)
            #expect(try await signIn("carol", "guess").status == 401)
            let address = try await signIn("dave", "guess")
            #expect(address.status == 429)
            #expect(address.reason?.contains("at most 8 per 60 s") == true)

            // When the windows end, Alice signs in.
            time.advance(by: 901)
            #expect(try await signIn("alice", "password-alice").status == 200)

            // Sign-ups from one address: two an hour here.
            for name in ["erin", "frank"] {
                #expect(
                    try await client.raw("\(base)/signup?ckAPIToken=\(world.apiToken)", body: #"{"name":"\#(name)","password":"correct horse"}"#)
                        .status == 201)
            }
            let third = try await client.raw("\(base)/signup?ckAPIToken=\(world.apiToken)", body: #"{"name":"gina","password":"correct horse"}"#)
            #expect(third.status == 429)
            #expect(third.serverErrorCode == "THROTTLED")
            #expect(try await world.store.user(container: TestWorld.container, name: "gina", logger: .init(label: "test")) == nil)
        }
    }

    @Test func passwordHashingRunsAFewAtATimeAndRefusesBeyondItsQueue() async throws {
        let queue = PasswordHashingQueue(maximumRunning: 2, maximumWaiting: 1)
        let hashes = BlockedHashes()
        let hash: @Sendable () throws -> Int = { hashes.hash() }
        let first = Task { try await queue.run(hash) }
        let second = Task { try await queue.run(hash) }
        while hashes.running < 2 { try await Task.sleep(for: .milliseconds(5)) }
        let third = Task { try await queue.run(hash) }
        // The third waits its turn; a fourth finds the queue full and is refused at once.
        while queue.waitingCount < 1 { try await Task.sleep(for: .milliseconds(5)) }
        let refused = await #expect(throws: CumulusError.self) { try await queue.run { 0 } }
        #expect(refused?.code == .throttled)
        #expect(refused?.retryAfter == 1)
        for _ in 0..<3 { hashes.gate.signal() }
        #expect(try await first.value + second.value + third.value == 3)
        #expect(hashes.most == 2)
    }
}

/// Hashes that wait at a gate, counting how many run at once.
final class BlockedHashes: Sendable {
    let gate = DispatchSemaphore(value: 0)
    private let counts = Mutex((now: 0, most: 0))

    var running: Int { counts.withLock { $0.now } }
    var most: Int { counts.withLock { $0.most } }

    func hash() -> Int {
        counts.withLock {
            $0.now += 1
            $0.most = max($0.most, $0.now)
        }
        gate.wait()
        counts.withLock { $0.now -= 1 }
        return 1
    }
}
