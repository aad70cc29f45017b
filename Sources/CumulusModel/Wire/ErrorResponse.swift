/// CloudKit's error envelope, the body of every error answer: `{uuid, serverErrorCode, reason, retryAfter?,
/// redirectURL?}`, and the extension `ckErrorCode?` (``CKErrorCode``). The server writes it; the client reads it.
public struct ErrorResponse: WireMessage, Hashable {
    /// Identifies the request, in the server's log and its `X-Request-ID` header.
    public var uuid: String
    public var serverErrorCode: ServerErrorCode
    /// What was wrong, naming the field.
    public var reason: String
    /// Seconds to wait before retrying (`THROTTLED`, `TRY_AGAIN_LATER`).
    public var retryAfter: Int?
    /// Where to sign in (`AUTHENTICATION_REQUIRED` with a sign-in page).
    public var redirectURL: String?
    /// The finer code of a case Web Services has no code for (an extension).
    public var ckErrorCode: CKErrorCode?

    public init(
        uuid: String, serverErrorCode: ServerErrorCode, reason: String, retryAfter: Int? = nil, redirectURL: String? = nil,
        ckErrorCode: CKErrorCode? = nil
    ) {
        self.uuid = uuid
        self.serverErrorCode = serverErrorCode
        self.reason = reason
        self.retryAfter = retryAfter
        self.redirectURL = redirectURL
        self.ckErrorCode = ckErrorCode
    }

    /// Reads an envelope; a missing code, or one this version does not know, fails the read (see ``ItemError``).
    public init(wire object: WireObject) throws(WireFormatError) {
        let code = try object.requiredString("serverErrorCode")
        guard let known = ServerErrorCode(rawValue: code) else {
            throw WireFormatError(path: object.path("serverErrorCode"), message: "unknown code \(code)")
        }
        serverErrorCode = known
        uuid = try object.string("uuid") ?? ""
        reason = try object.string("reason") ?? code
        retryAfter = try object.int("retryAfter")
        redirectURL = try object.string("redirectURL")
        // A finer code this version does not know leaves the documented one to go by.
        ckErrorCode = try object.string("ckErrorCode").flatMap(CKErrorCode.init(rawValue:))
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("uuid")
        writer.string(uuid)
        writer.key("serverErrorCode")
        writer.string(serverErrorCode.rawValue)
        writer.key("reason")
        writer.string(reason)
        if let retryAfter {
            writer.key("retryAfter")
            writer.int(retryAfter)
        }
        if let redirectURL {
            writer.key("redirectURL")
            writer.string(redirectURL)
        }
        if let ckErrorCode {
            writer.key("ckErrorCode")
            writer.string(ckErrorCode.rawValue)
        }
        writer.endObject()
    }
}
