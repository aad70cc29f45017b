public import Logging

/// Whether the store can write now, for `cumulus doctor` and for `/health` while writes fail.
public protocol StoreHealth: Sendable {
    /// Commits a write of the one row kept for the purpose (`store_probe`): it throws as a request's write would when
    /// the store cannot write (a read-only file or database, a full disk, a lost server).
    func probeWrite(at time: Int64, logger: Logger) async throws
}
