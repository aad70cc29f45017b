import AsyncHTTPClient
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOHTTP1
import Testing

@testable import CumulusServer

/// `GET /` is a page that says what the server is and links what a newcomer looks for, each link answering.
@Suite("The landing page", .serialized, .timeLimit(.minutes(10)))
struct LandingPageTests {
    static func hrefs(in page: String) -> [String] {
        page.components(separatedBy: "href=\"").dropFirst().compactMap { $0.split(separator: "\"").first.map(String.init) }
    }

    @Test func theRootLinksTheConsoleTheDescriptionHealthAndMetricsAndEachAnswers() async throws {
        let world = try await TestWorld.make()
        try await world.application().test(.live) { client in
            let base = "http://127.0.0.1:\(try #require(client.port))"
            let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: base + "/"), timeout: .seconds(30))
            #expect(response.status == .ok)
            #expect(response.headers["Content-Type"].first == "text/html; charset=utf-8")
            #expect(response.headers["Content-Security-Policy"].first?.hasPrefix("default-src 'none'") == true)
            let page = String(buffer: try await response.body.collect(upTo: 1 << 20))
            let links = Self.hrefs(in: page)
            #expect(links == ["/console", "/openapi.json", "/health", "/metrics"], "\(links)")
            for link in links {
                var request = HTTPClientRequest(url: base + link)
                request.method = .GET
                let answer = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                // The console, without a session, answers its page that says how to sign in.
                #expect(answer.status.code == (link == "/console" ? 401 : 200), "\(link) answered \(answer.status)")
            }

            // As a browser shows it.
            let dom = try await LinkPageBrowserTests.runChromium(["--dump-dom", base + "/"])
            #expect(dom.contains("<h1>Cumulus</h1>"))
            #expect(dom.contains("href=\"/console\""))
        }
    }

    @Test func withMetricsOnTheirOwnPortThePageSaysSoInsteadOfLinkingThem() {
        let page = LandingPage.html(metricsPort: 9464)
        #expect(!Self.hrefs(in: page).contains("/metrics"))
        #expect(page.contains("port 9464"))
    }
}
