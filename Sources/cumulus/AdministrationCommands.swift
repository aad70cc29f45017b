import ArgumentParser
import CumulusCore
import CumulusModel
import CumulusStore
import CumulusStoreSQLite
import CumulusStores
import Foundation
import Logging

/// How a listing is printed: one line per item, fields separated by tabs (for `cut` and `awk`), or with `--json` one
/// JSON array of objects.
struct ListingOptions: ParsableArguments {
    @Flag(help: "Print a JSON array instead of tab-separated lines.") var json = false

    /// Prints rows of (key, value) pairs.
    func print(_ rows: [[(String, ListingValue)]]) {
        if json {
            var writer = JSONWriter()
            writer.beginArray()
            for row in rows {
                writer.beginObject()
                for (key, value) in row {
                    writer.key(key)
                    switch value {
                    case .text(let text?): writer.string(text)
                    case .text(nil): writer.null()
                    case .flag(let flag): writer.bool(flag)
                    }
                }
                writer.endObject()
            }
            writer.endArray()
            printResult(String(decoding: writer.bytes, as: UTF8.self))
        } else {
            for row in rows { printResult(row.map(\.1.line).joined(separator: "\t")) }
        }
    }
}

/// One value of a listing: text (`null` in JSON and empty in a line when absent), or a yes/no that JSON prints as a
/// boolean, so scripts reading `--json` need not compare strings.
enum ListingValue: ExpressibleByStringLiteral {
    case text(String?)
    case flag(Bool)

    init(stringLiteral value: String) { self = .text(value) }

    var line: String {
        switch self {
        case .text(let text): text ?? ""
        case .flag(let flag): flag ? "true" : "false"
        }
    }
}

/// A timestamp of the store (milliseconds since the epoch) as ISO 8601.
func iso8601(_ milliseconds: Int64) -> String {
    Date(timeIntervalSince1970: Double(milliseconds) / 1000).formatted(.iso8601)
}

extension Containers {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List containers: identifier, created.")
        @OptionGroup var listing: ListingOptions
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let containers = try await options.withStore { try await AccountService(store: $0).listContainers(logger: Logger(label: "cumulus")) }
            listing.print(containers.map { [("id", .text($0.id)), ("createdAt", .text(iso8601($0.createdAt)))] })
        }
    }
}

extension Containers {
    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a container and everything in it: users, tokens, keys, records, shares, links. Cannot be undone.")
        @Argument(help: "Container identifier.") var id: String
        @Flag(help: "Confirm: without it, nothing is deleted.") var yes = false
        @OptionGroup var options: StoreOptions

        func validate() throws {
            if !yes { throw ValidationError("this deletes \(id) and every record, user and credential in it; add --yes to do it") }
        }

        func run() async throws {
            try await options.withStore { try await AccountService(store: $0).deleteContainer(id, logger: Logger(label: "cumulus")) }
            printResult(id)
        }
    }
}

extension Tokens {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a container's API tokens: fingerprint, environment, created, active or revoked. Only hashes are kept.")
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var listing: ListingOptions
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let tokens = try await options.withStore {
                try await AccountService(store: $0).listAPITokens(container: container, logger: Logger(label: "cumulus"))
            }
            listing.print(
                tokens.map { token in
                    [
                        ("fingerprint", .text(AccountService.tokenFingerprint(token))), ("environment", .text(token.environment.rawValue)),
                        ("createdAt", .text(iso8601(token.createdAt))), ("status", token.revoked ? "revoked" : "active"),
                    ]
                })
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke an API token, named by its value or by the fingerprint `tokens list` shows; prints the argument.")
        @Argument(help: "The token (ckAPIToken), or its fingerprint.") var token: String
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withStore {
                try await AccountService(store: $0).revokeAPIToken(container: container, tokenOrFingerprint: token, logger: Logger(label: "cumulus"))
            }
            printResult(token)
        }
    }
}

