import ArgumentParser
import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import Logging

/// How the history's options are written on the command line.
enum HistoryWindow {
    /// `7d`, `36h`, `90m`, `45s` or `0`.
    static func duration(_ text: String) -> Duration? {
        if text == "0" { return .zero }
        guard let unit = text.last, let count = Int64(text.dropLast()), count >= 0 else { return nil }
        switch unit {
        case "d": return .seconds(count * 86_400)
        case "h": return .seconds(count * 3_600)
        case "m": return .seconds(count * 60)
        case "s": return .seconds(count)
        default: return nil
        }
    }

    /// The retention `text` names, or the default (a week) without one.
    static func retention(_ text: String?) throws -> Duration {
        guard let text else { return DatabaseService.defaultHistoryRetention }
        guard let retention = duration(text) else {
            throw ValidationError("--history-retention (CUMULUS_HISTORY_RETENTION) must be 0 or a number followed by d, h, m or s, such as 7d")
        }
        return retention
    }
}

/// Which zone a history command acts on.
struct ZoneOptions: ParsableArguments {
    @Option(help: "Container identifier.") var container: String
    @Option(help: "The zone's owner: a sign-in name or a user record name.") var user: String
    @Option(help: "Zone name.") var zone: String
    @Option(help: "development or production.") var environment: ContainerEnvironment = .development
    @Option(
        name: .customLong("history-retention"),
        help: "The server's --history-retention: how far back the history reaches (default: $CUMULUS_HISTORY_RETENTION or 7d).")
    var historyRetention: String?

    /// The owner's private database.
    func database(_ store: any RecordStore, logger: Logger) async throws -> DatabaseRef {
        var found = try await store.user(container: container, name: user, logger: logger)
        if found == nil { found = try await store.user(userRecordName: user, logger: logger) }
        guard let user = found, user.container == container else { throw CumulusError(.notFound, "no user \(self.user) in \(container)") }
        return DatabaseRef(container: container, environment: environment, scope: .private, ownerRecordName: user.userRecordName)
    }

    /// Tells the running servers, so the owner's devices waiting on push look now, as after the console's restore.
    func announce(_ database: DatabaseRef, to store: any RecordStore, logger: Logger) async {
        await (store as? any CommandAnnouncing)?.announceFromCommand([ChangeSignal.key(database)], logger: logger)
    }

    func service(_ store: any RecordStore) throws -> DatabaseService {
        DatabaseService(
            store: store,
            historyRetention: try HistoryWindow.retention(historyRetention ?? ProcessInfo.processInfo.environment["CUMULUS_HISTORY_RETENTION"]))
    }
}

extension Zones {
    struct RestoreZone: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "restore",
            abstract: """
                Restore a zone to how it was at TIME, as new changes devices fetch like any other: records changed since \
                come back as they were, records deleted since come back, records created since are deleted. Prints each \
                difference (changed, deleted or created since, and the record name), then a summary with the moment to \
                restore to for undoing it.
                """)
        @OptionGroup var zone: ZoneOptions
        @Option(help: "ISO 8601 (2026-11-26T09:30:00Z) or milliseconds since 1970, within the history window.") var to: String
        @Flag(name: .customLong("dry-run"), help: "Print the differences only; change nothing.") var dryRun = false
        @OptionGroup var options: StoreOptions

        func run() async throws {
            guard let time = HistoryMoment.milliseconds(parsing: to) else {
                throw ValidationError("--to: \(to) is neither ISO 8601 nor milliseconds since 1970")
            }
            let logger = Logger(label: "cumulus")
            let report = try await options.withStore { store in
                let database = try await zone.database(store, logger: logger)
                let report = try await zone.service(store).history.restoreZone(zone.zone, in: database, to: time, dryRun: dryRun, logger: logger) {
                    difference in
                    switch difference {
                    case .changed(let record): printResult("changed since\t\(record.header.recordName)")
                    case .deleted(let record): printResult("deleted since\t\(record.header.recordName)")
                    case .created(let name): printResult("created since\t\(name)")
                    }
                }
                if !dryRun { await zone.announce(database, to: store, logger: logger) }
                return report
            }
            for failure in report.failures {
                FileHandle.standardError.write(Data("not restored\t\(failure.recordName)\t\(failure.code.rawValue)\t\(failure.reason)\n".utf8))
            }
            let verb = dryRun ? "would restore" : "restored"
            var summary = "\(verb) \(zone.zone) to \(HistoryMoment.text(time)): \(report.changed) changed, \(report.deleted) deleted and "
            summary += "\(report.created) created since, \(report.failures.count) not restored\n"
            if !dryRun { summary += "undo with --to \(report.startedAt - 1)\n" }
            FileHandle.standardError.write(Data(summary.utf8))
            if !report.failures.isEmpty { throw ExitCode(1) }
        }
    }
}

struct Records: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List records deleted within the history window, and bring them back.", subcommands: [Deleted.self, Undelete.self])

    struct Deleted: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a zone's records deleted within the history window, newest first: record name, type, deleted at, deleted by.")
        @OptionGroup var zone: ZoneOptions
        @OptionGroup var listing: ListingOptions
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let logger = Logger(label: "cumulus")
            let deleted = try await options.withStore { store in
                try await zone.service(store).history.deletedRecords(zone.zone, in: try await zone.database(store, logger: logger), logger: logger)
            }
            listing.print(
                deleted.map { entry in
                    [
                        ("recordName", .text(entry.record.header.recordName)), ("recordType", .text(entry.record.header.recordType)),
                        ("deletedAt", .text(HistoryMoment.text(entry.deleted.timestamp))), ("deletedBy", .text(entry.deleted.userRecordName)),
                    ]
                })
        }
    }

    struct Undelete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Bring records deleted within the history window back as they were, with new change tags; prints each record name.")
        @OptionGroup var zone: ZoneOptions
        @Argument(help: "Record names.") var recordNames: [String]
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let logger = Logger(label: "cumulus")
            let results = try await options.withStore { store in
                let database = try await zone.database(store, logger: logger)
                let results = try await zone.service(store).history.undeleteRecords(recordNames, zoneName: zone.zone, in: database, logger: logger)
                await zone.announce(database, to: store, logger: logger)
                return results
            }
            var failed = false
            for result in results {
                switch result {
                case .saved(let record): printResult(record.header.recordName)
                case .failed(let failure):
                    failed = true
                    FileHandle.standardError.write(Data("not undeleted\t\(failure.recordName)\t\(failure.code.rawValue)\t\(failure.reason)\n".utf8))
                case .deleted: break
                }
            }
            if failed { throw ExitCode(1) }
        }
    }
}
