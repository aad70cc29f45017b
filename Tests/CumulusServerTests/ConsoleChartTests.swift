import CumulusCore
import CumulusModel
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import CumulusServer

/// The last hour, minute by minute: counts that start afresh each minute, forget what is older than an hour, and a
/// gauge carried through quiet minutes.
@Suite("Recent activity")
struct RecentActivityTests {
    @Test func minutesCountApartAndAnHourAgoIsForgotten() {
        let time = LockedTime(Date(timeIntervalSince1970: 1_795_000_020))
        let recent = RecentActivity(clock: WallClock { time.now })
        recent.add(.requests, 3)
        time.advance(by: 60)
        recent.add(.requests)
        recent.add(.recordsWritten, 5)
        var requests = recent.lastHour(.requests)
        #expect(requests.count == 60 && requests.suffix(2) == [3, 1] && requests.dropLast(2).allSatisfy { $0 == 0 }, "\(requests)")
        #expect(recent.lastHour(.recordsWritten).last == 5)
        // An hour on, the slot of the first minute serves a new one: its 3 are gone, not added to.
        time.advance(by: 59 * 60)
        recent.add(.requests, 2)
        requests = recent.lastHour(.requests)
        #expect(requests.reduce(0, +) == 3 && requests.last == 2 && requests.first == 1, "\(requests)")
        time.advance(by: 2 * 3600)
        #expect(recent.lastHour(.requests).allSatisfy { $0 == 0 })
    }

    @Test func connectionsOpenAreCarriedThroughQuietMinutes() {
        let time = LockedTime(Date(timeIntervalSince1970: 1_795_000_020))
        let recent = RecentActivity(clock: WallClock { time.now })
        recent.pushConnections(1)
        recent.pushConnections(1)
        recent.pushConnections(1)
        recent.pushConnections(-1)
        time.advance(by: 5 * 60)
        // Three open at most in the first minute, two open through the quiet minutes after it.
        var open = recent.lastHour(.pushConnections)
        #expect(open.suffix(6) == [3, 2, 2, 2, 2, 2], "\(open)")
        recent.pushConnections(-1)
        recent.pushConnections(-1)
        open = recent.lastHour(.pushConnections)
        #expect(open.last == 2 && open.first == 0, "the minute's highest, and none open before the first opened: \(open)")
        time.advance(by: 60)
        #expect(recent.lastHour(.pushConnections).last == 0)
    }
}

