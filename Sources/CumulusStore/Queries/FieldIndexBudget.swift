public import CumulusModel

/// Which field indexes a store keeps: every field a production schema declares `QUERYABLE` or `SORTABLE` gets its
/// index, whatever the count; the indexes development queries make on demand share ``maximumDevelopmentIndexes``, each
/// container up to a fair share of them, so no container's made-up fields can take another's.
///
/// The rule only: a store gathers the ``FieldIndexState``s (its index catalog and the schemas' marks), asks ``plan``,
/// and runs the DDL.
public struct FieldIndexBudget: Sendable, Hashable {
    /// Indexes that no production schema declares, across the store: each slows every write of the records table.
    public var maximumDevelopmentIndexes: Int

    public init(maximumDevelopmentIndexes: Int) {
        self.maximumDevelopmentIndexes = maximumDevelopmentIndexes
    }

    /// What to do for a query: build these indexes, after dropping those.
    public struct Plan: Sendable, Hashable {
        public var build: [String] = []
        public var drop: [String] = []

        public init(build: [String] = [], drop: [String] = []) {
            self.build = build
            self.drop = drop
        }
    }

    /// Plans the indexes of `fields` for a query of `container`.
    ///
    /// - Parameters:
    ///   - existing: The store's field indexes, by field.
    ///   - unnamed: Indexes whose field no schema names: they count against the budget, and are never evicted.
    ///   - required: The query's fields are declared in its container's production schema: built past the budget.
    ///   - marks: The fields each container's development schema marks `QUERYABLE` or `SORTABLE` (what its queries
    ///     asked to be indexed), the requester's included.
    public func plan(
        fields: Set<String>, container: String, required: Bool, existing: Set<String>, unnamed: Int = 0, productionFields: Set<String>,
        marks: [String: Set<String>]
    ) -> Plan {
        var plan = Plan()
        let missing = fields.subtracting(existing).sorted()
        guard !missing.isEmpty else { return plan }
        if required {
            plan.build = missing
            return plan
        }
        var developmentOnly = existing.subtracting(productionFields)
        for field in missing {
            if developmentOnly.count + unnamed < maximumDevelopmentIndexes {
                plan.build.append(field)
                developmentOnly.insert(field)
                continue
            }
            // Full: the requester may take a place from the container that holds the most, while it holds fewer than
            // its fair share; a container at or over its share waits (its query runs, unindexed).
            func holding(_ container: String) -> Int { developmentOnly.intersection(marks[container] ?? []).count }
            let holders = Set(marks.keys.filter { holding($0) > 0 }).union([container])
            let share = max(1, maximumDevelopmentIndexes / holders.count)
            guard holding(container) < share else { continue }
            let mine = marks[container] ?? []
            let largest = holders.subtracting([container]).max { (holding($0), $1) < (holding($1), $0) }
            // Only a container over its share loses a place, so shares settle instead of trading places back and forth.
            guard let largest, holding(largest) > share else { continue }
            // One of the largest holder's that the requester does not use; the one fewest other containers use.
            let candidates = developmentOnly.intersection(marks[largest] ?? []).subtracting(mine)
            let victim = candidates.min { a, b in
                let (usersA, usersB) = (marks.values.count { $0.contains(a) }, marks.values.count { $0.contains(b) })
                return (usersA, a) < (usersB, b)
            }
            guard let victim else { continue }
            plan.drop.append(victim)
            developmentOnly.remove(victim)
            plan.build.append(field)
            developmentOnly.insert(field)
        }
        return plan
    }
}

/// One field index a store holds, for operators (`cumulus indexes list`).
public struct FieldIndexState: Sendable, Hashable {
    /// The field, when a schema names it (PostgreSQL's index names are hashes of it).
    public var field: String?
    /// The index's name in the store.
    public var indexName: String
    /// Containers whose production schema declares the field `QUERYABLE` or `SORTABLE`: the index is kept for them.
    public var productionContainers: Set<String>
    /// Containers whose development schema marks the field: their queries asked for it.
    public var developmentContainers: Set<String>

    public init(field: String?, indexName: String, productionContainers: Set<String>, developmentContainers: Set<String>) {
        self.field = field
        self.indexName = indexName
        self.productionContainers = productionContainers
        self.developmentContainers = developmentContainers
    }

    /// Reads a store's index names and its schemas' marks (field, container, environment) into states, and the inputs
    /// of ``FieldIndexBudget/plan(fields:container:required:existing:unnamed:productionFields:marks:)``.
    ///
    /// - Parameter field: The field an index name is for, when the name tells (SQLite's do; PostgreSQL's are hashes).
    public static func gather(
        indexNames: Set<String>, marks: [(field: String, container: String, environment: ContainerEnvironment)], indexName: (String) -> String,
        field: (String) -> String? = { _ in nil }
    ) -> FieldIndexCatalog {
        var byName: [String: FieldIndexState] = [:]
        var productionFields = Set<String>()
        var developmentMarks: [String: Set<String>] = [:]
        for mark in marks {
            switch mark.environment {
            case .production: productionFields.insert(mark.field)
            case .development: developmentMarks[mark.container, default: []].insert(mark.field)
            }
            let name = indexName(mark.field)
            guard indexNames.contains(name) else { continue }
            var state = byName[name] ?? FieldIndexState(field: mark.field, indexName: name, productionContainers: [], developmentContainers: [])
            switch mark.environment {
            case .production: state.productionContainers.insert(mark.container)
            case .development: state.developmentContainers.insert(mark.container)
            }
            byName[name] = state
        }
        for name in indexNames where byName[name] == nil {
            byName[name] = FieldIndexState(field: field(name), indexName: name, productionContainers: [], developmentContainers: [])
        }
        let states = byName.values.sorted { $0.indexName < $1.indexName }
        return FieldIndexCatalog(
            states: states, existing: Set(states.compactMap(\.field)), unnamed: states.count { $0.field == nil }, productionFields: productionFields,
            developmentMarks: developmentMarks)
    }
}

/// A store's field indexes and the schemas' marks, as ``FieldIndexBudget`` reads them.
public struct FieldIndexCatalog: Sendable, Hashable {
    public var states: [FieldIndexState]
    /// The fields with an index.
    public var existing: Set<String>
    /// Indexes whose field is not known.
    public var unnamed: Int
    /// Fields some production schema declares `QUERYABLE` or `SORTABLE`.
    public var productionFields: Set<String>
    /// The fields each container's development schema marks.
    public var developmentMarks: [String: Set<String>]

    /// Plans the indexes of a query's `fields` under `budget`.
    public func plan(_ budget: FieldIndexBudget, fields: Set<String>, container: String, required: Bool) -> FieldIndexBudget.Plan {
        budget.plan(
            fields: fields, container: container, required: required, existing: existing, unnamed: unnamed, productionFields: productionFields,
            marks: developmentMarks)
    }
}
