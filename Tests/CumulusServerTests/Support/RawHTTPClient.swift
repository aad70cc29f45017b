import Foundation
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A deliberately plain HTTP/1.1 client over a blocking socket, as Python's `http.client` behaves: it writes the whole
/// request (head and body) before reading a single byte of the answer. Used to check how the server treats such
/// clients when it refuses a request early.
enum RawHTTPClient {
    struct Exchange: Sendable {
        /// Everything read until the server closed the connection (or the read timed out).
        var response: String
        /// Whether the server closed the connection (end of stream) rather than the read timing out.
        var closedByServer: Bool
        /// Seconds from the last byte written to the end of the answer.
        var secondsToAnswer: Double
        /// Whether writing the request failed (the server reset the connection mid-request).
        var writeFailed: Bool

        var statusCode: Int? {
            let parts = response.split(separator: " ", maxSplits: 2)
            return parts.count > 1 ? Int(parts[1]) : nil
        }
    }

    /// Sends `head` and `body` in full, then reads until the server closes the connection or `readTimeout` passes.
    /// With `halfClose`, the client then shuts down its sending side, as a client with nothing more to ask does.
    /// With `source`, the connection comes from that loopback address (any of 127.0.0.0/8), as another client would.
    static func exchange(
        port: Int, head: String, body: [UInt8], readTimeout: Double = 10, halfClose: Bool = false, source: String? = nil
    ) async throws -> Exchange {
        try await onThread {
            try blockingExchange(port: port, head: head, body: body, readTimeout: readTimeout, halfClose: halfClose, source: source)
        }
    }

