import CumulusClient
import CumulusModel
import CumulusSyncGRDB
import GhostCarExample

/// The tests' device is the example's, with retries that back off in milliseconds, so offline tests stay fast.
typealias Device = GhostCarDevice

extension GhostCarDevice {
    static func testing(
        path: String, database: CloudDatabase, scope: String = "private", zone: ZoneID = GhostCar.zone,
        onReport: (@Sendable (GRDBSyncAdapter.Report) -> Void)? = nil
    ) throws -> GhostCarDevice {
        try GhostCarDevice(path: path, database: database, scope: scope, zone: zone, configure: fastRetries, onReport: onReport)
    }

    /// An engine's configuration as the tests' devices have it.
    static func configuration(database: CloudDatabase, store: GRDBSyncStore, adapter: GRDBSyncAdapter) -> SyncEngine.Configuration {
        var configuration = SyncEngine.Configuration(database: database, stateStore: store, delegate: adapter)
        fastRetries(&configuration)
        return configuration
    }

    private static let fastRetries: @Sendable (inout SyncEngine.Configuration) -> Void = { configuration in
        configuration.retryPolicy = RetryPolicy(maximumAttempts: 3, initialDelay: .milliseconds(10))
        configuration.sleep = { try await Task.sleep(for: min($0, .milliseconds(50))) }
    }
}
