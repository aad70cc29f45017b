/// The three databases every user of a container sees.
public enum DatabaseScope: String, Sendable, Hashable, CaseIterable {
    case `public`
    case `private`
    case shared
}

/// A container's environment. Each has its own data, tokens and keys.
public enum ContainerEnvironment: String, Sendable, Hashable, CaseIterable {
    case development
    case production
}
