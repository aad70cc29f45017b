import CumulusModel
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CumulusServer

/// `/openapi.json` describes every route the server has, and nothing else.
@Suite("OpenAPI description", .timeLimit(.minutes(10)))
struct OpenAPITests {
    /// The router's routes, as OpenAPI writes them: `GET /database/1/{container}/…`.
    static func routes(of router: Router<CumulusRequestContext>) -> Set<String> {
        Set(
            router.routes.map { route in
                let path = route.path.description.hasPrefix("/") ? route.path.description : "/" + route.path.description
                return "\(route.method.rawValue) \(path)"
            })
    }

    @Test func everyRouteIsDescribedAndEveryDescriptionHasARoute() async throws {
        let world = try await TestWorld.make()
        let router = buildRouter(configuration: world.configuration, store: world.store)
        let document = try JSONValue(parsing: OpenAPIDocument.json)
        var described: Set<String> = []
        for (path, item) in document["paths"]?.objectValue ?? [:] {
            for method in (item.objectValue ?? [:]).keys { described.insert("\(method.uppercased()) \(path)") }
        }
        let routes = Self.routes(of: router)
        #expect(routes.count > 40)
        #expect(routes.subtracting(described).isEmpty, "routes without a description: \(routes.subtracting(described).sorted())")
        #expect(described.subtracting(routes).isEmpty, "descriptions without a route: \(described.subtracting(routes).sorted())")
    }

    @Test func theDocumentIsServedAndItsReferencesResolve() async throws {
        let world = try await TestWorld.make()
        try await world.test { client in
            let response = try await client.client.execute(uri: "/openapi.json", method: .get)
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "application/json; charset=utf-8")
            let document = try JSONValue(parsing: Array(response.body.readableBytesView))
            #expect(document["openapi"] == "3.1.0")
            #expect(document["info"]?["version"]?.stringValue == CumulusVersion.current)
            // Every $ref names a schema that exists; every operation has a unique ID and an error answer.
            let schemas = document["components"]?["schemas"]?.objectValue ?? [:]
            var references: [String] = []
            func collect(_ value: JSONValue) {
                switch value {
                case .object(let members):
                    if let reference = members["$ref"]?.stringValue { references.append(reference) }
                    members.values.forEach(collect)
                case .array(let elements): elements.forEach(collect)
                default: break
                }
            }
            collect(document)
            #expect(!references.isEmpty)
            for reference in references {
                #expect(schemas[String(reference.dropFirst("#/components/schemas/".count))] != nil, "\(reference) does not resolve")
            }
            var operationIDs: [String] = []
            for item in (document["paths"]?.objectValue ?? [:]).values {
                for operation in (item.objectValue ?? [:]).values {
                    operationIDs.append(operation["operationId"]?.stringValue ?? "")
                    #expect(operation["responses"]?["default"] != nil)
                }
            }
            #expect(Set(operationIDs).count == operationIDs.count, "operation IDs repeat")
        }
    }
}