extension Users {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a container's users: userRecordName, name, email, discoverable, has a password, created.")
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var listing: ListingOptions
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let users = try await options.withStore {
                try await AccountService(store: $0).listUsers(container: container, logger: Logger(label: "cumulus"))
            }
            listing.print(
                users.map { user in
                    [
                        ("userRecordName", .text(user.userRecordName)), ("name", .text(user.name)), ("email", .text(user.email)),
                        ("discoverable", .flag(user.discoverable)), ("hasPassword", .flag(user.passwordHash != nil)),
                        ("createdAt", .text(iso8601(user.createdAt))),
                    ]
                })
        }
    }

    struct SetPassword: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-password", abstract: "Set a user's password (read from standard input) and sign the user out everywhere.")
        @Argument(help: "Sign-in name.") var name: String
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var options: StoreOptions

        func run() async throws {
            // From standard input, not an argument: arguments show in `ps` and in shell history.
            guard let password = readLine(strippingNewline: true), !password.isEmpty else {
                throw ValidationError("the new password is read from standard input: echo \"$PASSWORD\" | cumulus users set-password NAME …")
            }
            try await options.withStore {
                try await AccountService(store: $0).setPassword(
                    container: container, name: name, password: password, logger: Logger(label: "cumulus"))
            }
            printResult(name)
        }
    }

    struct Erase: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "erase",
            abstract: """
                Erase a user and everything they own (docs/OPERATIONS.md, "Erase a user"): their private zones (other \
                users' devices drop them), their place in others' shares, their public records, credentials, devices, \
                subscriptions, push tokens, history and asset files. Prints a receipt of what was removed. Cannot be undone.
                """,
            aliases: ["delete"])
        @Argument(help: "Sign-in name.") var name: String
        @Option(help: "Container identifier.") var container: String
        @Option(help: "Asset directory, if the server was given one (default: $CUMULUS_ASSETS, else beside the store).") var assets: String?
        @Flag(help: "Confirm: without it, nothing is erased.") var yes = false
        @OptionGroup var options: StoreOptions

        func validate() throws {
            if !yes { throw ValidationError("this erases \(name) and everything they own; add --yes to do it") }
        }

        func run() async throws {
            let logger = Logger(label: "cumulus")
            let erasure = try await options.withStore { store in
                try await AccountService(store: store).eraseUser(
                    container: container, name: name, assets: try options.assetStorage(directory: assets, store: store, logger: logger),
                    logger: logger)
            }
            let receipt: [(String, Any)] = [
                ("user", name), ("container", container), ("zones", erasure.zones), ("records", erasure.records),
                ("publicRecords", erasure.publicRecords), ("sharesStopped", erasure.sharesStopped), ("participations", erasure.participations),
                ("recordsAnonymized", erasure.recordsAnonymized), ("subscriptions", erasure.subscriptions), ("pushTokens", erasure.pushTokens),
                ("devices", erasure.devices), ("webAuthTokens", erasure.webAuthTokens), ("historyVersions", erasure.historyVersions),
                ("assetReceipts", erasure.assetReceipts), ("assetFiles", erasure.assetFiles.count), ("filesScrubbed", erasure.filesScrubbed),
            ]
            for (key, value) in receipt { printResult("\(key)\t\(value)") }
        }
    }

    struct SetEmail: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "set-email", abstract: "Set or remove a user's email.")
        @Argument(help: "Sign-in name.") var name: String
        @Argument(help: "The email; omit it with --remove.") var email: String?
        @Option(help: "Container identifier.") var container: String
        @Flag(help: "Remove the user's email.") var remove = false
        @OptionGroup var options: StoreOptions

        func validate() throws {
            if remove == (email != nil) { throw ValidationError("give an email, or --remove") }
        }

        func run() async throws {
            try await options.withStore {
                try await AccountService(store: $0).setEmail(container: container, name: name, email: email, logger: Logger(label: "cumulus"))
            }
            printResult(name)
        }
    }

    struct Discoverable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Let other users find a user with users/discover, or with --off stop it.")
        @Argument(help: "Sign-in name.") var name: String
        @Option(help: "Container identifier.") var container: String
        @Flag(help: "Make the user not discoverable.") var off = false
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withStore {
                try await AccountService(store: $0).setDiscoverable(container: container, name: name, !off, logger: Logger(label: "cumulus"))
            }
            printResult(name)
        }
    }
}

