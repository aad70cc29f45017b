import ArgumentParser
import CumulusCore
import CumulusModel
import CumulusStore
import CumulusSyncGRDB
import Foundation
import GRDB
import Logging

/// `cumulus schema`: export a container's schema, compare or deploy a schema file, and lint an app's synced tables.
struct SchemaCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema", abstract: "Export, compare and deploy schemas; check an app's synced tables.",
        subcommands: [Export.self, Diff.self, Deploy.self, Check.self])

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a container's schema in CloudKit's schema language.")
        @Option(help: "Container identifier.") var container: String
        @Option(help: "development or production.") var environment: ContainerEnvironment = .development
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let schema = try await options.withStore { store in
                try await DatabaseService(store: store).schemas.schema(
                    container: container, environment: environment, logger: Logger(label: "cumulus"))
            }
            FileHandle.standardOutput.write(Data(SchemaLanguage.write(schema).utf8))
        }
    }

    struct Diff: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print what deploying a schema file would add, and the changes a deploy refuses (exit 1 if any).")
        @Argument(help: "The schema file.") var file: String
        @Option(help: "Container identifier.") var container: String
        @Option(help: "development or production.") var environment: ContainerEnvironment = .production
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let deployment = try await SchemaCommand.deploy(file, container: container, environment: environment, dryRun: true, options: options)
            if !deployment.diff.problems.isEmpty { throw ExitCode.failure }
        }
    }

    struct Deploy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply a schema file: record types, fields and indexes may be added, never changed or removed.")
        @Argument(help: "The schema file (as `cumulus schema export` prints it).") var file: String
        @Option(help: "Container identifier.") var container: String
        @Option(help: "development or production.") var environment: ContainerEnvironment = .production
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let deployment = try await SchemaCommand.deploy(file, container: container, environment: environment, dryRun: false, options: options)
            if !deployment.deployed { throw ExitCode.failure }
        }
    }

    /// Reads a schema file and deploys it (or compares it), printing each addition and each refused change.
    static func deploy(_ file: String, container: String, environment: ContainerEnvironment, dryRun: Bool, options: StoreOptions)
        async throws -> SchemaDeployment
    {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw CumulusError(.badRequest, "cannot read \(file)")
        }
        let declared: ContainerSchema
        do {
            declared = try SchemaLanguage.read(text)
        } catch {
            throw CumulusError(.badRequest, "\(file): \(error.description)")
        }
        let deployment = try await options.withStore { store in
            try await DatabaseService(store: store).schemas.deploy(
                declared, container: container, environment: environment, dryRun: dryRun, logger: Logger(label: "cumulus"))
        }
        for line in deployment.diff.additions { printResult(line) }
        for line in deployment.diff.problems { FileHandle.standardError.write(Data("refused: \(line)\n".utf8)) }
        if deployment.diff.additions.isEmpty && deployment.diff.problems.isEmpty { printResult("no changes") }
        if !deployment.diff.problems.isEmpty {
            FileHandle.standardError.write(Data("error: a deploy may add record types, fields and indexes, never change or remove them\n".utf8))
        }
        return deployment
    }

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Lint an app's SQLite file against the rules of CloudKit sync; exits 1 with the list if any table breaks one.")
        @Argument(help: "The app's SQLite file.") var file: String
        @Option(name: .customLong("table"), help: "A synced table (repeat for each; default: every table but SQLite's and GRDB's own).")
        var tables: [String] = []

        func run() async throws {
            guard FileManager.default.fileExists(atPath: file) else { throw CumulusError(.badRequest, "no such file: \(file)") }
            var configuration = Configuration()
            configuration.readonly = true
            let queue = try DatabaseQueue(path: file, configuration: configuration)
            let problems = try await queue.read { db in
                var names = tables
                if names.isEmpty {
                    names = try String.fetchAll(
                        db,
                        sql: """
                            SELECT name FROM sqlite_master WHERE type = 'table'
                            AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'grdb\\_%' ESCAPE '\\'
                            AND name NOT LIKE 'cumulus\\_%' ESCAPE '\\' ORDER BY name
                            """)
                }
                for name in names where try !db.tableExists(name) { throw CumulusError(.badRequest, "\(file) has no table \(name)") }
                return try ModelLinter.check(tablesNamed: names, in: db)
            }
            for problem in problems { printResult(problem.description) }
            let errors = problems.count { !$0.isWarning }
            if errors > 0 {
                FileHandle.standardError.write(Data("error: \(errors) problem\(errors == 1 ? "" : "s") would break sync\n".utf8))
                throw ExitCode.failure
            }
            if problems.isEmpty { printResult("ok") }
        }
    }
}
