import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, for the tests that run the `cumulus` binary and Chromium.
///
/// Not Foundation's `Process`: on Linux its `run()` reads `/proc/self/fd` past the end of a directory entry and now and
/// then crashes the whole test process (swift-corelibs-foundation#5472, fixed after Swift 6.3.1), the more likely the
/// more files are open, and the suite keeps hundreds open (every SQLite test store is a file).
final class ChildProcess: Sendable {
    /// Where a standard stream of the child goes.
    enum Stream {
        /// A pipe the test reads (standard output or error) or writes (standard input).
        case pipe
        /// Discarded, or (for standard input) empty.
        case null
        /// Appended to this file.
        case file(String)
    }

    let pid: pid_t
    /// The test's end of each piped stream.
    let standardInput: FileHandle?
    let standardOutput: FileHandle?
    let standardError: FileHandle?
    private let status = Mutex<Int32?>(nil)

    /// Held from making a child's pipes to spawning it: a pipe is made, then marked close-on-exec (`pipe2` is not
    /// visible to Swift here), and a child spawned in between would keep its write end open, so that reading the other
    /// child's output to its end would wait for this one to exit.
    private static let spawning = Mutex(())

    /// Starts `executable` with `arguments` and this process's environment.
    init(_ executable: String, _ arguments: [String], input: Stream = .null, output: Stream = .pipe, error: Stream = .null) throws {
        (pid, standardInput, standardOutput, standardError) = try Self.spawning.withLock { _ in
            try Self.spawn(executable, arguments, input: input, output: output, error: error)
        }
    }

    private static func spawn(_ executable: String, _ arguments: [String], input: Stream, output: Stream, error: Stream) throws
        -> (pid_t, FileHandle?, FileHandle?, FileHandle?)
    {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var ours: [Int32: FileHandle] = [:]
        var theirs: [Int32] = []
        defer { for descriptor in theirs { close(descriptor) } }
        for (target, stream) in [(Int32(0), input), (1, output), (2, error)] {
            switch stream {
            case .pipe:
                var descriptors: [Int32] = [0, 0]
                guard pipe(&descriptors) == 0 else { throw POSIXError(.EMFILE) }
                // Close-on-exec: the child gets only what the dup2 below gives it; other children get none of it.
                for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
                let (child, test) = target == 0 ? (descriptors[0], descriptors[1]) : (descriptors[1], descriptors[0])
                theirs.append(child)
                ours[target] = FileHandle(fileDescriptor: test, closeOnDealloc: true)
                posix_spawn_file_actions_adddup2(&actions, child, target)
            case .null:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, target, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            }
        }
        // Nothing else of this process reaches the child: a server's connection it inherited would stay open in the
        // child after the server closed it, and its client would never see the close. (glibc's closefrom action; Swift
        // does not see its declaration, so it is looked up by name.)
        if let closeFrom = Self.addCloseFrom {
            _ = closeFrom(&actions, 3)
        } else {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
                if let descriptor = Int32(name), descriptor > 2 { posix_spawn_file_actions_addclose(&actions, descriptor) }
            }
        }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .ENOENT) }
        return (pid, ours[0], ours[1], ours[2])
    }

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private static let addCloseFrom: AddCloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map {
        unsafeBitCast($0, to: AddCloseFrom.self)
    }

    /// Sends a signal.
    func signal(_ signal: Int32) {
        if status.withLock({ $0 }) == nil { kill(pid, signal) }
    }

    /// Waits for the child to end: its exit status, or the number of the signal that ended it (as `Process` answers).
    @discardableResult
    func wait() -> Int32 {
        if let status = status.withLock({ $0 }) { return status }
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0, errno == EINTR {}
        let ended = raw & 0x7f == 0 ? (raw >> 8) & 0xff : raw & 0x7f
        status.withLock { $0 = ended }
        return ended
    }

    /// The status ``wait()`` found; `nil` before.
    var exitStatus: Int32? { status.withLock { $0 } }
}
