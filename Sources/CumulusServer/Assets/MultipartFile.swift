import Foundation
import Synchronization

/// Takes the file out of a `multipart/form-data` body as it streams: the first part with a `filename` (or named
/// `file`), its bytes passed on as they arrive and the other parts dropped. Some clients upload an asset as a form
/// rather than as the raw body CloudKit documents; both are accepted.
///
/// At most the delimiter's length is held back between chunks (it may straddle them), and a part's headers are
/// bounded, so the body is never held whole.
struct MultipartFile {
    enum State {
        /// Before the first delimiter.
        case preamble
        /// A part's headers, until the blank line.
        case headers
        /// A part's bytes, passed on when it is the file.
        case body(isFile: Bool)
        /// After the closing delimiter.
        case done
    }

    enum Failure: Error, CustomStringConvertible {
        case malformed(String)

        var description: String {
            switch self {
            case .malformed(let reason): "multipart body: \(reason)"
            }
        }
    }

    /// `--boundary`, as it opens the body.
    let opening: [UInt8]
    /// `\r\n--boundary`, as it ends a part.
    let delimiter: [UInt8]
    private(set) var state = State.preamble
    private var pending: [UInt8] = []
    private(set) var foundFile = false
    static let maximumHeaderBytes = 16 * 1024

    /// The boundary of a `multipart/form-data` content type; `nil` for any other.
    static func boundary(contentType: String) -> String? {
        let parts = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard parts.first?.lowercased() == "multipart/form-data" else { return nil }
        for part in parts.dropFirst() where part.lowercased().hasPrefix("boundary=") {
            let value = part.dropFirst("boundary=".count)
            let boundary = value.hasPrefix("\"") && value.hasSuffix("\"") && value.count >= 2 ? value.dropFirst().dropLast() : value
            return boundary.isEmpty || boundary.count > 200 ? nil : String(boundary)
        }
        return nil
    }

    init(boundary: String) {
        opening = Array("--\(boundary)".utf8)
        delimiter = Array("\r\n--\(boundary)".utf8)
    }

    /// Reads a chunk of the body; answers the file's bytes in it.
    mutating func feed(_ chunk: [UInt8]) throws -> [UInt8] {
        pending += chunk
        var output: [UInt8] = []
        while true {
            switch state {
            case .preamble:
                guard let index = Self.find(opening, in: pending) else {
                    // Keep only what could still begin the delimiter.
                    if pending.count > opening.count { pending.removeFirst(pending.count - opening.count) }
                    return output
                }
                pending.removeFirst(index + opening.count)
                state = .headers
            case .headers:
                // After a delimiter: `--` ends the body, `\r\n` starts a part's headers.
                guard pending.count >= 2 else { return output }
                if pending[0] == UInt8(ascii: "-"), pending[1] == UInt8(ascii: "-") {
                    state = .done
                    continue
                }
                guard let end = Self.find(Array("\r\n\r\n".utf8), in: pending) else {
                    if pending.count > Self.maximumHeaderBytes { throw Failure.malformed("a part's headers are over 16 KiB") }
                    return output
                }
                let headers = String(decoding: pending[..<end], as: UTF8.self).lowercased()
                pending.removeFirst(end + 4)
                let isFile = !foundFile && (headers.contains("filename=") || headers.contains("name=\"file\""))
                if isFile { foundFile = true }
                state = .body(isFile: isFile)
            case .body(let isFile):
                if let index = Self.find(delimiter, in: pending) {
                    if isFile { output += pending[..<index] }
                    pending.removeFirst(index + delimiter.count)
                    state = .headers
                    continue
                }
                // Everything but a possible start of the delimiter can go.
                let safe = max(0, pending.count - (delimiter.count - 1))
                if isFile { output += pending[..<safe] }
                pending.removeFirst(safe)
                return output
            case .done:
                pending.removeAll()
                return output
            }
        }
    }

    /// The body ended: it must have closed with a file in it.
    func finish() throws {
        guard case .done = state else { throw Failure.malformed("it ends before its closing boundary") }
        guard foundFile else { throw Failure.malformed("no part carries a file (a filename, or the name \"file\")") }
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard !needle.isEmpty, haystack.count >= needle.count else { return nil }
        var index = 0
        let last = haystack.count - needle.count
        while index <= last {
            if haystack[index] == needle[0] {
                var matches = true
                for offset in 1..<needle.count where haystack[index + offset] != needle[offset] {
                    matches = false
                    break
                }
                if matches { return index }
            }
            index += 1
        }
        return nil
    }
}

/// A ``MultipartFile`` an upload's body chunks pass through, one at a time.
final class MultipartFileReader: Sendable {
    private let file: Mutex<MultipartFile>

    init(boundary: String) { file = Mutex(MultipartFile(boundary: boundary)) }

    func feed(_ chunk: [UInt8]) throws -> [UInt8] { try file.withLock { try $0.feed(chunk) } }

    func finish() throws { try file.withLock { try $0.finish() } }
}
