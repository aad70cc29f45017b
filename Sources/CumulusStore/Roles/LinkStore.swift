public import CumulusModel
public import Logging

/// Share-a-copy snapshots and their upload quotas.
public protocol LinkStore: Sendable {
    /// A container environment's link snapshots that have not expired, newest first, at most `limit`.
    func listLinkSnapshots(container: String, environment: ContainerEnvironment, now: Int64, limit: Int, logger: Logger) async throws
        -> [LinkSnapshot]

    /// Counts an upload against the quota and, if it fits, stores its snapshots, in one transaction.
    func createLinkSnapshots(_ snapshots: [LinkSnapshot], uploader: LinkUploader, quota: LinkQuota, now: Int64, logger: Logger) async throws
        -> LinkQuotaDecision

    /// The snapshot behind a link, unless it has expired.
    func linkSnapshot(id: String, now: Int64, logger: Logger) async throws -> LinkSnapshot?

    /// Deletes expired snapshots for good, and upload counts older than a day; returns how many snapshots went.
    func deleteExpiredLinkSnapshots(now: Int64, logger: Logger) async throws -> Int
}
