import CumulusCore
import CumulusModel
import Foundation
import HTTPTypes
import Hummingbird

/// Schema routes for tools, under `/schema/1/{container}/{environment}/`:
///
/// - `GET …/` answers the schema in CloudKit's schema language (`text/plain`), to any authenticated caller;
/// - `POST …/diff` answers what deploying the schema in the body would add and what it would change that a deploy
///   refuses;
/// - `POST …/deploy` applies it, or refuses it with `BAD_REQUEST` listing every offending change.
///
/// `diff` and `deploy` take a server-to-server key of the container environment: only the app's developer changes a
/// schema. The body is the schema text, or `{"schema": "…"}`.
struct SchemaRoutes {
    let database: DatabaseService
    let limits: Limits

    /// A schema file is small; this bounds what a tool may send.
    static let maximumSchemaSize = 1024 * 1024

    func register(on group: RouterGroup<AuthenticatedContext>) {
        group.get("", use: export)
        group.get("export", use: export)
        group.post("diff") { request, context in try await deploy(request, context: context, dryRun: true) }
        group.post("deploy") { request, context in try await deploy(request, context: context, dryRun: false) }
    }

    @Sendable func export(_ request: Request, context: AuthenticatedContext) async throws -> Response {
        let caller = context.caller
        let schema = try await database.schemas.schema(container: caller.container, environment: caller.environment, logger: context.logger)
        return Response(
            status: .ok, headers: [.contentType: "text/plain; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: SchemaLanguage.write(schema))))
    }

    func deploy(_ request: Request, context: AuthenticatedContext, dryRun: Bool) async throws -> Response {
        let caller = context.caller
        guard case .serverKey = caller.credential else {
            throw CumulusError(
                .accessDenied, "schema changes need a server-to-server key of container \(caller.container) (\(caller.environment.rawValue))")
        }
        let declared = try await Self.schema(from: request)
        let deployment = try await database.schemas.deploy(
            declared, container: caller.container, environment: caller.environment, dryRun: dryRun, logger: context.logger)
        if !dryRun, !deployment.deployed {
            throw CumulusError(
                .badRequest,
                "schema: a deploy may add record types, fields and indexes, never change or remove them: "
                    + deployment.diff.problems.joined(separator: "; "))
        }
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("additions")
        writer.beginArray()
        for line in deployment.diff.additions { writer.string(line) }
        writer.endArray()
        writer.key("problems")
        writer.beginArray()
        for line in deployment.diff.problems { writer.string(line) }
        writer.endArray()
        writer.key("deployed")
        writer.bool(deployment.deployed)
        writer.endObject()
        return .json(writer)
    }

    /// The schema text of a body: the text itself, or the `schema` member of a JSON object.
    static func schema(from request: Request) async throws -> ContainerSchema {
        let buffer = try await RequestBody.bytes(request, limit: maximumSchemaSize)
        var text = String(decoding: buffer.readableBytesView, as: UTF8.self)
        if text.drop(while: \.isWhitespace).first == "{" {
            guard case .object(let members)? = try? JSONValue(parsing: Array(buffer.readableBytesView)),
                case .string(let schema)? = members["schema"]
            else { throw CumulusError(.badRequest, "schema: a JSON body needs a \"schema\" string") }
            text = schema
        }
        do {
            return try SchemaLanguage.read(text)
        } catch {
            throw CumulusError(.badRequest, "schema: \(error.description)")
        }
    }
}
