public import CumulusStore
public import Logging
import Synchronization

/// Loads the store's token secret once and hands out the codec built from it.
public final class TokenSecrets: Sendable {
    private let store: any RecordStore
    private let cached = Mutex<SyncTokenCodec?>(nil)

    public init(store: any RecordStore) {
        self.store = store
    }

    /// The codec; the first call reads (or creates) the secret in the store.
    public func codec(logger: Logger) async throws -> SyncTokenCodec {
        if let codec = cached.withLock({ $0 }) { return codec }
        let codec = SyncTokenCodec(secret: try await store.serverSecret(logger: logger))
        cached.withLock { $0 = codec }
        return codec
    }
}