/// The console's overview draws this instance's last hour: requests, records written, push, and devices that had to
/// catch up, as SVG the server draws (checked in a real browser, where the console's policy allows no script).
@Suite("Console charts", .timeLimit(.minutes(10)))
struct ConsoleChartTests {
    @Test func theOverviewChartsTheLastHourInTheBrowser() async throws {
        let time = LockedTime(Date(timeIntervalSince1970: 1_795_000_000))
        let clock = WallClock { time.now }
        let world = try await TestWorld.make(clock: clock)
        let metrics = ServerMetrics(recent: RecentActivity(clock: clock))
        let application = buildApplication(
            configuration: world.configuration, store: world.store, logger: .testServer, clock: clock, metrics: metrics,
            eventLoopGroup: .shared(world.eventLoop.group))
        try await application.test(.live) { client in
            try await CloudKitTestClient.patient(client, apiToken: world.apiToken, on: world.eventLoop.group) { api in
                let phone: HTTPFields = [HTTPField.Name("X-Cumulus-Device")!: "phone"]
                let tablet: HTTPFields = [HTTPField.Name("X-Cumulus-Device")!: "tablet"]
                try await api.createZone("Trips", as: world.alice)
                // Forty minutes of a day: a few writes a minute from the phone, the tablet fetching every fifth minute
                // (behind), the phone after its own writes (in step).
                var written = 0
                for minute in 0..<40 {
                    let count = 1 + (minute * 7) % 5
                    let operations = (0..<count).map { operation("create", "r\(minute)-\($0)") }
                    let saved = try await api.send(
                        "records/modify", as: .user(world.alice),
                        body: #"{"zoneID":{"zoneName":"Trips"},"operations":[\#(operations.joined(separator: ","))]}"#, headers: phone)
                    #expect(saved.records.count == count, "\(saved.json)")
                    written += count
                    if minute % 5 == 4 {
                        #expect(try await api.send("changes/database", as: .user(world.alice), body: "{}", headers: tablet).status == 200)
                        let zone = #"{"zones":[{"zoneID":{"zoneName":"Trips"}}]}"#
                        #expect(try await api.send("changes/zone", as: .user(world.alice), body: zone, headers: tablet).status == 200)
                    }
                    if minute == 39 {
                        // The phone catches up, then asks again from its token with nothing new: in step.
                        let caughtUp = try await api.send("changes/database", as: .user(world.alice), body: "{}", headers: phone)
                        let token = try #require(caughtUp.json["syncToken"]?.stringValue)
                        let again = try await api.send(
                            "changes/database", as: .user(world.alice), body: #"{"syncToken":"\#(token)"}"#, headers: phone)
                        #expect(again.status == 200)
                    }
                    time.advance(by: 60)
                }
                #expect(metrics.recent.lastHour(.recordsWritten).reduce(0, +) == written)
                #expect(metrics.recent.lastHour(.fetchesBehind).reduce(0, +) >= 8, "the tablet's fetches")
                #expect(metrics.recent.lastHour(.fetchesInStep).reduce(0, +) >= 1, "the phone's second fetch")

                let token = try await world.accounts.createConsoleSignIn(container: TestWorld.container, logger: Logger(label: "test"))
                let link = "http://127.0.0.1:\(client.port!)/console/signin?token=\(token)&next=/console/development"
                let png = FileManager.default.temporaryDirectory.appendingPathComponent("cumulus-charts-\(UUID().uuidString).png")
                _ = try await LinkPageBrowserTests.runChromium(["--window-size=900,780", "--screenshot=\(png.path)", link])
                let image = try Data(contentsOf: png)
                #expect(image.starts(with: [0x89, 0x50, 0x4E, 0x47]) && image.count > 10_000)
                if let directory = ProcessInfo.processInfo.environment["CUMULUS_CONSOLE_SCREENSHOTS"] {
                    try image.write(to: URL(fileURLWithPath: directory).appendingPathComponent("console-overview.png"))
                }
                let token2 = try await world.accounts.createConsoleSignIn(container: TestWorld.container, logger: Logger(label: "test"))
                let page = try await LinkPageBrowserTests.runChromium([
                    "--dump-dom", "http://127.0.0.1:\(client.port!)/console/signin?token=\(token2)&next=/console/development",
                ])
                func chart(_ id: String) throws -> String {
                    let start = try #require(page.range(of: #"<figure class="chart" id="chart-\#(id)">"#), "no chart \(id): \(page)")
                    let end = try #require(page.range(of: "</figure>", range: start.upperBound..<page.endIndex))
                    return String(page[start.lowerBound..<end.upperBound])
                }
                let writes = try chart("writes")
                #expect(writes.contains("\(written) in the hour"), "\(writes)")
                // A bar for each of the forty minutes that wrote, none for the twenty before them.
                #expect(writes.components(separatedBy: "<rect ").count - 1 == 40, "\(writes)")
                #expect(try chart("requests").contains("in the hour"))
                #expect(try chart("push-connections").contains("now 0"))
                let devices = try chart("devices")
                #expect(devices.contains("behind and") && devices.contains("already in step in the hour"), "\(devices)")
                #expect(devices.contains(#"class="upper""#), "the tablet's fetches behind are drawn: \(devices)")
                #expect(!page.contains("<script"), "charts without a script")
            }
        }
    }
}
