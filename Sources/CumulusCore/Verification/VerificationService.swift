public import CumulusModel
import CumulusStore
public import Logging

/// `devices/verification` (a Cumulus extension): what devices report of comparing their zones with the server's, kept
/// for the console and counted for `/metrics`.
public struct VerificationService: Sendable, WriteHealthReporting {
    let store: any DeviceStore
    let policy: AuthorizationPolicy
    let devices: DeviceTracker
    let clock: WallClock
    let writeHealth: WriteHealth

    /// The most zones one verification report may name.
    public static let maximumVerifiedZones = 10_000

    /// Keeps what a device reported of its last verification (`devices/verification`, a Cumulus extension): the
    /// totals of every zone it compared, and the names of the first zones that differed. The device is the caller's
    /// `X-Cumulus-Device`, of a signed-in user, in their private database.
    public func report(
        caller: Caller, scope: DatabaseScope, report: DeviceVerificationReport, logger: Logger
    ) async throws -> DeviceVerificationResponse {
        guard scope == .private else {
            throw CumulusError(.badRequest, "devices/verification is for the private database, where a device verifies its user's zones")
        }
        _ = try policy.database(for: caller, scope: scope, access: .read)
        guard let user = caller.user else { throw CumulusError(.authenticationRequired, "devices/verification needs a signed-in user") }
        guard let deviceID = caller.identifiedDevice else {
            throw CumulusError(.badRequest, "X-Cumulus-Device: a verification is a device's; name the device with this header")
        }
        guard report.zones.count <= Self.maximumVerifiedZones else {
            throw CumulusError(.badRequest, "zones: at most \(Self.maximumVerifiedZones) in one report")
        }
        // Each count is at most 2^31 - 1 (read so) and there are at most 10,000: the sums fit, and are kept as the stores'
        // 32-bit counts can hold them.
        func total(_ count: (DeviceVerificationReport.Zone) -> Int) -> Int {
            min(report.zones.reduce(0) { $0 + count($1) }, DeviceVerificationReport.maximumCount)
        }
        let verification = DeviceVerification(
            verifiedAt: clock.milliseconds(), zones: report.zones.count, missing: total(\.missing), extra: total(\.extra), stale: total(\.stale),
            zonesOutOfSync: report.zones.filter { !$0.isInSync }.map(\.zoneID.zoneName))
        try await mapStoreErrors(writing: true) {
            try await store.recordVerification(
                verification, container: caller.container, environment: caller.environment, userRecordName: user.userRecordName, deviceID: deviceID,
                logger: logger)
        }
        devices.verified(inSync: verification.isInSync)
        if !verification.isInSync {
            logger.notice(
                "a device reported it is out of sync",
                metadata: [
                    "cumulus.user": "\(user.userRecordName)", "cumulus.device": "\(deviceID)", "cumulus.verify.missing": "\(verification.missing)",
                    "cumulus.verify.extra": "\(verification.extra)", "cumulus.verify.stale": "\(verification.stale)",
                ])
        }
        return DeviceVerificationResponse(inSync: verification.isInSync, verifiedAt: verification.verifiedAt)
    }
}
