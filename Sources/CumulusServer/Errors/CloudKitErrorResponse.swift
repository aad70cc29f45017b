import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOHTTP1

/// The CloudKit error envelope: `{uuid, serverErrorCode, reason, retryAfter?, redirectURL?}`.
struct CloudKitErrorResponse: HTTPResponseError {
    var code: ServerErrorCode
    var reason: String
    var retryAfter: Int?
    var redirectURL: String?
    var ckErrorCode: CKErrorCode?
    /// Set when the request itself was refused (an oversized or malformed body): the answer says `Connection: close`
    /// and ``LingeringCloseHandler`` closes the connection once the client has stopped sending.
    var closesConnection = false

    var status: HTTPResponse.Status { .init(code: code.httpStatus) }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        // The request's ID, also in the `X-Request-ID` header and the access log.
        let requestID = RequestIdentity.uuid(context)
        return Response(
            status: status, headers: headers(requestID: requestID), body: .init(byteBuffer: ByteBuffer(bytes: envelope(requestID: requestID))))
    }

    /// The envelope's JSON.
    func envelope(requestID: String) -> [UInt8] {
        ErrorResponse(
            uuid: requestID, serverErrorCode: code, reason: reason, retryAfter: retryAfter, redirectURL: redirectURL, ckErrorCode: ckErrorCode
        ).wireBytes
    }

    /// The answer's headers, but for its length.
    func headers(requestID: String) -> HTTPFields {
        var headers: HTTPFields = [.contentType: "application/json; charset=utf-8", RequestIdentity.header: requestID]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        if closesConnection { headers[.connection] = "close" }
        return headers
    }
}

extension CloudKitErrorResponse {
    /// A body the HTTP parser refused (a broken chunked encoding, say): the connection cannot be trusted after it.
    static func malformedMessage(_ error: HTTPParserError) -> CloudKitErrorResponse {
        CloudKitErrorResponse(code: .badRequest, reason: "body: malformed HTTP message (\(error))", closesConnection: true)
    }
}

extension CumulusError.Code {
    /// The CloudKit code a domain error is reported as.
    var serverErrorCode: ServerErrorCode {
        switch self {
        case .badRequest, .changeTokenExpired: .badRequest
        case .authenticationRequired: .authenticationRequired
        case .authenticationFailed: .authenticationFailed
        case .accessDenied: .accessDenied
        case .notFound: .notFound
        case .zoneNotFound: .zoneNotFound
        case .exists: .exists
        case .conflict: .conflict
        case .quotaExceeded: .quotaExceeded
        case .throttled: .throttled
        case .unavailable: .tryAgainLater
        default: .internalError
        }
    }

    /// The finer code sent beside it, where CloudKit's native API has one and Web Services none.
    var ckErrorCode: CKErrorCode? {
        self == .changeTokenExpired ? .changeTokenExpired : nil
    }
}

extension ItemError {
    /// A domain error as one item of an answer reports it.
    init(_ error: CumulusError) {
        self.init(code: error.code.serverErrorCode, reason: error.reason, ckErrorCode: error.code.ckErrorCode)
    }
}

/// Maps every error to the CloudKit envelope, once, at the edge. Unknown errors become `INTERNAL_ERROR` and are logged,
/// never described to the client.
struct CloudKitErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Base URL for the sign-in page named in `AUTHENTICATION_REQUIRED` answers; `nil` uses the request's host.
    let address: PublicAddress

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as CloudKitErrorResponse {
            throw error
        } catch let error as CumulusError {
            if error.code == .internalError || error.code == .unavailable {
                context.logger.error("request failed", metadata: ["error": "\(error.underlying.map { "\($0)" } ?? error.reason)"])
            }
            var redirectURL: String?
            if error.code == .authenticationRequired {
                redirectURL = signInURL(for: request)
            }
            throw CloudKitErrorResponse(
                code: error.code.serverErrorCode, reason: error.code == .internalError ? "internal error" : error.reason,
                retryAfter: error.retryAfter, redirectURL: redirectURL, ckErrorCode: error.code.ckErrorCode
            )
        } catch let error as StoreError where error.code == .unavailable {
            // A store failure no service mapped (signing in, say): the store is down or busy, and a retry may succeed.
            context.logger.error("request failed", metadata: ["error": "\(error)"])
            throw CloudKitErrorResponse(code: .tryAgainLater, reason: "the store is unavailable; retry", retryAfter: 1)
        } catch let error as StoreError where error.code == .storageFull {
            context.logger.error("request failed", metadata: ["error": "\(error)"])
            throw CloudKitErrorResponse(code: .tryAgainLater, reason: "the server's storage is full; retry later", retryAfter: 30)
        } catch let error as StoreError where error.code == .invalidValue {
            throw CloudKitErrorResponse(code: .badRequest, reason: error.message)
        } catch let error as WireFormatError {
            throw CloudKitErrorResponse(code: .badRequest, reason: error.description)
        } catch let error as HTTPParserError {
            throw CloudKitErrorResponse.malformedMessage(error)
        } catch let error as any HTTPResponseError {
            switch error.status.code {
            case 404: throw CloudKitErrorResponse(code: .notFound, reason: "no such endpoint: \(request.method) \(request.uri.path)")
            case 405: throw CloudKitErrorResponse(code: .badRequest, reason: "method \(request.method) not allowed on \(request.uri.path)")
            case 413:
                throw CloudKitErrorResponse(code: .quotaExceeded, reason: "request body is larger than the server accepts", closesConnection: true)
            case 400..<500: throw CloudKitErrorResponse(code: .badRequest, reason: "bad request")
            default:
                context.logger.error("request failed", metadata: ["error": "\(error)"])
                throw CloudKitErrorResponse(code: .internalError, reason: "internal error")
            }
        } catch {
            context.logger.error("request failed", metadata: ["error": "\(error)"])
            throw CloudKitErrorResponse(code: .internalError, reason: "internal error")
        }
    }

    private func signInURL(for request: Request) -> String {
        // /database/1/{container}/{environment}/… → /auth/1/{container}/{environment}/signin
        let base = address.base(for: request)
        let parts = request.uri.path.split(separator: "/")
        guard parts.count >= 4 else { return base }
        return "\(base)/auth/1/\(parts[2])/\(parts[3])/signin"
    }
}
