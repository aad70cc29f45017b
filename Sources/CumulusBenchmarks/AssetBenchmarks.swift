import AsyncHTTPClient
import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Assets over loopback against a server process of its own: upload and download MB/s beside a raw copy of the same
/// file on the same disk, and the server's peak resident memory while a 1 GiB upload streams through it.
extension Benchmarks {
    static func assets(on kind: BenchStore, megabytes: Int, largeMegabytes: Int) async throws {
        let (store, cleanUp, location) = try await kind.makeLocated()
        defer { cleanUp() }
        let (container, apiToken, webToken) = try await benchAccount(store)

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-asset-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        func makeFile(_ name: String, megabytes: Int) throws -> URL {
            let url = directory.appendingPathComponent(name)
            _ = FileManager.default.createFile(atPath: url.path, contents: nil)
            let handle = try FileHandle(forWritingTo: url)
            defer { try? handle.close() }
            var generator = SystemRandomNumberGenerator()
            let block = (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            for _ in 0..<megabytes { try handle.write(contentsOf: block) }
            return url
        }
        let file = try makeFile("asset.bin", megabytes: megabytes)
        let bytes = Double(megabytes) * 1024 * 1024

        // The baseline: the same bytes copied on the same disk.
        let copyStart = ContinuousClock.now
        try FileManager.default.copyItem(at: file, to: directory.appendingPathComponent("copy.bin"))
        let copySeconds = (ContinuousClock.now - copyStart).seconds
        try FileManager.default.removeItem(at: directory.appendingPathComponent("copy.bin"))

        let server = try ServerProcess.start(store: location)
        defer { server.stop() }
        let http = HTTPClient.shared
        let base = "\(server.url)/database/1/\(container)/development/private"
        let credentials = "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)"
        func post(_ path: String, _ body: String) async throws -> JSONValue {
            var request = HTTPClientRequest(url: "\(base)/\(path)?\(credentials)")
            request.method = .POST
            request.body = .bytes(ByteBuffer(string: body))
            let response = try await http.execute(request, timeout: .seconds(120))
            let body = try await response.body.collect(upTo: 1 << 20)
            guard response.status == .ok else { throw BenchmarkError("\(path): \(response.status) \(String(buffer: body))") }
            return try JSONValue(parsing: Array(body.readableBytesView))
        }
        _ = try await post("zones/modify", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Files"}}}]}"#)

        /// Uploads a file as a client streams it from disk; answers the seconds and the saved record's download URL.
        func upload(_ file: URL, record: String) async throws -> (seconds: Double, downloadURL: String) {
            let tokens = try await post(
                "assets/upload", #"{"zoneID":{"zoneName":"Files"},"tokens":[{"recordName":"\#(record)","fieldName":"file"}]}"#)
            guard let url = tokens["tokens"]?[0]?["url"]?.stringValue else { throw BenchmarkError("no upload URL: \(tokens)") }
            let size = try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            let handle = try FileHandle(forReadingFrom: file)
            let chunks = AsyncStream<ByteBuffer> { continuation in
                while let data = try? handle.read(upToCount: 1 << 20), !data.isEmpty { continuation.yield(ByteBuffer(bytes: data)) }
                continuation.finish()
            }
            request.body = .stream(chunks, length: .known(size?.int64Value ?? 0))
            let start = ContinuousClock.now
            let response = try await http.execute(request, timeout: .seconds(600))
            let answer = try await response.body.collect(upTo: 1 << 20)
            let seconds = (ContinuousClock.now - start).seconds
            try handle.close()
            guard response.status == .ok, let singleFile = try JSONValue(parsing: Array(answer.readableBytesView))["singleFile"] else {
                throw BenchmarkError("upload: \(response.status) \(String(buffer: answer))")
            }
            let value = String(decoding: singleFile.jsonBytes, as: UTF8.self)
            _ = try await post(
                "records/modify",
                #"{"zoneID":{"zoneName":"Files"},"operations":[{"operationType":"create","record":{"recordName":"\#(record)","recordType":"File","fields":{"file":{"type":"ASSETID","value":\#(value)}}}}]}"#
            )
            let fetched = try await post("records/lookup", #"{"zoneID":{"zoneName":"Files"},"records":[{"recordName":"\#(record)"}]}"#)
            guard let downloadURL = fetched["records"]?[0]?["fields"]?["file"]?["value"]?["downloadURL"]?.stringValue else {
                throw BenchmarkError("no download URL: \(fetched)")
            }
            return (seconds, downloadURL)
        }

        let (uploadSeconds, downloadURL) = try await upload(file, record: "file")
        let downloadStart = ContinuousClock.now
        let response = try await http.execute(HTTPClientRequest(url: downloadURL), timeout: .seconds(600))
        var received = 0
        for try await buffer in response.body { received += buffer.readableBytes }
        let downloadSeconds = (ContinuousClock.now - downloadStart).seconds
        guard received == Int(bytes) else { throw BenchmarkError("download: \(received) bytes of \(Int(bytes))") }
        func rate(_ seconds: Double) -> String { String(format: "%.0f MB/s", bytes / 1_000_000 / seconds) }
        print(
            "| assets \(kind.name): a \(megabytes) MiB file | | \(format(uploadSeconds)) up, \(format(downloadSeconds)) down | "
                + "\(rate(uploadSeconds)) up, \(rate(downloadSeconds)) down | over loopback; the client streams the upload from disk and counts the download's bytes; "
                + "a raw copy of the file on the same disk: \(rate(copySeconds)) |")

        // Memory: a large upload streams through; the server's peak resident memory barely moves.
        try FileManager.default.removeItem(at: file)
        let large = try makeFile("large.bin", megabytes: largeMegabytes)
        let before = server.peakResidentMiB
        let (largeSeconds, _) = try await upload(large, record: "large")
        print(
            "| assets \(kind.name): a \(largeMegabytes) MiB upload | | \(format(largeSeconds)) | "
                + "\(String(format: "%.0f MB/s", Double(largeMegabytes) * 1.048576 / largeSeconds)) | server peak resident "
                + "\(String(format: "%.0f", before)) MiB before, \(String(format: "%.0f", server.peakResidentMiB)) MiB after |")
    }
}
