import CumulusStore
import CumulusStorePostgres
import Foundation
import Testing

/// What every ``AssetStorage`` must do: files in the data directory, and chunks in PostgreSQL.
@Suite("AssetStorage conformance", .timeLimit(.minutes(10)))
struct AssetStorageConformanceTests {
    struct Kind: Sendable, CustomTestStringConvertible {
        var name: String
        var make: @Sendable () async throws -> any AssetStorage
        var testDescription: String { name }

        static let all: [Kind] =
            [
                Kind(name: "files") {
                    try FileAssetStorage(
                        directory: FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-assets-\(UUID().uuidString)"))
                }
            ]
            + (PostgresTestServer.url == nil
                ? [] : [Kind(name: "PostgreSQL") { PostgresAssetStorage(client: try await PostgresTestServer.makeStore().client) }])
    }

    /// Chunks as a request body arrives: uneven sizes.
    static func chunks(_ bytes: [UInt8], size: Int) -> AsyncStream<[UInt8]> {
        AsyncStream { continuation in
            var index = 0
            while index < bytes.count {
                continuation.yield(Array(bytes[index..<min(index + size, bytes.count)]))
                index += size
            }
            continuation.finish()
        }
    }

    static func read(_ storage: any AssetStorage, _ fileID: String, _ range: Range<Int64>? = nil) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        for try await chunk in try await storage.read(fileID: fileID, range: range) { bytes += chunk }
        return bytes
    }

    struct Broken: Error {}

    @Test(arguments: Kind.all)
    func filesAreWrittenWholeReadByRangeAndDeleted(_ kind: Kind) async throws {
        let storage = try await kind.make()
        // Over two of PostgreSQL's chunks, not a multiple of any chunk size.
        let bytes = (0..<(2 * 1024 * 1024 + 12345)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) }
        let fileID = "file-\(UUID().uuidString)"
        try await storage.write(fileID: fileID, chunks: Self.chunks(bytes, size: 65_537))
        #expect(try await storage.size(fileID: fileID) == Int64(bytes.count))
        #expect(try await Self.read(storage, fileID) == bytes)
        for range: Range<Int64> in [0..<1, 1_048_570..<1_048_590, 2_097_150..<Int64(bytes.count), 5..<5] {
            #expect(try await Self.read(storage, fileID, range) == Array(bytes[Int(range.lowerBound)..<Int(range.upperBound)]), "\(range)")
        }
        let empty = "empty-\(UUID().uuidString)"
        try await storage.write(fileID: empty, chunks: Self.chunks([], size: 10))
        #expect(try await storage.size(fileID: empty) == 0)
        #expect(try await Self.read(storage, empty).isEmpty)

        // A write that fails leaves no file.
        let failed = "failed-\(UUID().uuidString)"
        let failing = AsyncThrowingStream<[UInt8], any Error> { continuation in
            continuation.yield(Array(repeating: 1, count: 2_000_000))
            continuation.finish(throwing: Broken())
        }
        await #expect(throws: Broken.self) { try await storage.write(fileID: failed, chunks: failing) }
        #expect(try await storage.size(fileID: failed) == nil)

        try await storage.delete(fileIDs: [fileID, empty, "never-existed"])
        #expect(try await storage.size(fileID: fileID) == nil)
        await #expect(throws: (any Error).self) { _ = try await Self.read(storage, fileID) }
    }
}
