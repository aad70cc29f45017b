public import CumulusModel
public import Logging

/// Each container environment's schema, and the field indexes queries use.
public protocol SchemaStore: Sendable {
    /// The schema of a container environment: empty until something is written (development) or deployed.
    func schema(container: String, environment: ContainerEnvironment, logger: Logger) async throws -> ContainerSchema

    /// Adds the record types, fields and index flags of `additions` that the schema lacks, and returns the whole schema
    /// after. A field already there keeps its type, whatever `additions` says (a caller compares the answer with what
    /// it sent); index flags only switch on. Atomic, and safe to run from any number of instances at once.
    func extendSchema(_ additions: ContainerSchema, container: String, environment: ContainerEnvironment, logger: Logger) async throws
        -> ContainerSchema

    /// The field indexes queries made, with the schemas that keep them (`cumulus indexes list`).
    func fieldIndexes(logger: Logger) async throws -> [FieldIndexState]

    /// Drops a field's index; `false` when it has none. A later query may make it again, within the budget.
    func dropFieldIndex(field: String, logger: Logger) async throws -> Bool
}
