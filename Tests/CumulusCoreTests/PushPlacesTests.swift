import Testing

@testable import CumulusCore

/// How an instance shares its push places: whatever a crowd of accounts holds, a signed-in user who holds none gets a
/// place, and holders of near-equal size never take turns ending each other's connections.
@Suite("Push: fair places")
struct PushPlacesTests {
    /// 100 accounts with 100 tokens each, every token polling, on a pool of 1,000 (issue 54: they took every place of
    /// the 10,000, 100 a user). Each of 200 users who hold none then gets a place, each time from the biggest holder.
    @Test func aCrowdOfAccountsCannotKeepAUserWhoHoldsNoneOut() {
        let places = PushConnectionRegistry(maximum: 1_000, maximumAnonymous: 100)
        var served = 0
        var refused = 0
        for token in 0..<100 {
            for account in 0..<100 {
                if places.open("attacker-\(account)-\(token)", user: "_attacker\(account)") != nil { served += 1 } else { refused += 1 }
            }
        }
        #expect(served == 1_000 && refused == 9_000)
        #expect(places.holdings.values.max() == 10, "opened in turns, each account holds 10")

        for user in 0..<200 {
            let place = places.open("device-\(user)", user: "_user\(user)")
            #expect(place != nil, "user \(user) was kept out")
            #expect(place?.givenUp?.hasPrefix("attacker-") == true, "the place came from an attacker's connection")
        }
        // The attackers were given up evenly: each still holds 8, and none can take a place back from another.
        #expect(Set(places.holdings.filter { $0.key?.hasPrefix("_attacker") == true }.values) == [8])
        for account in 0..<100 {
            #expect(places.open("attacker-\(account)-again", user: "_attacker\(account)") == nil)
        }
        // Nor can a user take a second place from another who holds one.
        let crowd = PushConnectionRegistry(maximum: 3, maximumAnonymous: 1)
        for user in 0..<3 { #expect(crowd.open("t\(user)", user: "_u\(user)") != nil) }
        #expect(crowd.open("t0-second", user: "_u0") == nil)
        #expect(crowd.open("t3", user: "_u3") == nil, "as many users as places: full")
    }

    /// The tokens no user registered count as one holder, and go first when they are among the biggest; a given-up
    /// connection's place is the newcomer's at once, though it closes later, and the pool never grows past its size.
    @Test func anonymousTokensGoFirstAndAGivenUpPlaceIsNotCountedTwice() {
        let places = PushConnectionRegistry(maximum: 4, maximumAnonymous: 2)
        let first = places.open("anonymous-1", user: nil)
        let second = places.open("anonymous-2", user: nil)
        #expect(first != nil && second != nil)
        #expect(places.open("anonymous-3", user: nil) == nil, "the anonymous pool is full")
        #expect(places.open("alice-1", user: "_alice") != nil)
        #expect(places.open("bob-1", user: "_bob") != nil)
        // Full. A newcomer takes the newest anonymous connection, not Alice's or Bob's.
        let carol = places.open("carol-1", user: "_carol")
        #expect(carol?.givenUp == "anonymous-2")
        #expect(!places.isCurrent("anonymous-2", generation: second!.number))
        // Its place is Carol's: before it closes, no one else gets one by it.
        #expect(places.open("dave-1", user: "_dave") == nil)
        places.close("anonymous-2", generation: second!.number, anonymous: true)
        #expect(places.open("dave-1", user: "_dave") == nil, "still full: the place was Carol's")
        #expect(places.holdings == [nil: 1, "_alice": 1, "_bob": 1, "_carol": 1])
        // A token that reconnects replaces its own connection and holds one place as before.
        let again = places.open("alice-1", user: "_alice")
        #expect(again == nil, "full, and Alice holds as many as anyone")
    }
}
