import CumulusCore
import CumulusModel
import CumulusStore

/// The web page behind a live share's URL, for a browser: what is shared and by whom, and how to open it in the app.
/// It never shows the shared records; those are for participants, through the app.
enum SharePage {
    static func share(_ preview: SharePreview, url: String, appStoreID: String?) -> String {
        let what = preview.title ?? preview.rootRecordType.map { "A shared \($0)" } ?? "A shared collection"
        let byline = preview.ownerName.map { "\($0) shared this with you." } ?? "Someone shared this with you."
        let access: String
        switch preview.share.publicPermission {
        case .none: access = "Only people the owner invited can open it."
        case .readOnly: access = "Anyone with this link can view it."
        case .readWrite: access = "Anyone with this link can view and edit it."
        }
        let body = """
            <h1 id="title">\(LinkPage.escape(what))</h1>
            <p class="date" id="owner">\(LinkPage.escape(byline))</p>
            <dl>
            <div><dt>Shared</dt><dd id="kind">\(preview.share.rootRecordName == nil ? "Everything in a zone" : "One item and what it holds")</dd></div>
            <div><dt>Access</dt><dd id="access">\(LinkPage.escape(access))</dd></div>
            </dl>
            <p class="note" id="how">Open this link on a phone or computer that has the app installed: the app opens it and asks you to join. \
            If it does not open, install the app, sign in, and open the link again.</p>
            """
        // Sentences rather than figures: a quieter weight than the link page's numbers.
        let head =
            LinkPage.linkTags(url: url, title: what, description: byline, appStoreID: appStoreID)
            + "\n<style>main dl dd { font-size: 1rem; }</style>"
        return LinkPage.document(title: what, head: head, body: body)
    }

    static func notFound() -> String {
        LinkPage.document(
            title: "This share is not available",
            body: """
                <h1>This share is not available</h1>
                <p class="date">The owner stopped sharing, or the link is not complete. Ask the owner for a new link.</p>
                """
        )
    }
}
