import Foundation
import Testing

/// Docs that show an example whole show the code that the tests run, to the byte.
@Suite("Documentation shows the tested examples", .timeLimit(.minutes(10)))
struct DocumentationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test(arguments: ["docs/SYNC.md", "docs/SHARING.md"])
    func theCostSplittingAppIsShownWhole(_ doc: String) throws {
        let source = "Sources/SplitCostsExample/SplitCosts.swift"
        let text = try String(contentsOf: Self.root.appendingPathComponent(doc), encoding: .utf8)
        let code = try String(contentsOf: Self.root.appendingPathComponent(source), encoding: .utf8)
        let embedded = "<!-- BEGIN \(source) -->\n```swift\n\(code)```\n<!-- END \(source) -->"
        #expect(text.contains(embedded), "\(doc) shows an outdated \(source): run scripts/embed-examples.py")
    }
}
