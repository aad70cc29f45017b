import CumulusStore
import Synchronization

/// Credentials verified against the store in the last few seconds, so that a request authenticates without a store
/// read: every database request carries an API token, and most a web auth token.
///
/// Only valid credentials are kept (a made-up token always costs its lookup, and cannot fill the cache). Revoking a
/// token or signing out through this instance takes effect at once; through another instance (or `cumulus tokens
/// revoke`), within the cache's lifetime.
final class CredentialCache: Sendable {
    private struct Entry {
        var apiToken: StoredAPIToken?
        var webAuthToken: (StoredWebAuthToken, UserAccount)?
        var expiresAt: Int64
    }

    private let entries = Mutex([[UInt8]: Entry]())
    /// How long a verified credential is trusted without looking again, in milliseconds; 0 turns the cache off.
    let lifetime: Int64
    /// Credentials kept at most; when full, expired ones are dropped, and if none are, everything.
    let capacity: Int

    init(lifetime: Duration, capacity: Int = 100_000) {
        self.lifetime = lifetime.components.seconds * 1000 + lifetime.components.attoseconds / 1_000_000_000_000_000
        self.capacity = capacity
    }

    func apiToken(hash: [UInt8], now: Int64) -> StoredAPIToken? {
        entries.withLock { entries in
            guard let entry = entries[hash], entry.expiresAt > now else { return nil }
            return entry.apiToken
        }
    }

    func webAuthToken(hash: [UInt8], now: Int64) -> (StoredWebAuthToken, UserAccount)? {
        entries.withLock { entries in
            guard let entry = entries[hash], entry.expiresAt > now else { return nil }
            return entry.webAuthToken
        }
    }

    func keep(apiToken: StoredAPIToken, hash: [UInt8], now: Int64) {
        keep(Entry(apiToken: apiToken, expiresAt: now + lifetime), hash: hash, now: now)
    }

    func keep(webAuthToken: (StoredWebAuthToken, UserAccount), hash: [UInt8], now: Int64) {
        keep(Entry(webAuthToken: webAuthToken, expiresAt: now + lifetime), hash: hash, now: now)
    }

    /// Forgets a credential at once: revoked, or signed out.
    func forget(hash: [UInt8]) {
        _ = entries.withLock { $0.removeValue(forKey: hash) }
    }

    private func keep(_ entry: Entry, hash: [UInt8], now: Int64) {
        guard lifetime > 0 else { return }
        entries.withLock { entries in
            if entries.count >= capacity, entries[hash] == nil {
                entries = entries.filter { $0.value.expiresAt > now }
                if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            }
            entries[hash] = entry
        }
    }
}