    /// Runs blocking socket work on a thread of its own, so it never holds a Swift concurrency thread the server needs.
    private static func onThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try work() }) }.start()
        }
    }

    /// Writes `head` and then body chunks for as long as the server accepts them, up to `maximumSeconds`; returns how
    /// long the server let it write before closing the connection, or `nil` if it never did.
    static func secondsUntilClosed(port: Int, head: String, chunk: [UInt8], maximumSeconds: Double) async throws -> Double? {
        try await onThread {
            let socket = try connect(port: port)
            defer { close(socket) }
            let start = Date()
            guard write(socket, Array(head.utf8)) else { return 0 }
            while Date().timeIntervalSince(start) < maximumSeconds {
                guard write(socket, chunk) else { return Date().timeIntervalSince(start) }
            }
            return nil
        }
    }

    /// Writes `head`, then one `trickle` every `interval` seconds, and answers how long the server let the connection
    /// live before closing it, or `nil` if it still lived after `maximumSeconds`.
    static func secondsUntilClosed(port: Int, head: String, trickle: [UInt8], every interval: Double, maximumSeconds: Double) async throws
        -> Double?
    {
        try await onThread {
            let socket = try connect(port: port)
            defer { close(socket) }
            let start = Date()
            var timeout = timeval(tv_sec: 0, tv_usec: Int(interval * 1_000_000))
            setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            guard write(socket, Array(head.utf8)) else { return 0 }
            var buffer = [UInt8](repeating: 0, count: 4_096)
            while Date().timeIntervalSince(start) < maximumSeconds {
                let count = recv(socket, &buffer, buffer.count, 0)
                if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { return Date().timeIntervalSince(start) }
                if !trickle.isEmpty, !write(socket, trickle) { return Date().timeIntervalSince(start) }
            }
            return nil
        }
    }

    /// A connection that sends nothing, held until ``closeConnection(_:)``.
    static func openConnection(port: Int) throws -> Int32 { try connect(port: port) }

    /// Which of `sockets` (from ``openConnection(port:)``) the server has closed: waits until at least `atLeast` are
    /// closed or `seconds` have passed, then a further `settle` seconds for any more, so a loaded machine that is slow
    /// to close is not mistaken for one that never closes.
    static func closedByServer(_ sockets: [Int32], atLeast: Int, waiting seconds: Double, settle: Double = 0.5) async throws -> Set<Int32> {
        try await onThread { blockingClosedByServer(sockets, atLeast: atLeast, waiting: seconds, settle: settle) }
    }

    private static func blockingClosedByServer(_ sockets: [Int32], atLeast: Int, waiting seconds: Double, settle: Double) -> Set<Int32> {
        var closed: Set<Int32> = []
        func look(until deadline: Date, enough: Int) {
            while closed.count < enough, Date() < deadline {
                var descriptors = sockets.filter { !closed.contains($0) }.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
                guard !descriptors.isEmpty else { return }
                let milliseconds = Int32(max(0, deadline.timeIntervalSinceNow) * 1_000)
                guard poll(&descriptors, nfds_t(descriptors.count), milliseconds) > 0 else { continue }
                for descriptor in descriptors where descriptor.revents != 0 {
                    var byte: UInt8 = 0
                    let count = recv(descriptor.fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
                    if count == 0 || (count < 0 && errno == ECONNRESET) { closed.insert(descriptor.fd) }
                }
            }
        }
        look(until: Date(timeIntervalSinceNow: seconds), enough: atLeast)
        look(until: Date(timeIntervalSinceNow: settle), enough: sockets.count)
        return closed
    }

    /// Closes a connection from ``openConnection(port:)``.
    static func closeConnection(_ socket: Int32) { close(socket) }

    private static func blockingExchange(port: Int, head: String, body: [UInt8], readTimeout: Double, halfClose: Bool, source: String?)
        throws -> Exchange
    {
        let socket = try connect(port: port, from: source)
        defer { close(socket) }
        let writeFailed = !write(socket, Array(head.utf8) + body)
        if halfClose { shutdown(socket, Int32(SHUT_WR)) }
        let wrote = Date()
        var timeout = timeval(tv_sec: Int(readTimeout), tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var closedByServer = false
        while true {
            let count = recv(socket, &buffer, buffer.count, 0)
            if count > 0 {
                received += buffer[0..<count]
            } else if count < 0, errno == EINTR {
                // A signal for the process (another test's child exiting) landed on this thread: read on.
                continue
            } else {
                closedByServer = count == 0 || errno == ECONNRESET
                break
            }
        }
        return Exchange(
            response: String(decoding: received, as: UTF8.self), closedByServer: closedByServer,
            secondsToAnswer: Date().timeIntervalSince(wrote), writeFailed: writeFailed)
    }

    private static func connect(port: Int, from source: String? = nil) throws -> Int32 {
        #if canImport(Glibc)
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let socket = Darwin.socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard socket >= 0 else { throw POSIXError(.EIO) }
        if let source {
            let bound = try SocketAddress(ipAddress: source, port: 0).withSockAddr { pointer, size in
                bind(socket, pointer, socklen_t(size))
            }
            guard bound == 0 else {
                close(socket)
                throw POSIXError(.EADDRNOTAVAIL)
            }
        }
        // NIO's address spells the sockaddr, whose C struct's members another module of the build may claim.
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: port)
        let result = address.withSockAddr { pointer, size in
            #if canImport(Glibc)
            Glibc.connect(socket, pointer, socklen_t(size))
            #else
            Darwin.connect(socket, pointer, socklen_t(size))
            #endif
        }
        guard result == 0 else {
            close(socket)
            throw POSIXError(.ECONNREFUSED)
        }
        var noSignal: Int32 = 1
        #if canImport(Darwin)
        setsockopt(socket, SOL_SOCKET, SO_NOSIGPIPE, &noSignal, socklen_t(MemoryLayout<Int32>.size))
        #else
        _ = noSignal
        #endif
        return socket
    }

    /// Writes everything; `false` if the connection broke first.
    private static func write(_ socket: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { pointer in
                #if canImport(Glibc)
                send(socket, pointer.baseAddress, pointer.count, Int32(MSG_NOSIGNAL))
                #else
                send(socket, pointer.baseAddress, pointer.count, 0)
                #endif
            }
            if written < 0, errno == EINTR { continue }
            if written <= 0 { return false }
            offset += written
        }
        return true
    }
}
