/// The sequence of one store transaction, written once for every store: each step is a ``StoreAction`` for the store
/// to run and what to do with its answer, until the script is done.
///
/// A store runs a script inside its own transaction, SQLite's synchronous `write { db in … }` and PostgreSQL's
/// asynchronous one alike, with the same loop:
///
/// ```swift
/// var script = ModifyRecordsScript.script(batch, planner: planner)
/// while true {
///     switch script {
///     case .done(let output): return output
///     case .run(let action, let then): script = try then(try perform(action, db))
///     }
/// }
/// ```
///
/// The rules stay in the planners (``SharePlanner``, ``RecordBatchPlanner``); a script decides only what to read and
/// write next, and a store only how (its SQL). A script lives inside one transaction and is not `Sendable`.
public enum TransactionScript<Output> {
    /// The script's result: the transaction commits and the store returns it.
    case done(Output)
    /// An action for the store to run, and the rest of the script given its answer.
    case run(StoreAction, then: (StoreAnswer) throws -> TransactionScript<Output>)

    /// Runs `action`, then `next` with its answer.
    public static func perform(_ action: StoreAction, then next: @escaping (StoreAnswer) throws -> TransactionScript<Output>) -> Self {
        .run(action, then: next)
    }

    /// This script, then `next` with its output.
    public func then<Next>(_ next: @escaping (Output) throws -> TransactionScript<Next>) rethrows -> TransactionScript<Next> {
        switch self {
        case .done(let output):
            return try next(output)
        case .run(let action, let rest):
            return .run(action) { answer in try rest(answer).then(next) }
        }
    }

    /// This script with its output transformed.
    public func map<Next>(_ transform: @escaping (Output) throws -> Next) rethrows -> TransactionScript<Next> {
        try then { .done(try transform($0)) }
    }
}

extension TransactionScript where Output == Void {
    /// Nothing to do.
    public static var finished: Self { .done(()) }

    /// Runs `action` and ignores its answer.
    public static func perform(_ action: StoreAction) -> Self {
        .run(action) { _ in .finished }
    }

    /// Runs the actions in order.
    public static func perform(_ actions: [StoreAction]) -> Self {
        actions.reversed().reduce(.finished) { rest, action in .run(action) { _ in rest } }
    }

    /// Runs `body` for each element, one after the other.
    public static func forEach<Element>(_ elements: some Sequence<Element>, _ body: @escaping (Element) throws -> Self) throws -> Self {
        var iterator = elements.makeIterator()
        func step() throws -> Self {
            guard let element = iterator.next() else { return .finished }
            return try body(element).then { try step() }
        }
        return try step()
    }
}
