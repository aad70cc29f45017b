public import CumulusStore
public import Logging
import Synchronization

/// Loads the store's token secret once and hands out the codec built from it.
///
/// Callers that ask at the same moment share one load (a burst of requests at start, forged push polls among them,
/// costs one store read, not one each); a load that fails is tried again by the next caller.
public final class TokenSecrets: Sendable {
    private let store: any ContainerStore
    /// The codec once loaded, or the load under way.
    private enum State {
        case idle
        case loading(Task<SyncTokenCodec, any Error>)
        case loaded(SyncTokenCodec)
    }

    private let state = Mutex(State.idle)

    public init(store: any ContainerStore) {
        self.store = store
    }

    /// The codec, if a call to ``codec(logger:)`` has loaded it: for work that must not wait (on an event loop).
    public var codecIfLoaded: SyncTokenCodec? {
        state.withLock { state in
            if case .loaded(let codec) = state { return codec }
            return nil
        }
    }

    /// The codec; the first call reads (or creates) the secret in the store.
    public func codec(logger: Logger) async throws -> SyncTokenCodec {
        let store = self.store
        let task: Task<SyncTokenCodec, any Error>
        switch state.withLock({ state -> State in
            if case .idle = state { state = .loading(Task { SyncTokenCodec(secret: try await store.serverSecret(logger: logger)) }) }
            return state
        }) {
        case .loaded(let codec): return codec  // nearly every call: no waiting
        case .loading(let loading): task = loading  // the load under way, shared
        case .idle: preconditionFailure("a load was just started")
        }
        do {
            let codec = try await task.value
            state.withLock { $0 = .loaded(codec) }
            return codec
        } catch {
            state.withLock { state in
                if case .loading(let current) = state, current == task { state = .idle }
            }
            throw error
        }
    }
}
