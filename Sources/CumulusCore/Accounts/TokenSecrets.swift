public import CumulusStore
public import Logging
import Synchronization

/// Loads the store's token secret once and hands out the codec built from it.
///
/// Callers that ask at the same moment share one load (a burst of requests at start, forged push polls among them,
/// costs one store read, not one each); a load that fails is tried again by the next caller.
public final class TokenSecrets: Sendable {
    private let store: any ContainerStore
    private let loading = Mutex<Task<SyncTokenCodec, any Error>?>(nil)
    private let loaded = Mutex<SyncTokenCodec?>(nil)

    public init(store: any ContainerStore) {
        self.store = store
    }

    /// The codec, if a call to ``codec(logger:)`` has loaded it: for work that must not wait (on an event loop).
    public var codecIfLoaded: SyncTokenCodec? { loaded.withLock { $0 } }

    /// The codec; the first call reads (or creates) the secret in the store.
    public func codec(logger: Logger) async throws -> SyncTokenCodec {
        let store = self.store
        let task = loading.withLock { loading in
            if let loading { return loading }
            let task = Task { SyncTokenCodec(secret: try await store.serverSecret(logger: logger)) }
            loading = task
            return task
        }
        do {
            let codec = try await task.value
            loaded.withLock { $0 = codec }
            return codec
        } catch {
            loading.withLock { if $0 == task { $0 = nil } }
            throw error
        }
    }
}
