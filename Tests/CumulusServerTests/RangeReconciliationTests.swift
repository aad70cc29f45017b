import CumulusClient
import CumulusModel
import CumulusStore
import Foundation
import Synchronization
import Testing

/// The device's range comparison against the server's reconciler, in memory: every kind of difference is found
/// exactly, in few round trips, with bytes that grow with the differences and not with the zone.
@Suite("Range reconciliation", .timeLimit(.minutes(10)))
struct RangeReconciliationTests {
    /// A zone held in memory, answering as the server does: each range scanned in byte order of names.
    struct Server: Sendable {
        var records: [String: Int64]

        func answer(_ ranges: [RangeDigest]) -> [RangeReconciliation] {
            let sorted = records.sorted { Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }
            return ranges.map { entry in
                var reconciler = RangeReconciler(range: entry.range, theirs: entry.digest)
                let inRange = sorted.filter { entry.range.contains($0.key) }
                reconciler.begin(count: inRange.count)
                for (name, sequence) in inRange { reconciler.add(recordName: name, changeSequence: sequence) }
                return reconciler.reconciliation
            }
        }
    }

    @Test(arguments: [0, 1, 10, 40])
    func everyDifferenceIsFoundInFewRoundTrips(_ differences: Int) async throws {
        var random = SystemRandomNumberGenerator()
        var server = Server(records: [:])
        for index in 0..<20_000 { server.records[String(format: "rec-%06d", index * 7 % 20_000)] = Int64(index + 1) }
        var versions = server.records.mapValues { ChangeTag.make($0) }
        var missing = Set<String>()
        var extra = Set<String>()
        var stale = Set<String>()
        let names = Array(server.records.keys)
        for index in 0..<differences {
            let name = names.randomElement(using: &random)!
            guard !missing.contains(name), !stale.contains(name) else { continue }
            switch index % 3 {
            case 0:
                versions[name] = nil
                missing.insert(name)
            case 1:
                versions[name] = "zz"
                stale.insert(name)
            default:
                let stray = "stray-\(index)"
                versions[stray] = "1"
                extra.insert(stray)
            }
        }
        let local = LocalRecordVersions(versions: versions, pending: [])
        let bytes = ByteCounter()
        let found = try await RangeComparison().differences(local) { [server] ranges in
            bytes.add(RecordsReconcileRequest(zoneID: ZoneID(), ranges: ranges).wireBytes.count)
            let answer = server.answer(ranges)
            bytes.add(RecordsReconcileResponse(zoneID: ZoneID(), ranges: answer).wireBytes.count)
            return answer
        }
        #expect(found.missing == missing)
        #expect(found.extra == extra)
        #expect(found.stale == stale)
        if differences == 0 {
            #expect(found.roundTrips == 1)
        } else {
            // 20,000 records: 16 parts a cut, lists of at most 32: four requests, whatever the differences.
            #expect(found.roundTrips <= 5, "\(found.roundTrips) round trips")
        }
        // The zone's names and tags alone are about 400 KB; the differences cost a few KB each at most.
        #expect(bytes.total < 2_000 + differences * 10_000, "\(bytes.total) bytes for \(differences) differences")
    }

    final class ByteCounter: Sendable {
        private let count = Mutex(0)
        func add(_ bytes: Int) { count.withLock { $0 += bytes } }
        var total: Int { count.withLock { $0 } }
    }
}
