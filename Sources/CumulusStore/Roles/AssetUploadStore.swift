import CumulusModel
public import Logging

/// Asset receipts: what each was issued for, which file holds its bytes, and which records hold it.
public protocol AssetUploadStore: Sendable {
    /// Saves new asset receipts.
    func createAssetUploads(_ uploads: [AssetUpload], logger: Logger) async throws

    /// The receipts that exist among these.
    func assetUploads(receipts: [String], logger: Logger) async throws -> [AssetUpload]

    /// Records that a receipt's bytes were uploaded into a file. Answers `false` (changing nothing) when the receipt
    /// does not exist or has a file already.
    func completeAssetUpload(receipt: String, fileID: String, size: Int64, checksum: String, logger: Logger) async throws -> Bool

    /// What an uploader holds in a container's assets: receipts no record holds yet (made since `pendingSince`) and their
    /// bytes, and the bytes of the uploader's files (those only the history keeps are not counted).
    func assetUsage(uploader: String, container: String, pendingSince: Int64, logger: Logger) async throws -> AssetUsage

    /// Forgets receipts never attached and made before `unattachedBefore`, and attached receipts made before
    /// `detachedBefore` that no live record holds any more; answers the files no receipt names now, to delete.
    ///
    /// With `history` (the record history is on), a receipt no live record holds is kept for the history instead: it is
    /// marked detached at `history.now` (and leaves its uploader's quota), forgotten once detached before
    /// `history.keptSince`, and held again if a live record names it again (a restore brought its record back).
    func collectAssetGarbage(unattachedBefore: Int64, detachedBefore: Int64, history: AssetHistoryHold?, logger: Logger) async throws -> [String]
}

/// How long the record history keeps asset files no live record holds: see
/// ``AssetUploadStore/collectAssetGarbage(unattachedBefore:detachedBefore:history:logger:)``.
public struct AssetHistoryHold: Sendable, Hashable {
    /// Now, in milliseconds: when receipts found detached are marked so.
    public var now: Int64
    /// The history's horizon: receipts detached before it are forgotten.
    public var keptSince: Int64

    public init(now: Int64, keptSince: Int64) {
        self.now = now
        self.keptSince = keptSince
    }
}
