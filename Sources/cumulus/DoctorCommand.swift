import ArgumentParser
import CumulusCore
import CumulusStore
import CumulusStorePostgres
import CumulusStores
import Foundation
import Logging
import PostgresNIO

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `cumulus doctor`: checks a deployment and says in words what is wrong.
struct Doctor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: """
            Check a deployment and say in words what is wrong: the store reachable and migrated, development record types, \
            fields and indexes missing from production, declared fields without their index, disk, clock, and (with --url) \
            the public URL and proxy headers. Exits 1 if something users meet is wrong.
            """)
    @OptionGroup var options: DataOptions
    @Option(name: .customLong("url"), help: "The server's public URL (https://cloud.example.com), to check it from here as clients reach it.")
    var url: String?
    /// The most a clock may be off before the check warns: tokens, signatures (5 minutes) and links depend on it.
    static let clockSkewWarning: Double = 2

    func run() async throws {
        let logger = Logger(label: "cumulus")
        var findings: [DoctorFinding] = []
        let location = try options.location()
        switch location {
        case .sqlite(let directory):
            // Paths are printed absolute, and a store that is not there is a problem, never made: a mistyped --data
            // must not check an empty store it created and call it healthy.
            let absolute = URL(fileURLWithPath: directory).standardizedFileURL.path
            let file = (absolute as NSString).appendingPathComponent("cumulus.sqlite")
            guard FileManager.default.fileExists(atPath: file) else {
                let what = FileManager.default.fileExists(atPath: absolute) ? "no store in \(absolute)" : "no data directory at \(absolute)"
                findings.append(
                    DoctorFinding(.problem, "store", "\(what): give --data (or CUMULUS_DATA) the directory the server uses; nothing was created"))
                return try Self.finish(findings)
            }
            findings.append(DoctorFinding(.ok, "store", "SQLite at \(file)"))
            findings += Self.disk(absolute)
        case .postgres(let postgres, _, _):
            do {
                try await postgres.check(logger: logger)
            } catch {
                findings.append(DoctorFinding(.problem, "store", "\(error.message)"))
                return try Self.finish(findings)
            }
            findings += try await Self.postgres(postgres, logger: logger)
        }
        do {
            findings += try await options.withStore { store in
                var found: [DoctorFinding] = []
                // A commit of the probe row: the store can be read and still not written (a file the server's user may
                // not write, a full disk, a read-only database), and then every write answers 503.
                do {
                    try await store.probeWrite(at: Int64(Date().timeIntervalSince1970 * 1000), logger: logger)
                    found.append(DoctorFinding(.ok, "writes", "a write commits"))
                } catch {
                    found.append(
                        DoctorFinding(.problem, "writes", "the store cannot be written: \(Self.words(error)); every write answers 503 until it can"))
                }
                do {
                    found += try await DatabaseService(store: store).doctor.diagnose(logger: logger)
                } catch {
                    found.append(DoctorFinding(.problem, "store", "reading the deployment failed: \(Self.words(error))"))
                }
                return found
            }
        } catch {
            findings.append(DoctorFinding(.problem, "store", Self.words(error)))
        }
        if let url { findings += await Self.publicURL(url) }
        try Self.finish(findings)
    }

    /// An error in words: a store's message, a domain error's reason, else its description.
    static func words(_ error: any Error) -> String {
        if let error = error as? StoreError { return error.message }
        if let error = error as? CumulusError { return (error.underlying as? StoreError)?.message ?? error.reason }
        return String(reflecting: error)
    }

    static func finish(_ findings: [DoctorFinding]) throws {
        for finding in findings { printResult(finding.description) }
        let problems = findings.count { $0.severity == .problem }
        let warnings = findings.count { $0.severity == .warning }
        printResult(problems == 0 ? "no problem found\(warnings == 0 ? "" : " (\(warnings) warnings)")" : "\(problems) problems found")
        if problems > 0 { throw ExitCode(1) }
    }

    /// Free space where the SQLite store lives.
    static func disk(_ directory: String) -> [DoctorFinding] {
        var stats = statvfs()
        guard statvfs(directory, &stats) == 0 || statvfs(".", &stats) == 0 else { return [DoctorFinding(.warning, "disk", "cannot read free space")] }
        let free = Double(stats.f_bavail) * Double(stats.f_frsize)
        let total = Double(stats.f_blocks) * Double(stats.f_frsize)
        let text = String(format: "%.1f GiB free of %.1f GiB", free / 1_073_741_824, total / 1_073_741_824)
        if free < 256 * 1_048_576 { return [DoctorFinding(.problem, "disk", "\(text): writes will soon be refused (503, retried by clients)")] }
        if free < 1_073_741_824 || free < total * 0.05 { return [DoctorFinding(.warning, "disk", "\(text): make room before writes are refused")] }
        return [DoctorFinding(.ok, "disk", text)]
    }

    /// PostgreSQL's schema version and clock.
    static func postgres(_ location: PostgresLocation, logger: Logger) async throws -> [DoctorFinding] {
        let client = PostgresClient(configuration: location.clientConfiguration(maximumConnections: 1))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            var findings: [DoctorFinding] = []
            let applied = try await PostgresMigrations.appliedVersions(client, logger: logger)
            let newest = applied.max() ?? 0
            if newest > PostgresMigrations.currentVersion {
                findings.append(
                    DoctorFinding(
                        .problem, "store",
                        "PostgreSQL at \(location.redacted): schema version \(newest) is newer than this Cumulus knows (\(PostgresMigrations.currentVersion))"
                    ))
            } else if newest < PostgresMigrations.currentVersion {
                findings.append(
                    DoctorFinding(
                        .warning, "store",
                        "PostgreSQL at \(location.redacted): schema version \(newest) of \(PostgresMigrations.currentVersion); the first instance to start migrates it"
                    ))
            } else {
                findings.append(DoctorFinding(.ok, "store", "PostgreSQL at \(location.redacted), schema version \(newest)"))
            }
            let rows = try await client.query("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint", logger: logger)
            for try await milliseconds in rows.decode(Int64.self) {
                findings.append(clock(skew: Date().timeIntervalSince1970 - Double(milliseconds) / 1000, against: "PostgreSQL's"))
            }
            return findings
        }
    }

    static func clock(skew: Double, against what: String) -> DoctorFinding {
        let text = String(format: "%+.1f s from %@ clock", skew, what)
        return abs(skew) > clockSkewWarning
            ? DoctorFinding(.warning, "clock", "\(text): run NTP; tokens, signed requests and link expiry compare times")
            : DoctorFinding(.ok, "clock", text)
    }

    /// The server as clients reach it: `/health` answers, its clock, and whether the links it hands out start with the
    /// URL given (a proxy that does not pass the public scheme and host makes share and asset links point inside).
    static func publicURL(_ url: String) async -> [DoctorFinding] {
        let base = url.hasSuffix("/") ? String(url.dropLast()) : url
        guard let healthURL = URL(string: base + "/health") else { return [DoctorFinding(.problem, "public URL", "\(url) is not a URL")] }
        do {
            var request = URLRequest(url: healthURL, timeoutInterval: 10)
            request.httpMethod = "GET"
            let (_, answer) = try await URLSession.shared.data(for: request)
            guard let response = answer as? HTTPURLResponse else { return [DoctorFinding(.problem, "public URL", "\(base)/health: no HTTP answer")] }
            guard response.statusCode == 200 else {
                return [DoctorFinding(.problem, "public URL", "\(base)/health answered \(response.statusCode); clients cannot sync")]
            }
            var findings = [DoctorFinding(.ok, "public URL", "\(base)/health answers")]
            if let date = response.value(forHTTPHeaderField: "Date"), let server = HTTPDateParsing.date(date) {
                findings.append(clock(skew: Date().timeIntervalSince(server), against: "the server's"))
            }
            if let seen = response.value(forHTTPHeaderField: "X-Cumulus-Public-URL") {
                if seen.lowercased() != base.lowercased() {
                    findings.append(
                        DoctorFinding(
                            .problem, "proxy",
                            "the server hands out links starting \(seen), not \(base): share and asset links will not open; "
                                + "start it with `cumulus serve --public-url \(base)`"))
                } else {
                    findings.append(DoctorFinding(.ok, "proxy", "links start with \(base)"))
                }
            } else {
                findings.append(DoctorFinding(.warning, "proxy", "\(base)/health is not a Cumulus server of this version (no X-Cumulus-Public-URL)"))
            }
            return findings
        } catch {
            return [DoctorFinding(.problem, "public URL", "\(base)/health cannot be reached: \(error)")]
        }
    }
}

/// Reads an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
enum HTTPDateParsing {
    static func date(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text)
    }
}
