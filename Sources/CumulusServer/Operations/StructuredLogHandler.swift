import CumulusModel
import Foundation
public import Logging
import Synchronization

/// Log lines for machines, one per line: logfmt (`time=… level=info label=cumulus message=request status=200`) or JSON
/// (`{"time":…,"level":"info","label":"cumulus","message":"request","status":"200"}`), for `cumulus serve
/// --log-format`.
///
/// ```swift
/// LoggingSystem.bootstrap { StructuredLogHandler(label: $0, format: .json) }
/// ```
public struct StructuredLogHandler: LogHandler {
    /// How a line is written.
    public enum Format: String, Sendable, CaseIterable {
        /// `key=value` pairs; values with spaces, quotes or `=` are quoted.
        case logfmt
        /// One JSON object per line.
        case json
    }

    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    let label: String
    let format: Format
    let write: @Sendable (String) -> Void

    /// - Parameters:
    ///   - label: The logger's label, written as `label`.
    ///   - format: logfmt or JSON.
    ///   - write: Where a finished line (with its newline) goes; standard error by default, so standard output keeps
    ///     only a command's result.
    public init(label: String, format: Format, write: @escaping @Sendable (String) -> Void = StructuredLogHandler.standardError) {
        self.label = label
        self.format = format
        self.write = write
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields = metadata
        if let explicit = event.metadata { fields.merge(explicit) { $1 } }
        write(Self.line(time: Date(), level: event.level, label: label, message: "\(event.message)", fields: fields, format: format))
    }

    /// One line, fields sorted by key after `time`, `level`, `label` and `message`.
    static func line(time: Date, level: Logger.Level, label: String, message: String, fields: Logger.Metadata, format: Format) -> String {
        let timestamp = time.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
        let pairs =
            [("time", timestamp), ("level", level.rawValue), ("label", label), ("message", message)]
            + fields.sorted { $0.key < $1.key }.map { ($0.key, "\($0.value)") }
        switch format {
        case .logfmt:
            return pairs.map { "\($0.0)=\(logfmtValue($0.1))" }.joined(separator: " ") + "\n"
        case .json:
            var writer = JSONWriter()
            writer.beginObject()
            for (key, value) in pairs {
                writer.key(key)
                writer.string(value)
            }
            writer.endObject()
            return String(decoding: writer.bytes, as: UTF8.self) + "\n"
        }
    }

    static func logfmtValue(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.utf8.contains { $0 <= 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "=") || $0 == 0x7F }
        guard needsQuotes else { return value }
        var quoted = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": quoted += "\\\""
            case "\\": quoted += "\\\\"
            case "\n": quoted += "\\n"
            case "\r": quoted += "\\r"
            case "\t": quoted += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    quoted += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
                } else {
                    quoted.unicodeScalars.append(scalar)
                }
            }
        }
        return quoted + "\""
    }

    private static let output = Mutex(())

    /// Writes a line to standard error, whole: lines from concurrent requests never interleave.
    public static let standardError: @Sendable (String) -> Void = { line in
        output.withLock { _ in FileHandle.standardError.write(Data(line.utf8)) }
    }
}
