import Logging
import PostgresNIO

/// The text of a statement on a hot path (every write runs it), which PostgreSQL parses once per connection rather than
/// at every execution: after a connection's first use it keeps the statement by ``name``, and each execution sends
/// only the name and the parameters, and reads no description of the rows back.
///
/// The text is fixed: parameters by number (`$1`), nothing interpolated per call, so one name always means one text.
/// PostgreSQL takes the parameters' types from the first execution's bindings, as it does for an unnamed statement, and
/// plans each execution with its parameters (``PostgresLocation/clientConfiguration(maximumConnections:keepingOpen:)``
/// asks for `plan_cache_mode = force_custom_plan`): only the parsing is saved, never a plan kept past its data.
///
/// A statement whose preparation fails keeps failing on that connection: PostgresNIO remembers the error by name. A bug
/// in a text cannot reach a deployment (the texts are fixed and run by the suites on every store, and the server
/// migrates before it serves); a preparation cancelled for a passing reason (a lock or statement timeout, a transaction
/// already failed) closes its connection, so the pool replaces it (``PostgresConnection/run(_:_:logger:)``).
///
/// ```swift
/// enum Commit: PostgresPreparedText {
///     static let name = "cumulus_commit"
///     static let sql = "COMMIT"
/// }
/// try await connection.run(Commit.self, logger: logger)
/// ```
protocol PostgresPreparedText: Sendable {
    /// The statement's name on the connection; short, since every execution sends it. Unique across the store.
    static var name: String { get }
    /// The statement, its parameters numbered.
    static var sql: String { get }
}

/// A ``PostgresPreparedText`` with one execution's parameters, in the form PostgresNIO prepares and runs.
struct PreparedExecution<Text: PostgresPreparedText>: PostgresPreparedStatement {
    typealias Row = PostgresRow

    static var name: String { Text.name }
    static var sql: String { Text.sql }

    var bindings: PostgresBindings

    func makeBindings() -> PostgresBindings { bindings }

    func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
}

extension PostgresConnection {
    /// Runs the prepared statement `text` with `bindings`, preparing it first on this connection's first use; its rows.
    ///
    /// On an error that can cancel a preparation for a passing reason, the connection is closed before the error is
    /// thrown: had it been the preparation, every later run of `text` on this connection would fail with it.
    @discardableResult
    func run<Text: PostgresPreparedText>(
        _ text: Text.Type, _ bindings: PostgresBindings = PostgresBindings(), logger: Logger
    ) async throws -> AsyncThrowingMapSequence<PostgresRowSequence, PostgresRow> {
        do {
            return try await execute(PreparedExecution<Text>(bindings: bindings), logger: logger)
        } catch let error as PSQLError where error.mayHaveCancelledAPreparation {
            logger.warning(
                "closing a PostgreSQL connection after a statement failed in a way that may have cancelled its preparation",
                metadata: ["cumulus.statement": "\(Text.name)", "cumulus.sqlstate": "\(error.serverInfo?[.sqlState] ?? "")"])
            try? await close()
            throw error
        }
    }
}

extension PSQLError {
    /// Lock and statement timeouts, a cancellation, a transaction already failed, and PostgreSQL short of resources:
    /// the errors a statement's preparation can meet that a later one would not.
    var mayHaveCancelledAPreparation: Bool {
        guard let state = serverInfo?[.sqlState] else { return false }
        return ["55P03", "57014", "25P02"].contains(state) || state.hasPrefix("53")
    }
}
