import CumulusModel
import Foundation

/// An asset upload: what `assets/upload` issued a receipt for, and, once the bytes came, the file that holds them.
///
/// A receipt is bound to who asked for it and where it may be saved: a database, a zone, a record and a field (or, made
/// by `assets/rereference`, any record and field of that database). `records/modify` accepts an `ASSETID` value only
/// with a receipt bound so.
public struct AssetUpload: Sendable, Hashable {
    public var receipt: String
    public var database: DatabaseRef
    public var zoneName: String
    /// `nil` for a receipt `assets/rereference` made: any record of the database.
    public var recordName: String?
    public var fieldName: String?
    /// The author name of who asked for it (a user's record name, or a server key's).
    public var uploader: String
    /// The file holding the bytes, once uploaded.
    public var fileID: String?
    public var size: Int64?
    /// The SHA-256 of the bytes, base64 (the dictionary's `fileChecksum`).
    public var checksum: String?
    public var createdAt: Int64
    /// Whether a saved record holds it.
    public var attached: Bool

    public init(
        receipt: String, database: DatabaseRef, zoneName: String, recordName: String?, fieldName: String?, uploader: String,
        fileID: String? = nil, size: Int64? = nil, checksum: String? = nil, createdAt: Int64, attached: Bool = false
    ) {
        self.receipt = receipt
        self.database = database
        self.zoneName = zoneName
        self.recordName = recordName
        self.fieldName = fieldName
        self.uploader = uploader
        self.fileID = fileID
        self.size = size
        self.checksum = checksum
        self.createdAt = createdAt
        self.attached = attached
    }
}

/// What one uploader holds in a container's assets.
public struct AssetUsage: Sendable, Hashable {
    /// Receipts no record holds yet, made within the window asked about.
    public var pendingReceipts: Int
    /// The bytes uploaded into those.
    public var pendingBytes: Int64
    /// The bytes of every file the uploader's receipts name, saved or not (a file counted once).
    public var storedBytes: Int64

    public init(pendingReceipts: Int, pendingBytes: Int64, storedBytes: Int64) {
        self.pendingReceipts = pendingReceipts
        self.pendingBytes = pendingBytes
        self.storedBytes = storedBytes
    }
}

/// A receipt saved in a record's field.
public struct AssetAttachment: Sendable, Hashable {
    public var receipt: String
    public var zoneName: String
    public var recordName: String
    public var fieldName: String

    public init(receipt: String, zoneName: String, recordName: String, fieldName: String) {
        self.receipt = receipt
        self.zoneName = zoneName
        self.recordName = recordName
        self.fieldName = fieldName
    }
}
