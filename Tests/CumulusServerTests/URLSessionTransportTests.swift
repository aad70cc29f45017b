import CumulusClient
import Foundation
import HummingbirdTesting
import Testing

/// The URLSession transport against a real server on loopback.
@Suite("URLSession transport", .timeLimit(.minutes(10)))
struct URLSessionTransportTests {
    /// FoundationNetworking deadlocks a request whose task is cancelled just as its answer arrives (two threads, each
    /// waiting for what the other holds); the transport never lets a cancellation reach it. A deadlock shows as the time
    /// limit, generous enough for 400 round trips on a loaded machine (over a minute at load 11).
    @Test(.timeLimit(.minutes(5)))
    func requestsCancelledAsTheirAnswersArriveNeverHang() async throws {
        let world = try await TestWorld.make()
        try await world.application().test(.live) { client in
            let transport = URLSessionTransport()
            let request = TransportRequest(method: "GET", url: URL(string: "http://127.0.0.1:\(client.port!)/health")!)
            var answered = 0
            for attempt in 0..<400 {
                let send = Task { try await transport.send(request) }
                // Cancellations spread over a request's life, so that some meet its answer arriving.
                try await Task.sleep(for: .microseconds(attempt % 40 * 25))
                send.cancel()
                if case .success(let response) = await send.result {
                    #expect(response.status == 200)
                    answered += 1
                }
            }
            // A request that is not cancelled is answered as before.
            #expect(try await transport.send(request).status == 200)
            #expect(answered < 400)
        }
    }
}
