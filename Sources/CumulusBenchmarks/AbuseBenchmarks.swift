import AsyncHTTPClient
import CumulusCore
import CumulusModel
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// What one holder of an app's API token can do to the server: the peak memory of the worst request bodies, each
/// measured in a fresh server process of its own.
extension Benchmarks {
    /// A body of `size` bytes made of `element` repeated inside `open` … `close`.
    static func repeatedBody(_ open: String, _ element: String, _ close: String, size: Int) -> [UInt8] {
        var body = Array(open.utf8)
        let element = Array(element.utf8)
        let budget = size - open.utf8.count - close.utf8.count
        body.reserveCapacity(size)
        while body.count + element.count + 1 <= budget {
            if body.count > open.utf8.count { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: element)
        }
        body.append(contentsOf: close.utf8)
        return body
    }

    static func hostileBodies() async throws {
        let size = Limits().maximumRequestBodySize - 1024
        let bodies: [(String, [UInt8])] = [
            ("`[{},{},…]`", repeatedBody("[", "{}", "]", size: size)),
            ("`[[],[],…]`", repeatedBody("[", "[]", "]", size: size)),
            ("`[0,0,…]`", repeatedBody("[", "0", "]", size: size)),
            ("`[{\"a\":{}},…]`", repeatedBody("[", #"{"a":{}}"#, "]", size: size)),
            ("`{\"k1\":0,\"k2\":0,…}` (distinct keys)", distinctKeysBody(size: size)),
            ("`[\"…16 MiB…\"]`", Array("[\"".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: size - 4) + Array("\"]".utf8)),
            ("`[[[[…` 64 deep, repeated", repeatedBody("[", String(repeating: "[", count: 62) + String(repeating: "]", count: 62), "]", size: size)),
        ]
        print()
        print("| body (16 MiB) to `public/records/query` | answer | server peak RSS before → after (MiB) | seconds |")
        print("|---|---|---:|---:|")
        for (name, body) in bodies {
            let (store, cleanUp, location) = try await BenchStore.sqlite.makeLocated()
            defer { cleanUp() }
            let logger = Logger(label: "bench")
            let accounts = AccountService(store: store)
            let container = "iCloud.com.example.bench"
            try await accounts.createContainer(container, logger: logger)
            let apiToken = try await accounts.createAPIToken(container: container, environment: .development, logger: logger)
            let server = try ServerProcess.start(store: location)
            defer { server.stop() }
            let before = server.peakResidentMiB
            var request = HTTPClientRequest(url: "\(server.url)/database/1/\(container)/development/public/records/query?ckAPIToken=\(apiToken)")
            request.method = .POST
            request.body = .bytes(ByteBuffer(bytes: body))
            let start = ContinuousClock.now
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(300))
            let answer = try await response.body.collect(upTo: 1 << 20)
            let seconds = (ContinuousClock.now - start).seconds
            let code = (try? JSONValue(parsing: Array(answer.readableBytesView)))?["serverErrorCode"]?.stringValue ?? ""
            print(
                "| \(name) | \(response.status.code) \(code) | \(Int(before)) → \(Int(server.peakResidentMiB)) | \(format(seconds)) |")
        }
    }

    /// An object of as many distinct keys as fit: each key costs the parser a dictionary entry.
    static func distinctKeysBody(size: Int) -> [UInt8] {
        var body = Array("{".utf8)
        body.reserveCapacity(size)
        var index = 0
        while body.count + 16 < size {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: "\"k\(index)\":0".utf8)
            index += 1
        }
        body.append(UInt8(ascii: "}"))
        return body
    }
}
