public import CumulusModel
public import Foundation

/// A Cumulus container, shaped like CKContainer: where the server is, which container and environment, and who the user
/// is.
///
/// ```swift
/// let container = try await CloudContainer(serverURL: url, containerIdentifier: "iCloud.com.example.ghost", apiToken: key)
///     .signIn(name: "alice", password: password)
/// let drives = try await container.privateCloudDatabase.records(named: ["drive-1"], in: ZoneID(zoneName: "Drives"))
/// ```
public struct CloudContainer: Sendable {
    public var serverURL: URL
    public var containerIdentifier: String
    public var environment: ContainerEnvironment
    public var apiToken: String
    /// The user's web auth token; `nil` for anonymous use of the public database.
    public var webAuthToken: String?
    public var transport: any Transport
    /// This device, as the server records it (`X-Cumulus-Device`): the author device of its writes, and a row on the
    /// user's devices in the console, with when it was last seen and how far behind it is. A stable identifier of the
    /// app's installation; `nil` sends none (the server records `web`).
    public var deviceID: String?
    /// A name for people (`X-Cumulus-Device-Name`), such as "Alice's iPhone", shown beside the device in the console.
    public var deviceName: String?

    public init(
        serverURL: URL, containerIdentifier: String, environment: ContainerEnvironment = .development, apiToken: String, webAuthToken: String? = nil,
        transport: any Transport = URLSessionTransport(), deviceID: String? = nil, deviceName: String? = nil
    ) {
        self.serverURL = serverURL
        self.containerIdentifier = containerIdentifier
        self.environment = environment
        self.apiToken = apiToken
        self.webAuthToken = webAuthToken
        self.transport = transport
        self.deviceID = deviceID
        self.deviceName = deviceName
    }

    public var privateCloudDatabase: CloudDatabase { CloudDatabase(container: self, scope: .private) }
    public var sharedCloudDatabase: CloudDatabase { CloudDatabase(container: self, scope: .shared) }
    public var publicCloudDatabase: CloudDatabase { CloudDatabase(container: self, scope: .public) }

    public func database(with scope: DatabaseScope) -> CloudDatabase { CloudDatabase(container: self, scope: scope) }

    // MARK: - Signing in

    /// Signs in with a name and password; the returned container carries the user's token.
    public func signIn(name: String, password: String) async throws(CloudError) -> CloudContainer {
        try await authenticate("signin", name: name, password: password, email: nil)
    }

    /// Creates an account and signs in.
    public func signUp(name: String, password: String, email: String? = nil) async throws(CloudError) -> CloudContainer {
        try await authenticate("signup", name: name, password: password, email: email)
    }

    private func authenticate(_ action: String, name: String, password: String, email: String?) async throws(CloudError) -> CloudContainer {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("name")
        writer.string(name)
        writer.key("password")
        writer.string(password)
        if let email {
            writer.key("email")
            writer.string(email)
        }
        writer.endObject()
        let json = try await post(path: "auth/1/\(containerIdentifier)/\(environment.rawValue)/\(action)", body: writer.bytes, includeUser: false)
        guard let token = json["ckWebAuthToken"]?.stringValue else { throw CloudError(code: .invalidResponse, reason: "no ckWebAuthToken") }
        var signedIn = self
        signedIn.webAuthToken = token
        return signedIn
    }

    // MARK: - The signed-in user

    /// The signed-in user's record name (`users/caller`), or `nil` when no one is signed in (no token). A token the
    /// server no longer accepts (expired) throws `AUTHENTICATION_FAILED`: the app signs in again.
    public func userRecordName() async throws(CloudError) -> String? {
        guard webAuthToken != nil else { return nil }
        let json = try await post(path: "database/1/\(containerIdentifier)/\(environment.rawValue)/public/users/caller", body: Array("{}".utf8))
        guard let name = json["userRecordName"]?.stringValue else { throw CloudError(code: .invalidResponse, reason: "no userRecordName") }
        return name
    }

    // MARK: - The schema

    /// The container environment's schema (record types, fields, their types and indexes), to compare an app's model
    /// with before anything is sent (`ModelLinter.compare` in CumulusSyncGRDB).
    public func fetchSchema() async throws(CloudError) -> ContainerSchema {
        let request = TransportRequest(
            method: "GET", url: url(path: "schema/1/\(containerIdentifier)/\(environment.rawValue)", includeUser: true), headers: [:], body: Data())
        let body = try await send(request)
        do {
            return try SchemaLanguage.read(String(decoding: body, as: UTF8.self))
        } catch {
            throw CloudError(code: .invalidResponse, reason: "the schema cannot be read: \(error.description)")
        }
    }

    // MARK: - Requests

    func url(path: String, includeUser: Bool) -> URL {
        var components = URLComponents(url: serverURL.appendingPathComponent(path), resolvingAgainstBaseURL: false)!
        var items = [URLQueryItem(name: "ckAPIToken", value: apiToken)]
        if includeUser, let webAuthToken { items.append(URLQueryItem(name: "ckWebAuthToken", value: webAuthToken)) }
        components.queryItems = items
        return components.url!
    }

    /// POSTs JSON and returns the parsed answer, or throws the error envelope as ``CloudError``.
    func post(path: String, body: [UInt8], includeUser: Bool = true) async throws(CloudError) -> JSONValue {
        let answer = try await postForBytes(path: path, body: body, includeUser: includeUser)
        guard let json = try? JSONValue(parsing: answer) else { throw CloudError(code: .invalidResponse, reason: "HTTP 200 without a JSON body") }
        return json
    }

    /// POSTs JSON and returns the successful answer's bytes unparsed (for callers that scan them), or throws the error
    /// envelope as ``CloudError``.
    func postForBytes(path: String, body: [UInt8], includeUser: Bool = true) async throws(CloudError) -> [UInt8] {
        let request = TransportRequest(
            method: "POST", url: url(path: path, includeUser: includeUser), headers: ["Content-Type": "application/json"], body: Data(body)
        )
        return try await send(request)
    }

    /// Sends a request and returns the successful answer's body, or throws the error envelope as ``CloudError``.
    private func send(_ request: TransportRequest) async throws(CloudError) -> [UInt8] {
        var request = request
        if let deviceID { request.headers["X-Cumulus-Device"] = deviceID }
        if let deviceName { request.headers["X-Cumulus-Device-Name"] = deviceName }
        let response: TransportResponse
        do {
            response = try await transport.send(request)
        } catch {
            throw CloudError(code: .networkFailure, reason: "\(error)")
        }
        guard (200..<300).contains(response.status) else {
            throw CloudError.answer(response.body, status: response.status, retryAfterHeader: response.headers["retry-after"])
        }
        return Array(response.body)
    }
}
