public import CumulusStore
import Foundation
import Logging
public import PostgresNIO
import Synchronization

/// Asset bytes in PostgreSQL, in chunks of 1 MiB, so every instance of a cluster serves every asset with no shared
/// directory. Chunks are written as they arrive, each in a statement of its own (a slow upload holds no transaction
/// open), and the file is listed only once whole: a reader never sees part of a file, and a failed upload's chunks
/// are deleted.
public struct PostgresAssetStorage: AssetStorage {
    public let client: PostgresClient
    let logger: Logger
    static let chunkSize = 1 << 20

    public init(client: PostgresClient, logger: Logger = Logger(label: "cumulus.assets")) {
        self.client = client
        self.logger = logger
    }

    public func write<Chunks: AsyncSequence & Sendable>(fileID: String, chunks: Chunks) async throws where Chunks.Element == [UInt8] {
        var pending: [UInt8] = []
        pending.reserveCapacity(Self.chunkSize)
        var sequence = 0
        var size: Int64 = 0
        func flush() async throws {
            try await client.query(
                "INSERT INTO asset_chunks (file_id, seq, data) VALUES (\(fileID), \(sequence), \(Data(pending)))", logger: logger)
            sequence += 1
            pending.removeAll(keepingCapacity: true)
        }
        do {
            for try await chunk in chunks {
                var remaining = chunk[...]
                while !remaining.isEmpty {
                    let take = min(Self.chunkSize - pending.count, remaining.count)
                    pending.append(contentsOf: remaining.prefix(take))
                    remaining = remaining.dropFirst(take)
                    size += Int64(take)
                    if pending.count == Self.chunkSize { try await flush() }
                }
            }
            if !pending.isEmpty { try await flush() }
            try await client.query("INSERT INTO asset_files (file_id, size) VALUES (\(fileID), \(size))", logger: logger)
        } catch {
            _ = try? await client.query("DELETE FROM asset_chunks WHERE file_id = \(fileID)", logger: logger)
            throw error
        }
    }

    public func size(fileID: String) async throws -> Int64? {
        for try await size in try await client.query("SELECT size FROM asset_files WHERE file_id = \(fileID)", logger: logger).decode(Int64.self) {
            return size
        }
        return nil
    }

    public func read(fileID: String, range: Range<Int64>?) async throws -> AssetChunks {
        guard let size = try await size(fileID: fileID) else { throw StoreError(.notFound, "no such asset file") }
        let wanted = range ?? 0..<size
        let chunkSize = Int64(Self.chunkSize)
        let first = Int(wanted.lowerBound / chunkSize)
        let last = wanted.isEmpty ? first - 1 : Int((wanted.upperBound - 1) / chunkSize)
        let next = Mutex(first)
        let client = self.client
        let logger = self.logger
        // A chunk a query, as the reader asks: a large file never sits in memory whole.
        return AssetChunks {
            let sequence = next.withLock { value in
                defer { value += 1 }
                return value
            }
            guard sequence <= last else { return nil }
            var data: Data?
            for try await bytes in try await client.query(
                "SELECT data FROM asset_chunks WHERE file_id = \(fileID) AND seq = \(sequence)", logger: logger
            ).decode(Data.self) {
                data = bytes
            }
            guard let data else { throw StoreError(.corrupt, "asset file \(fileID) is missing chunk \(sequence)") }
            let start = Int64(sequence) * chunkSize
            let from = Int(max(wanted.lowerBound - start, 0))
            let to = Int(min(wanted.upperBound - start, Int64(data.count)))
            return from < to ? Array(data[data.startIndex + from..<data.startIndex + to]) : []
        }
    }

    public func delete(fileIDs: [String]) async throws {
        guard !fileIDs.isEmpty else { return }
        try await client.query(PostgresQuery(unsafeSQL: "DELETE FROM asset_files WHERE file_id = ANY($1)", binds: binds(fileIDs)), logger: logger)
        try await client.query(
            PostgresQuery(unsafeSQL: "DELETE FROM asset_chunks WHERE file_id = ANY($1)", binds: binds(fileIDs)), logger: logger)
    }

    private func binds(_ values: [String]) -> PostgresBindings {
        var bindings = PostgresBindings()
        bindings.append(values)
        return bindings
    }
}