extension Keys {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a container's server-to-server keys: key ID, environment, created, status.")
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var listing: ListingOptions
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let keys = try await options.withStore {
                try await AccountService(store: $0).listServerKeys(container: container, logger: Logger(label: "cumulus"))
            }
            listing.print(
                keys.map { key in
                    [
                        ("keyID", .text(key.keyID)), ("environment", .text(key.environment.rawValue)), ("createdAt", .text(iso8601(key.createdAt))),
                        ("status", key.revoked ? "revoked" : "active"),
                    ]
                })
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a server-to-server key: requests it signs are refused; prints the key ID.")
        @Argument(help: "The key ID.") var keyID: String
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withStore {
                try await AccountService(store: $0).revokeServerKey(container: container, keyID: keyID, logger: Logger(label: "cumulus"))
            }
            printResult(keyID)
        }
    }
}

/// `cumulus backup FILE`: a consistent copy of an SQLite store while the server runs.
struct Indexes: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The field indexes queries made: production's declared fields always have theirs; development's share a budget.",
        subcommands: [List.self, Drop.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "List field indexes: field, index name, containers whose production schema declares the field, containers whose development queries asked for it."
        )
        @OptionGroup var listing: ListingOptions
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let states = try await options.withStore { try await DatabaseService(store: $0).schemas.fieldIndexes(logger: Logger(label: "cumulus")) }
            listing.print(
                states.map { state in
                    [
                        ("field", .text(state.field)), ("index", .text(state.indexName)),
                        ("production", .text(state.productionContainers.sorted().joined(separator: ","))),
                        ("development", .text(state.developmentContainers.sorted().joined(separator: ","))),
                    ]
                })
        }
    }

    struct Drop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Drop a field's index: writes get faster, queries on the field slower; a later query may make it again. Prints the field.")
        @Argument(help: "The field, as `indexes list` names it.") var field: String
        @OptionGroup var options: StoreOptions

        func run() async throws {
            try await options.withStore {
                try await DatabaseService(store: $0).schemas.dropFieldIndex(field: field, logger: Logger(label: "cumulus"))
            }
            printResult(field)
        }
    }
}

struct Backup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy the SQLite store to FILE while the server runs (one consistent snapshot); prints FILE. PostgreSQL: use pg_dump.")
    @Argument(help: "The backup file to write; it must not exist.") var file: String
    @OptionGroup var options: StoreOptions

    func run() async throws {
        try SQLiteRecordStore.backup(databaseAt: try options.sqliteFile(for: "backup"), to: file)
        printResult(file)
    }
}

/// `cumulus restore FILE`: the SQLite store replaced by a backup.
struct Restore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Replace the SQLite store with a backup made by `cumulus backup` (stop the server first); devices then fetch from scratch.")
    @Argument(help: "The backup file.") var file: String
    @OptionGroup var options: StoreOptions

    func run() async throws {
        let target = try options.sqliteFile(for: "restore")
        try FileManager.default.createDirectory(atPath: (target as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try SQLiteRecordStore.restore(backupAt: file, to: target)
        printResult(target)
    }
}

extension DataOptions {
    /// The SQLite database file, or a clear error pointing PostgreSQL users to its own tools.
    func sqliteFile(for command: String) throws -> String {
        switch try location() {
        case .sqlite(let directory):
            return (directory as NSString).appendingPathComponent("cumulus.sqlite")
        case .postgres:
            throw ValidationError(
                "cumulus \(command) copies the SQLite store; for PostgreSQL use pg_dump and pg_restore (docs/DEPLOY.md, Backups)")
        }
    }
}

/// `cumulus console`: a sign-in link for the web console.
struct ConsoleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console",
        abstract: "Print a sign-in link to the web console of a container; it works once, for 15 minutes.")
    @Option(help: "Container identifier.") var container: String
    @Option(help: "The server's URL, as the browser reaches it (default: $CUMULUS_PUBLIC_URL or http://127.0.0.1:8080).")
    var url: String?
    @OptionGroup var options: StoreOptions

    func run() async throws {
        let token = try await options.withStore {
            try await AccountService(store: $0).createConsoleSignIn(container: container, logger: Logger(label: "cumulus"))
        }
        var base = url ?? ProcessInfo.processInfo.environment["CUMULUS_PUBLIC_URL"] ?? "http://127.0.0.1:8080"
        while base.hasSuffix("/") { base.removeLast() }
        printResult("\(base)/console/signin?token=\(token)")
    }
}

