import CumulusModel
public import Foundation
import Synchronization

/// Where asset bytes live, by file ID. The store keeps what they are for (``AssetUpload``); this keeps only bytes, so
/// another home (object storage) is one more implementation: write a stream under a key, read a range, delete.
public protocol AssetStorage: Sendable {
    /// Writes the chunks under `fileID`, all or nothing: a failure leaves no file.
    func write<Chunks: AsyncSequence & Sendable>(fileID: String, chunks: Chunks) async throws where Chunks.Element == [UInt8]
    /// The size of a file; `nil` when there is none.
    func size(fileID: String) async throws -> Int64?
    /// The bytes of a file in `range` (all of it by default), in chunks read as they are asked for: a slow reader
    /// holds one chunk, never the file.
    func read(fileID: String, range: Range<Int64>?) async throws -> AssetChunks
    /// Deletes files; missing ones are ignored.
    func delete(fileIDs: [String]) async throws
}

/// The chunks of an asset file, read one at a time as the consumer asks (a pull, so a slow network never lets a fast
/// disk fill memory).
public struct AssetChunks: AsyncSequence, Sendable {
    public typealias Element = [UInt8]
    private let nextChunk: @Sendable () async throws -> [UInt8]?

    /// - Parameter next: The next chunk, or `nil` at the end; called once for each, in order.
    public init(next: @escaping @Sendable () async throws -> [UInt8]?) {
        self.nextChunk = next
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let nextChunk: @Sendable () async throws -> [UInt8]?
        public mutating func next() async throws -> [UInt8]? { try await nextChunk() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(nextChunk: nextChunk) }
}

/// Asset files under a directory (the data directory's `assets/`), two levels of subdirectories by file ID.
public struct FileAssetStorage: AssetStorage {
    public let directory: URL
    static let chunkSize = 256 * 1024

    public init(directory: URL) throws {
        self.directory = directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func url(_ fileID: String) throws -> URL {
        // File IDs are made by the server (base64url); anything else could name another path.
        guard fileID.count >= 8, fileID.utf8.allSatisfy({ $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }) else {
            throw StoreError(.notFound, "no such asset file")
        }
        return directory.appendingPathComponent(String(fileID.prefix(2))).appendingPathComponent(fileID)
    }

    public func write<Chunks: AsyncSequence & Sendable>(fileID: String, chunks: Chunks) async throws where Chunks.Element == [UInt8] {
        let target = try url(fileID)
        try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
        // Written beside the target and renamed into place: a reader never sees half a file.
        let partial = target.appendingPathExtension("partial-\(UUID.random().uuidString)")
        guard FileManager.default.createFile(atPath: partial.path, contents: nil) else {
            throw StoreError(.unavailable, "could not create \(partial.path)")
        }
        do {
            let handle = try FileHandle(forWritingTo: partial)
            defer { try? handle.close() }
            for try await chunk in chunks { try handle.write(contentsOf: chunk) }
            try handle.synchronize()
            try FileManager.default.moveItem(at: partial, to: target)
        } catch {
            try? FileManager.default.removeItem(at: partial)
            throw error
        }
    }

    public func size(fileID: String) async throws -> Int64? {
        let attributes = try? FileManager.default.attributesOfItem(atPath: try url(fileID).path)
        return (attributes?[.size] as? NSNumber)?.int64Value
    }

    public func read(fileID: String, range: Range<Int64>?) async throws -> AssetChunks {
        let handle: FileHandle
        do {
            handle = try FileHandle(forReadingFrom: try url(fileID))
        } catch {
            throw StoreError(.notFound, "no such asset file")
        }
        let start = range?.lowerBound ?? 0
        try handle.seek(toOffset: UInt64(start))
        let reader = FileChunkReader(handle: handle, position: start, end: range?.upperBound, chunkSize: Self.chunkSize)
        return AssetChunks { try reader.next() }
    }

    public func delete(fileIDs: [String]) async throws {
        for fileID in fileIDs {
            try? FileManager.default.removeItem(at: try url(fileID))
        }
    }
}

extension UInt8 {
    fileprivate var isASCIIAlphanumeric: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self)
    }
}

/// Reads a file a chunk at a time; closes it at the end.
private final class FileChunkReader: Sendable {
    private let state: Mutex<(handle: FileHandle?, position: Int64)>
    let end: Int64?
    let chunkSize: Int

    init(handle: FileHandle, position: Int64, end: Int64?, chunkSize: Int) {
        self.state = Mutex((handle, position))
        self.end = end
        self.chunkSize = chunkSize
    }

    deinit {
        state.withLock { try? $0.handle?.close() }
    }

    func next() throws -> [UInt8]? {
        try state.withLock { state in
            guard let handle = state.handle else { return nil }
            let wanted = end.map { min(Int64(chunkSize), $0 - state.position) } ?? Int64(chunkSize)
            guard wanted > 0, let data = try handle.read(upToCount: Int(wanted)), !data.isEmpty else {
                try? handle.close()
                state.handle = nil
                return nil
            }
            state.position += Int64(data.count)
            return Array(data)
        }
    }
}
