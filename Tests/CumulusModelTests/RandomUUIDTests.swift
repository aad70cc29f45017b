import CumulusModel
import Foundation
import Testing

@Suite("UUID.random", .timeLimit(.minutes(10)))
struct RandomUUIDTests {
    @Test func isAVersionFourUUIDAndNeverTheSameTwice() {
        var seen = Set<UUID>()
        for _ in 0..<1_000 {
            let uuid = UUID.random()
            let text = uuid.uuidString
            // xxxxxxxx-xxxx-4xxx-[89AB]xxx-xxxxxxxxxxxx, as Foundation's own random UUIDs are shaped.
            let characters = Array(text)
            #expect(characters.count == 36 && characters[14] == "4" && "89AB".contains(characters[19]), "\(text)")
            #expect(UUID(uuidString: text) == uuid)
            seen.insert(uuid)
        }
        #expect(seen.count == 1_000)
    }
}
