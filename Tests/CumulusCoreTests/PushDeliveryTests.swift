import CumulusModel
import CumulusStore
import Synchronization
import Testing

@testable import CumulusCore

/// The parts of push delivery that need no server: what a token remembers of what it was told, and which waiting
/// connections a commit wakes.
@Suite("Push: delivery state and wake-ups", .timeLimit(.minutes(10)))
struct PushDeliveryTests {
    typealias DeliveryState = PushService.DeliveryState

    @Test func aStreamRewindsToTheLastNotificationItsDeviceReceived() {
        var state = DeliveryState()
        state.positions = ["a": 5, "b": 7]
        state.positions["a"] = 9
        #expect(state.notified("a", previous: 5) == 1)
        state.positions["b"] = 12
        #expect(state.notified("b", previous: 7) == 2)
        state.positions["a"] = 15
        #expect(state.notified("a", previous: 9) == 3)

        // Stored and read back, it is the same state.
        #expect(DeliveryState(json: state.json) == state)

        // The device received notification 1: the positions 2 and 3 moved go back, and they will be told again.
        var rewound = state
        let rewoundAfterOne = rewound.rewind(after: 1)
        #expect(rewoundAfterOne)
        #expect(rewound.positions == ["a": 9, "b": 7] && rewound.lastID == 1 && rewound.log.map(\.id) == [1])
        // Naming the newest is no change; an id never given, or a negative one, cannot be resumed.
        var same = state
        let newest = same.rewind(after: 3)
        let unknown = same.rewind(after: 4)
        let negative = same.rewind(after: -1)
        #expect(newest && !unknown && !negative && same == state)
        // From nothing at all (a device that received none) is possible while the log reaches back to the first.
        var fromStart = state
        let fromNothing = fromStart.rewind(after: 0)
        #expect(fromNothing && fromStart.positions == ["a": 5, "b": 7])
    }

    @Test func theLogKeepsTheLastSixtyFourNotifications() {
        var state = DeliveryState()
        for index in 1...100 {
            state.positions["k"] = Int64(index)
            _ = state.notified("k", previous: Int64(index - 1))
        }
        #expect(state.log.count == DeliveryState.logLength && state.log.first?.id == 37)
        // Resuming after 36 needs 37 onwards: kept. After 35 needs 36: forgotten, so the device must fetch everything.
        var recent = state
        let resumedRecent = recent.rewind(after: 36)
        #expect(resumedRecent && recent.positions["k"] == 36)
        var old = state
        let resumedOld = old.rewind(after: 35)
        #expect(!resumedOld && old == state)
    }

    @Test func aStoredStateOfUnexpectedShapeReadsWhatItCanAndNothingElse() {
        // Values of the wrong kind are passed over, members this version does not know are ignored, and the rest is read.
        let mixed = DeliveryState(
            json: Array(
                #"{"p":{"a":3,"b":"x","c":[1],"d":4},"n":7,"future":{"x":[1,2]},"log":[[6,"a",2],[7,"d"],"x",[8,9,1],[9,"d",3,0],[10,"d",3]]}"#
                    .utf8))
        #expect(mixed.positions == ["a": 3, "d": 4] && mixed.lastID == 7)
        #expect(mixed.log == [DeliveryState.Step(id: 6, key: "a", previous: 2), DeliveryState.Step(id: 10, key: "d", previous: 3)])
        // A member of the wrong kind leaves its default; what is not JSON, or not an object, reads as nothing told yet.
        #expect(DeliveryState(json: Array(#"{"p":[1],"n":"7","log":{}}"#.utf8)) == DeliveryState())
        for broken in [#"{"p":{"a":3}"#, "[1,2]", "", #"{"p":{"a":3}} x"#] {
            #expect(DeliveryState(json: Array(broken.utf8)) == DeliveryState(), "\(broken)")
        }
    }

    @Test func aCommitWakesOnlyTheConnectionsWatchingWhatItChanged() async throws {
        let signal = ChangeSignal()
        let alice = ChangeSignal.key(DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_alice"))
        let bob = ChangeSignal.key(DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_bob"))
        let far = ContinuousClock.now + .seconds(600)
        async let aliceWoken = signal.wait(for: [alice], until: far)
        async let bobWoken = signal.wait(for: [bob], until: far)
        while signal.waiting < 2 { await Task.yield() }

        signal.changed([alice])
        #expect(await aliceWoken)
        // Bob's connection still waits: Alice's commit was none of its business.
        #expect(signal.waiting == 1)
        signal.wakeAll()
        #expect(await bobWoken)
        #expect(signal.waiting == 0)
        // A deadline that passes is not a wake-up.
        #expect(await signal.wait(for: [alice], until: .now + .milliseconds(10)) == false)
    }

    @Test func announcementsReachOtherInstancesWithTheirKeys() {
        let announced = Announced()
        let signal = ChangeSignal(announce: { announced.append($0) })
        signal.changed(["db|x"])
        #expect(announced.all == [["db|x"]])
    }
}

final class Announced: Sendable {
    private let keys = Mutex<[Set<String>]>([])
    func append(_ value: Set<String>) { keys.withLock { keys in keys.append(value) } }
    var all: [Set<String>] { keys.withLock { $0 } }
}
