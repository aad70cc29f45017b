import CumulusModel
import CumulusStore
public import Logging

/// One thing `cumulus doctor` checked, and what it found.
public struct DoctorFinding: Sendable, Hashable, CustomStringConvertible {
    public enum Severity: String, Sendable, Hashable {
        case ok
        /// Works now, needs attention.
        case warning
        /// Something users meet: writes refused, queries failing, devices that cannot sync.
        case problem
    }

    public var severity: Severity
    /// What was checked: `store`, `schema iCloud.com.example.app`, `disk`.
    public var subject: String
    public var message: String

    public init(_ severity: Severity, _ subject: String, _ message: String) {
        self.severity = severity
        self.subject = subject
        self.message = message
    }

    public var description: String {
        let label =
            switch severity {
            case .ok: "ok     "
            case .warning: "warning"
            case .problem: "PROBLEM"
            }
        return "\(label) \(subject): \(message)"
    }
}

/// `cumulus doctor`'s look at the data: whether production's schemas hold what development's do, whether the indexes
/// production declares exist, and whether every zone's digest is the digest of its records.
public struct DoctorService: Sendable {
    let store: any ContainerStore & RecordZoneStore
    let schemas: SchemaService

    /// What the store's data says about a deployment, per container: record types, fields and indexes development has
    /// and production lacks (production refuses writes of a type or field its schema lacks, and queries on a field it
    /// does not index: the trap in which an app's every write fails once it ships), and fields production declares
    /// `QUERYABLE` or `SORTABLE` whose index is not built yet (a warning: the first query builds it).
    public func diagnose(logger: Logger) async throws -> [DoctorFinding] {
        var findings: [DoctorFinding] = []
        let containers = try await mapStoreErrors { try await store.listContainers(logger: logger) }
        let indexes = try await schemas.fieldIndexes(logger: logger)
        for container in containers.map(\.id).sorted() {
            let subject = "schema \(container)"
            let development = try await schemas.schema(container: container, environment: .development, logger: logger)
            let production = try await schemas.schema(container: container, environment: .production, logger: logger)
            let diff = SchemaDiff(from: production, to: development)
            // A development-only trial (production has no record type and no API token: nothing ships to it yet) is
            // told what to do before shipping, as a warning: a trial is not broken.
            let tokens = try await mapStoreErrors { try await store.listAPITokens(container: container, logger: logger) }
            let trial = production.recordTypes.isEmpty && !tokens.contains { $0.environment == .production && !$0.revoked }
            if trial && !diff.additions.isEmpty && diff.problems.isEmpty {
                findings.append(
                    DoctorFinding(
                        .warning, subject,
                        "a development-only trial (production has no schema and no API token yet): before an app ships, deploy "
                            + "development's \(development.recordTypes.count) record types with `cumulus schema export --container \(container) "
                            + "--environment development > schema.ckdb` then `cumulus schema deploy schema.ckdb --container \(container) "
                            + "--environment production`"))
                continue
            }
            for line in diff.additions {
                findings.append(
                    DoctorFinding(
                        .problem, subject,
                        "development has what production lacks (\(line)): production refuses such writes and queries; deploy with "
                            + "`cumulus schema export --container \(container) --environment development > schema.ckdb` then "
                            + "`cumulus schema deploy schema.ckdb --container \(container) --environment production`"))
            }
            for line in diff.problems {
                findings.append(DoctorFinding(.problem, subject, "development and production disagree: \(line)"))
            }
            if diff.additions.isEmpty && diff.problems.isEmpty {
                findings.append(
                    DoctorFinding(
                        .ok, subject,
                        "production has every record type, field and index development has (\(production.recordTypes.count) record types)"))
            }
            for (typeName, recordType) in production.recordTypes.sorted(by: { $0.key < $1.key }) {
                for field in recordType.fields.values.sorted(by: { $0.name < $1.name }) where field.isQueryable || field.isSortable {
                    let indexed = indexes.contains { $0.field == field.name && $0.productionContainers.contains(container) }
                    if !indexed {
                        findings.append(
                            DoctorFinding(
                                .warning, "indexes \(container)",
                                "production declares \(typeName).\(field.name) \(field.isQueryable ? "QUERYABLE" : "SORTABLE") and its index is not built "
                                    + "yet: the first query on it builds it once a record holds the field, and waits for it on a large store"))
                    }
                }
            }
        }
        if containers.isEmpty { findings.append(DoctorFinding(.warning, "containers", "none yet: `cumulus containers create ID`")) }
        // A digest kept in every write's transaction never drifts; one that did makes devices verify out of sync while
        // they hold what the server holds.
        let drifted = try await mapStoreErrors { try await store.driftedZoneDigests(logger: logger) }
        if drifted.isEmpty {
            findings.append(DoctorFinding(.ok, "zone digests", "every zone's digest is the digest of its records"))
        } else {
            let named = drifted.prefix(5).map { "\($0.database.container) \($0.database.scope.rawValue) \($0.zoneName)" }.joined(separator: ", ")
            findings.append(
                DoctorFinding(
                    .problem, "zone digests",
                    "\(drifted.count) zones' digests differ from their records (\(named)\(drifted.count > 5 ? ", …" : "")): devices that verify "
                        + "them report differences they do not have; `cumulus zones check-digests` sets them right"))
        }
        return findings
    }
}
