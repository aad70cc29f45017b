import Crypto
import Foundation

/// Verifies CloudKit server-to-server request signatures.
///
/// The signed message is `"<ISO 8601 date>:<base64(SHA-256(body))>:<subpath>"`, signed with ECDSA P-256 / SHA-256 and sent
/// base64 in `X-Apple-CloudKit-Request-SignatureV1`. Real clients differ, so the variants they use are accepted: the
/// subpath with or without the query string; for an empty body, the hash of "" or an empty string; a DER or a raw
/// 64-byte signature. The signature always covers the body: an empty hash for a body over 1 MiB (MistKit hashes at most
/// 1 MiB) is accepted only when the server is told to (`acceptsUnhashedLargeBodies`), because such a signature
/// authorizes any other large body sent to the same path.
struct ServerToServerSignature {
    var keyID: String
    var date: String
    var signature: String

    /// Checks the signature against a public key and answers the signature's `r`, which names it for the replay check
    /// (the same for its DER and raw forms and for its malleated twin `(r, n - s)`), or `nil` if it is not valid.
    func verify(publicKeyPEM: String, body: [UInt8], path: String, query: String?, acceptsUnhashedLargeBodies: Bool = false) -> [UInt8]? {
        guard let key = try? P256.Signing.PublicKey(pemRepresentation: publicKeyPEM),
            let signatureBytes = Data(base64Encoded: signature)
        else { return nil }
        var signatures: [P256.Signing.ECDSASignature] = []
        if let der = try? P256.Signing.ECDSASignature(derRepresentation: signatureBytes) { signatures.append(der) }
        if signatureBytes.count == 64, let raw = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes) { signatures.append(raw) }
        guard !signatures.isEmpty else { return nil }

        var bodyHashes = [Data(SHA256.hash(data: body)).base64EncodedString()]
        if body.isEmpty || (acceptsUnhashedLargeBodies && body.count > 1024 * 1024) { bodyHashes.append("") }
        var subpaths = [path]
        if let query, !query.isEmpty { subpaths.append(path + "?" + query) }

        for subpath in subpaths {
            for bodyHash in bodyHashes {
                let message = Data("\(date):\(bodyHash):\(subpath)".utf8)
                if let valid = signatures.first(where: { key.isValidSignature($0, for: message) }) {
                    return Array(valid.rawRepresentation.prefix(32))
                }
            }
        }
        return nil
    }

    /// Parses the request date, with or without fractional seconds.
    static func parseDate(_ string: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        if let date = formatter.date(from: string) { return date }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: string)
    }
}
