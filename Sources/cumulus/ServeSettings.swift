import ArgumentParser
import CumulusModel
import Foundation

/// `cumulus serve`'s settings, in one list: each comes from its flag, else its environment variable (`CUMULUS_` and the
/// flag's name in capitals, `-` as `_`), else the configuration file (`--config FILE` or `$CUMULUS_CONFIG`: a JSON
/// object whose keys are the flags' names), else its default. `docs/OPERATIONS.md` ("Settings") lists them.
///
/// The file is checked whole before anything starts: a key that names no setting, or a value of the wrong type, is an
/// error that names it, so a misspelled setting never passes silently. (apple/swift-configuration reads the same three
/// sources, but answers `nil` for a value it cannot convert, and cannot tell an unknown key: see `docs/DECISIONS.md`.)
struct ServeSettings {
    enum Kind: String {
        case text, integer, number, flag
    }

    /// The settings a file may hold, by flag name: every `cumulus serve` option, and the store's.
    static let kinds: [String: Kind] = [
        "host": .text, "port": .integer, "public-url": .text, "apple-app-site-association": .text, "app-store-id": .text,
        "trust-forwarded-for": .flag, "push-recheck-interval": .integer, "max-push-connections": .integer,
        "accept-unhashed-large-bodies": .flag, "max-connections-per-address": .integer, "requests-per-second": .number,
        "metrics-port": .integer, "log-level": .text, "log-format": .text, "assets": .text, "max-asset-size": .integer, "max-zones": .integer,
        "history-retention": .text, "database": .text, "data": .text, "database-connections": .integer,
        "read-replica": .text, "fan-out": .text, "shard": .text,
    ]

    /// A setting that lists values (`read-replica`, `shard`): comma-separated in a variable or the file.
    static func list(_ text: String?) -> [String] {
        (text ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// The environment variable of a setting.
    static func variable(_ name: String) -> String { "CUMULUS_" + name.uppercased().replacingOccurrences(of: "-", with: "_") }

    private let file: [String: JSONValue]
    private let environment: [String: String]

    /// Reads and checks the file at `path` (none: settings come from flags, the environment and defaults).
    init(file path: String?, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        self.environment = environment
        guard let path = path ?? environment["CUMULUS_CONFIG"] else {
            file = [:]
            return
        }
        guard let data = FileManager.default.contents(atPath: path) else { throw ValidationError("--config: cannot read \(path)") }
        let object: [String: JSONValue]
        do {
            guard let parsed = try JSONValue(parsing: Array(data)).objectValue else {
                throw ValidationError("--config: \(path) is not a JSON object")
            }
            object = parsed
        } catch let error as ValidationError {
            throw error
        } catch {
            throw ValidationError("--config: \(path) is not JSON: \(error)")
        }
        for (key, value) in object {
            guard let kind = Self.kinds[key] else {
                throw ValidationError("--config: \(path): \(key) is not a setting (the settings are the flags of `cumulus serve`, without --)")
            }
            let fits =
                switch kind {
                case .text: value.stringValue != nil
                case .integer: Self.number(value).flatMap { Int($0) } != nil
                case .number: Self.number(value).flatMap { Double($0) } != nil
                case .flag: Self.bool(value) != nil
                }
            guard fits else { throw ValidationError("--config: \(path): \(key) must be \(Self.description(kind))") }
        }
        file = object
    }

    private static func description(_ kind: Kind) -> String {
        switch kind {
        case .text: "a string"
        case .integer: "an integer"
        case .number: "a number"
        case .flag: "true or false"
        }
    }

    /// From the environment, else the file, as text (a number as written).
    func text(_ name: String) -> String? {
        environmentText(name) ?? fileText(name)
    }

    func environmentText(_ name: String) -> String? { environment[Self.variable(name)] }

    func fileText(_ name: String) -> String? {
        guard let value = file[name] else { return nil }
        return value.stringValue ?? Self.number(value)
    }

    private static func number(_ value: JSONValue) -> String? {
        if case .number(let text) = value { return text } else { return nil }
    }

    private static func bool(_ value: JSONValue) -> Bool? {
        if case .bool(let flag) = value { return flag } else { return nil }
    }

    /// A flag set by the environment (`1` or `true`) or the file (`true`).
    func flag(_ name: String) -> Bool {
        if let text = environmentText(name) { return text == "1" || text.lowercased() == "true" }
        return file[name].flatMap(Self.bool) ?? false
    }
}