struct Zones: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check zones and restore them to a past moment.", subcommands: [CheckDigests.self, RestoreZone.self])

    struct CheckDigests: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "check-digests",
            abstract: """
                Recompute every zone's digest from its records, set right any that differed and list them (container, \
                environment, scope, owner, zone, stored, computed); exits 1 if one did.
                """)
        @OptionGroup var listing: ListingOptions
        @OptionGroup var options: StoreOptions

        func run() async throws {
            let repairs = try await options.withStore {
                try await DatabaseService(store: $0).reconciliation.checkZoneDigests(logger: Logger(label: "cumulus"))
            }
            listing.print(
                repairs.map { repair in
                    [
                        ("container", .text(repair.database.container)), ("environment", .text(repair.database.environment.rawValue)),
                        ("scope", .text(repair.database.scope.rawValue)), ("owner", .text(repair.database.ownerRecordName)),
                        ("zone", .text(repair.zoneName)), ("stored", .text(repair.stored?.description)),
                        ("computed", .text(repair.computed.description)),
                    ]
                })
            if !repairs.isEmpty {
                FileHandle.standardError.write(Data("\(repairs.count) zone digests differed from their records and were set right\n".utf8))
                throw ExitCode(1)
            }
        }
    }
}

extension Users {
    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: """
                Write everything of a user to FILE, one JSON document (docs/OPERATIONS.md, "Export a user"): their private \
                zones' records, what they created in the public database, shares they own and take part in, subscriptions, \
                and their assets' bytes. Never overwrites; the file is readable by its owner only. Prints FILE.
                """)
        @Argument(help: "Sign-in name.") var name: String
        @Option(help: "Container identifier.") var container: String
        @Option(help: "The file to write.") var output: String
        @Option(help: "Asset directory, if the server was given one (default: $CUMULUS_ASSETS, else beside the store).") var assets: String?
        @OptionGroup var options: StoreOptions

        func run() async throws {
            guard !FileManager.default.fileExists(atPath: output) else { throw CumulusError(.badRequest, "\(output) exists; choose another file") }
            let logger = Logger(label: "cumulus")
            try await options.withStore { store in
                guard let user = try await store.user(container: container, name: name, logger: logger) else {
                    throw CumulusError(.notFound, "no user named \(name) in \(container)")
                }
                let export = UserExport(store: store, assets: try options.assetStorage(directory: assets, store: store, logger: logger))
                // Written as it is read, so an account of any size exports in a page's memory; a failed export leaves no file.
                guard FileManager.default.createFile(atPath: output, contents: nil, attributes: [.posixPermissions: 0o600]),
                    let file = FileHandle(forWritingAtPath: output)
                else {
                    throw CumulusError(.badRequest, "cannot write \(output)")
                }
                do {
                    defer { try? file.close() }
                    try await export.write(for: user, at: Int64(Date().timeIntervalSince1970 * 1000), logger: logger) { piece in
                        try file.write(contentsOf: piece)
                    }
                    try file.synchronize()
                } catch {
                    try? FileManager.default.removeItem(atPath: output)
                    throw error
                }
            }
            printResult(output)
        }
    }
}
