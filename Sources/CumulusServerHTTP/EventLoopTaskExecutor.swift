public import NIOCore

/// Runs a task's jobs on one event loop: a request's task is preferred onto its connection's loop, so that reading the
/// request, answering it and writing the answer happen on one thread.
///
/// Moving a request from the event loop to Swift's concurrency pool and its answer back costs two thread wake-ups,
/// which on these virtual machines are a large part of a small request's CPU (see `docs/BENCHMARKS.md`, the request
/// path). What a task awaits elsewhere (a store's connection, an actor) still runs there; the task comes back here.
/// Work that blocks a thread for long does not belong in a request's task on either executor.
public final class EventLoopTaskExecutor: TaskExecutor {
    public let eventLoop: any EventLoop

    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
