public import CumulusStore
import Foundation
public import Logging
import NIOSSL
public import PostgresNIO

/// Where a PostgreSQL database is, read from a URL: `postgres://user:password@host:port/database` (also
/// `postgresql://`), with `?sslmode=disable|prefer|require` (default `prefer`, as libpq's).
public struct PostgresLocation: Sendable, Hashable {
    public enum TLSMode: String, Sendable, Hashable {
        case disable, prefer, require
    }

    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    /// Whether a `--database` value names PostgreSQL (anything else is an SQLite data directory).
    public static func names(_ value: String) -> Bool {
        let lowered = value.lowercased()
        return lowered.hasPrefix("postgres://") || lowered.hasPrefix("postgresql://")
    }

    /// Reads a URL; a malformed one is an error that names what is wrong, never the password.
    public init(url: String) throws(StoreError) {
        guard Self.names(url), let components = URLComponents(string: url) else {
            throw StoreError(.misconfigured, "not a PostgreSQL URL; expected postgres://user:password@host:port/database")
        }
        guard let host = components.host, !host.isEmpty else {
            throw StoreError(.misconfigured, "the PostgreSQL URL names no host; expected postgres://user:password@host:port/database")
        }
        guard let user = components.user, !user.isEmpty else {
            throw StoreError(.misconfigured, "the PostgreSQL URL names no user; expected postgres://user:password@host:port/database")
        }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else {
            throw StoreError(.misconfigured, "the PostgreSQL URL names no database; expected postgres://user:password@host:port/database")
        }
        var tls = TLSMode.prefer
        for item in components.queryItems ?? [] where item.name == "sslmode" {
            switch item.value ?? "" {
            case "disable", "allow": tls = .disable
            case "prefer": tls = .prefer
            case "require", "verify-ca", "verify-full": tls = .require
            default: throw StoreError(.misconfigured, "sslmode must be disable, prefer or require")
            }
        }
        self.host = host
        self.port = components.port ?? 5432
        self.username = components.percentEncodedUser?.removingPercentEncoding ?? user
        self.password = components.percentEncodedPassword?.removingPercentEncoding
        self.database = database.removingPercentEncoding ?? database
        self.tls = tls
    }

    /// The URL with the password hidden, for logs and messages.
    public var redacted: String { "postgres://\(username)\(password == nil ? "" : ":***")@\(host):\(port)/\(database)" }

    /// Connects once and disconnects: what an instance does before it starts, so a wrong password, a missing database
    /// or an unreachable server is one clear error at once (a connection pool would retry for a minute).
    public func check(logger: Logger) async throws(StoreError) {
        let tlsConfiguration: PostgresConnection.Configuration.TLS
        do {
            switch tls {
            case .disable: tlsConfiguration = .disable
            case .prefer: tlsConfiguration = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
            case .require: tlsConfiguration = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
            }
        } catch {
            throw StoreError(.misconfigured, "could not set up TLS for PostgreSQL", underlying: error)
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tlsConfiguration)
        configuration.options.connectTimeout = .seconds(5)
        do {
            let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
            try await connection.close().get()
        } catch let error as PSQLError {
            var mapped = PostgresRecordStore.storeError(error)
            mapped.message = "\(mapped.message) at \(redacted)"
            throw mapped
        } catch {
            throw StoreError(.unavailable, "PostgreSQL is unreachable at \(redacted)", underlying: error)
        }
    }

    /// A client configuration for this location, with at most `maximumConnections` connections, of which `keepingOpen`
    /// stay open while idle (a server's pool keeps two; a command's or a test's opens them on demand).
    public func clientConfiguration(maximumConnections: Int, keepingOpen: Int = 0) -> PostgresClient.Configuration {
        let tlsConfiguration: PostgresClient.Configuration.TLS =
            switch tls {
            case .disable: .disable
            case .prefer: .prefer(.makeClientConfiguration())
            case .require: .require(.makeClientConfiguration())
            }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tlsConfiguration)
        configuration.options.maximumConnections = maximumConnections
        // The pool's timers cost more than they give on a server's path: a connection beyond the minimum gets an idle
        // timer, and every connection a keep-alive timer, each time it is parked, cancelled when it is leased again (a
        // task sleeping on the concurrency pool, woken twice per transaction: a fifth of a single write's CPU, measured).
        // So the connections a server at low load uses stay open without one, and no keep-alive `SELECT 1` runs: a
        // connection that closed while idle fails its next statement at once (the store answers 503, and the pool
        // replaces it), and one that stops answering, at the operation's timeout.
        configuration.options.minimumConnections = min(keepingOpen, maximumConnections)
        configuration.options.keepAliveBehavior = nil
        // Prepared statements (`PostgresPreparedText`) are planned with each execution's parameters, as unnamed ones
        // are: after five executions PostgreSQL may keep a generic plan made without them, and one made while a table
        // was small (a scan) stays as it grows. Measured: a batch's zone read went from 1 to 25 ms over 12,000 rows.
        // Preparing still saves parsing and analysing the text at every execution.
        configuration.options.additionalStartupParameters.append(("plan_cache_mode", "force_custom_plan"))
        return configuration
    }
}
