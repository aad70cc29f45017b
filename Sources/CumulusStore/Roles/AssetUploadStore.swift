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
    /// bytes, and the bytes of all the uploader's files.
    func assetUsage(uploader: String, container: String, pendingSince: Int64, logger: Logger) async throws -> AssetUsage

    /// Forgets receipts never attached and made before `unattachedBefore`, and attached receipts made before
    /// `detachedBefore` that no live record holds any more; answers the files no receipt names now, to delete.
    func collectAssetGarbage(unattachedBefore: Int64, detachedBefore: Int64, logger: Logger) async throws -> [String]
}
