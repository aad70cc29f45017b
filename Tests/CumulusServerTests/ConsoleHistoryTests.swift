import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HummingbirdTesting
import Logging
import NIOHTTP1
import Testing

/// The console's zone page (issue 37): records deleted within the history window, each brought back with a button, and
/// a zone restored to a moment, first as a dry run. The page is read in chromium; the forms are posted as a browser does.
@Suite("Web console: history", .serialized, .timeLimit(.minutes(10)))
struct ConsoleHistoryTests {
    let logger = Logger(label: "test")

    @Test(arguments: TestStore.all)
    func aDeletedRecordIsBroughtBackAndTheZoneRestoredAfterADryRun(_ store: TestStore) async throws {
        let time = ZoneRestoreTests.ManualClock()
        let world = try await TestWorld.make(store: store, clock: time.clock)
        let database = DatabaseRef(
            container: TestWorld.container, environment: .development, scope: .private, ownerRecordName: world.alice.userRecordName)
        @Sendable func record(_ name: String) async throws -> StoredRecord? {
            try await world.store.records(named: [name], zoneName: "Lists", in: database, access: nil, logger: logger)[name]
        }
        try await world.application().test(.live) { client in
            try await CloudKitTestClient.patient(client, apiToken: world.apiToken, on: world.eventLoop.group) { api in
                _ = try await api.createZone("Lists", as: world.alice)
                _ = try await api.modify(
                    [
                        operation("create", "list", type: "List", fields: #"{"name":{"value":"Weekend"}}"#),
                        operation("create", "item", type: "Item", fields: #"{"text":{"value":"<b>milk</b>"}}"#),
                    ], zone: "Lists", as: .user(world.alice))
                // The moment restored to below: two minutes before the end, between these writes.
                time.advance(seconds: 120)
                _ = try await api.modify(
                    [
                        operation("forceDelete", "item", type: nil),
                        operation("forceReplace", "list", type: "List", fields: #"{"name":{"value":"Sunday"}}"#),
                    ], zone: "Lists", as: .user(world.alice))
                time.advance(seconds: 60)
            }
            let base = "http://127.0.0.1:\(client.port!)"
            let path = "/console/development/zones/private/\(world.alice.userRecordName)/Lists"
            // In a browser: the deleted record with its button, and the restore form.
            let token = try await world.accounts.createConsoleSignIn(container: TestWorld.container, logger: logger)
            let page = try await LinkPageBrowserTests.runChromium(["--dump-dom", "\(base)/console/signin?token=\(token)&next=\(path)"])
            #expect(page.contains(#"id="deleted""#) && page.contains("<code>item</code>") && page.contains(#"id="restore""#), "\(page)")
            #expect(page.contains(#"type="datetime-local""#))

            let browser = ConsoleTests.Browser(base: base)
            let cookie = try await browser.signIn(world)
            let csrf = try ConsoleTests().csrf(in: try await browser.get(path, cookie: cookie).body)
            let moment = HistoryMoment.text(time.now - 120_000)

            // A dry run lists what a restore would undo, and changes nothing.
            let dry = try await browser.post(path, cookie: cookie, form: ["csrf": csrf, "action": "restore", "to": moment, "dryRun": "1"])
            #expect(dry.status == 200 && dry.body.contains(#"id="differences""#), "\(dry.body)")
            #expect(dry.body.contains("1 changed, 1 deleted and 0 created since"))
            #expect(try await record("item") == nil)
            // Without the form's token, nothing happens.
            #expect(try await browser.post(path, cookie: cookie, form: ["action": "restore", "to": moment]).status == 403)

            // The restore, then its page says how to undo it.
            let restored = try await browser.post(path, cookie: cookie, form: ["csrf": csrf, "action": "restore", "to": moment])
            #expect(restored.status == 303)
            let location = try #require(restored.headers["Location"].first)
            let after = try await browser.get(location, cookie: cookie)
            #expect(after.body.contains("Restored: 1 changed, 1 deleted") && after.body.contains("To undo it, restore to"), "\(after.body)")
            #expect(try await record("item").map { try $0.fields()["text"] } == .string("<b>milk</b>"))
            #expect(try await record("list").map { try $0.fields()["name"] } == .string("Weekend"))

            // A record deleted again comes back with its button; one that is live cannot be undeleted.
            try await CloudKitTestClient.patient(client, apiToken: world.apiToken, on: world.eventLoop.group) { api in
                time.advance(seconds: 1)
                _ = try await api.modify([operation("forceDelete", "item", type: nil)], zone: "Lists", as: .user(world.alice))
                time.advance(seconds: 1)
            }
            let undeleted = try await browser.post(path, cookie: cookie, form: ["csrf": csrf, "action": "undelete", "recordName": "item"])
            #expect(undeleted.status == 303)
            #expect(try await record("item")?.header.modified.deviceID == HistoryService.restoreDeviceID)
            let live = try await browser.post(path, cookie: cookie, form: ["csrf": csrf, "action": "undelete", "recordName": "list"])
            #expect(live.status == 400 && live.body.contains("was not deleted within the history window"))
        }
    }
}
