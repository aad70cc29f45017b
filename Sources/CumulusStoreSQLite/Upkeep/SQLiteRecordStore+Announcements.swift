public import CumulusStore
import Foundation
public import Logging

extension SQLiteRecordStore: CommandAnnouncing {
    /// Where commands leave their keys for the running server: a file beside the database, one key a line, appended.
    /// The server reads what was added since it started; a few hundred bytes a restore, so it is never trimmed.
    var announcementsPath: String? { path.map { $0 + "-announcements" } }

    public func announceFromCommand(_ keys: Set<String>, logger: Logger) async {
        guard let file = announcementsPath, !keys.isEmpty else { return }
        // One append of the whole announcement: O_APPEND writes of a few bytes land whole, after any other's.
        let text = keys.sorted().filter { !$0.contains("\n") }.map { $0 + "\n" }.joined()
        let descriptor = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            logger.warning("could not tell the server of the change", metadata: ["cumulus.file": "\(file)", "error": "\(errno)"])
            return
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: Data(text.utf8))
        } catch {
            logger.warning("could not tell the server of the change", metadata: ["cumulus.file": "\(file)", "error": "\(error)"])
        }
    }

    public func listenForCommands(_ changed: @escaping @Sendable (Set<String>) -> Void) async {
        guard let file = announcementsPath else { return }
        // What commands said before this server started concerns no one waiting now.
        var offset = Self.size(of: file)
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(250))
            let size = Self.size(of: file)
            if size < offset { offset = 0 }
            guard size > offset, let handle = FileHandle(forReadingAtPath: file) else { continue }
            defer { try? handle.close() }
            guard (try? handle.seek(toOffset: offset)) != nil, let data = try? handle.read(upToCount: Int(size - offset)) else { continue }
            // Up to the last line break: a line being written is read whole next time.
            guard let end = data.lastIndex(of: UInt8(ascii: "\n")) else { continue }
            offset += UInt64(end - data.startIndex + 1)
            let keys = Set(data[data.startIndex...end].split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) })
            if !keys.isEmpty { changed(keys) }
        }
    }

    private static func size(of file: String) -> UInt64 {
        ((try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? NSNumber)?.uint64Value ?? 0
    }
}
