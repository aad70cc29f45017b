import AsyncHTTPClient
import CumulusCore
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
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
            // The next step names the console first: the world has containers.
            #expect(links == ["/console", "/console", "/openapi.json", "/health", "/metrics"], "\(links)")
            #expect(page.contains(#"id="store-state"><span class="dot"></span>The store answers."#), "\(page)")
            #expect(page.contains("Sign in to <a href=\"/console\">the console</a>") && !page.contains("containers create"))
            #expect(!page.contains(TestWorld.container), "a stranger learns no container's name")
            for link in links {
                var request = HTTPClientRequest(url: base + link)
                request.method = .GET
                let answer = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                // The console, without a session, answers its page that says how to sign in.
                #expect(answer.status.code == (link == "/console" ? 401 : 200), "\(link) answered \(answer.status)")
            }

            // As a browser shows it.
            let dom = try await LinkPageBrowserTests.runChromium(["--dump-dom", base + "/"])
            #expect(dom.contains("Cumulus</h1>") && dom.contains(#"id="serving""#))
            #expect(dom.contains("href=\"/console\""))
        }
    }

    /// On a server with no container yet, the page gives the commands that make one, and says so once one exists.
    @Test func aNewServerIsToldToMakeAContainer() async throws {
        let world = try await TestWorld.make()
        for container in [TestWorld.container, TestWorld.otherContainer] {
            try await world.accounts.deleteContainer(container, logger: .init(label: "test"))
        }
        try await world.application().test(.live) { client in
            let base = "http://127.0.0.1:\(try #require(client.port))"
            let page = try await LinkPageBrowserTests.runChromium(["--dump-dom", base + "/"])
            #expect(page.contains("Next: make a container") && page.contains("cumulus containers create iCloud.com.example.app"), "\(page)")
            #expect(page.contains("The store answers."))
        }
        // Another instance over the same store, once a container exists (an instance reads the store at most every 5 s).
        try await world.accounts.createContainer(TestWorld.container, logger: .init(label: "test"))
        try await world.application().test(.live) { client in
            let response = try await HTTPClient.shared.execute(
                HTTPClientRequest(url: "http://127.0.0.1:\(try #require(client.port))/"), timeout: .seconds(30))
            let page = String(buffer: try await response.body.collect(upTo: 1 << 20))
            #expect(!page.contains("Next: make a container") && page.contains(#"id="next-step""#), "\(page)")
        }
    }

    @Test func aStoreThatDoesNotAnswerIsShownAsAProblem() {
        let page = LandingPage.html(metricsPort: nil, state: .init(startedAt: 0, now: 1, storeAnswers: false, hasContainers: false))
        #expect(page.contains(#"<li class="problem" id="store-state">"#) && page.contains("cumulus doctor"))
    }

    @Test func withMetricsOnTheirOwnPortThePageSaysSoInsteadOfLinkingThem() {
        let page = LandingPage.html(metricsPort: 9464, state: .init(startedAt: 0, now: 1, storeAnswers: true, hasContainers: true))
        #expect(!Self.hrefs(in: page).contains("/metrics"))
        #expect(page.contains("port 9464"))
    }
}
