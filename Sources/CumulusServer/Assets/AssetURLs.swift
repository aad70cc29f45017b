import Crypto
import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import Hummingbird
import Logging
import Synchronization

/// Signed, expiring URLs for one asset: the upload URL `assets/upload` answers, and the `downloadURL` a fetched record
/// carries (it works without credentials, as CloudKit's do). A URL names its purpose, container, environment, asset
/// and expiry; its signature is an HMAC of them under a key derived from the store's secret, so an altered or expired
/// URL is refused and every instance over one store accepts the others' URLs.
final class AssetURLs: Sendable {
    let database: DatabaseService
    let clock: WallClock
    let address: PublicAddress
    let limits: AssetLimits
    private let cachedKey = Mutex<SymmetricKey?>(nil)

    init(database: DatabaseService, clock: WallClock, address: PublicAddress, limits: AssetLimits) {
        self.database = database
        self.clock = clock
        self.address = address
        self.limits = limits
    }

    enum Purpose: String {
        case upload, download
    }

    func key(logger: Logger) async throws -> SymmetricKey {
        if let key = cachedKey.withLock({ $0 }) { return key }
        let secret = try await database.assets.serverSecret(logger: logger)
        let key = SymmetricKey(data: SHA256.hash(data: Data("cumulus asset links".utf8) + Data(secret)))
        cachedKey.withLock { $0 = key }
        return key
    }

    static func signature(_ key: SymmetricKey, _ purpose: Purpose, container: String, environment: ContainerEnvironment, id: String, expires: Int64)
        -> String
    {
        let message = "\(purpose.rawValue)\n\(container)\n\(environment.rawValue)\n\(id)\n\(expires)"
        return Data(HMAC<SHA256>.authenticationCode(for: Data(message.utf8), using: key)).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func url(
        base: String, key: SymmetricKey, _ purpose: Purpose, container: String, environment: ContainerEnvironment, id: String, expires: Int64
    ) -> String {
        let signature = signature(key, purpose, container: container, environment: environment, id: id, expires: expires)
        return "\(base)/assets/1/\(container)/\(environment.rawValue)/\(purpose.rawValue)/\(id)?expires=\(expires)&signature=\(signature)"
    }

    func uploadURL(_ upload: AssetUpload, request: Request, logger: Logger) async throws -> String {
        let expires = (clock.milliseconds() + Int64(limits.uploadURLLifetime.components.seconds) * 1000) / 1000
        return Self.url(
            base: address.base(for: request), key: try await key(logger: logger), .upload, container: upload.database.container,
            environment: upload.database.environment, id: upload.receipt, expires: expires)
    }

    /// Checks a URL's signature and expiry; throws `ACCESS_DENIED` for an altered or expired one.
    func verify(_ request: Request, _ purpose: Purpose, container: String, environment: ContainerEnvironment, id: String, logger: Logger)
        async throws
    {
        guard let expires = request.uri.queryParameters["expires"].flatMap({ Int64($0) }),
            let signature = request.uri.queryParameters["signature"].map(String.init)
        else { throw CumulusError(.accessDenied, "signature: this asset URL is not signed") }
        let expected = Self.signature(
            try await key(logger: logger), purpose, container: container, environment: environment, id: id, expires: expires)
        // Compared in constant time: a guess learns nothing from how long a refusal took.
        guard expected.utf8.count == signature.utf8.count, zip(expected.utf8, signature.utf8).reduce(0, { $0 | ($1.0 ^ $1.1) }) == 0 else {
            throw CumulusError(.accessDenied, "signature: this asset URL was altered")
        }
        guard expires * 1000 > clock.milliseconds() else {
            throw CumulusError(.accessDenied, "expires: this asset URL has expired; fetch the record again")
        }
    }

    /// Write options whose assets carry a download URL, when the records hold any: one store read for the page.
    func options(numbersAsStrings: Bool, records: [StoredRecord], request: Request, logger: Logger) async throws -> FieldWriteOptions {
        let holding = records.filter { JSONWriter.holdsAssets($0.fieldsJSON) }
        guard !holding.isEmpty else { return FieldWriteOptions(numbersAsStrings: numbersAsStrings) }
        var receipts: [String] = []
        for record in holding {
            for value in try record.fields().values { receipts += Self.receipts(in: value) }
        }
        let uploads = try await database.assets.uploads(receipts: receipts, logger: logger)
        var files: [String: (AssetUpload, String)] = [:]
        for upload in uploads { if let fileID = upload.fileID { files[upload.receipt] = (upload, fileID) } }
        let key = try await key(logger: logger)
        let base = address.base(for: request)
        let expires = (clock.milliseconds() + Int64(limits.downloadURLLifetime.components.seconds) * 1000) / 1000
        let links = files.mapValues { upload, fileID in
            Self.url(
                base: base, key: key, .download, container: upload.database.container, environment: upload.database.environment, id: fileID,
                expires: expires)
        }
        return FieldWriteOptions(numbersAsStrings: numbersAsStrings, assetDownloadURL: { links[$0] })
    }

    static func receipts(in value: FieldValue) -> [String] {
        switch value {
        case .asset(let asset): asset.receipt.map { [$0] } ?? []
        case .list(_, let values): values.flatMap(receipts(in:))
        default: []
        }
    }
}
