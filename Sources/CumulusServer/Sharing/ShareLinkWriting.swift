import CumulusCore
import CumulusModel
import CumulusStore

extension JSONWriter {
    /// `{"results": [...]}` of `records/resolve` and `records/accept`: share metadata or a per-item error per short GUID.
    ///
    /// - Parameter rootRecordOptions: How root records' fields are written (their assets' download URLs).
    mutating func shareLinkResults(
        _ results: [ShareLinkResult], viewer: String?, rootRecordOptions: FieldWriteOptions = .init(), url: (String) -> String
    ) {
        beginObject()
        key("results")
        beginArray()
        for result in results {
            switch result {
            case .failed(let shortGUID, let error):
                itemError(code: error.code.serverErrorCode, reason: error.reason) { writer in
                    writer.key("shortGUID")
                    writer.string(shortGUID)
                }
            case .resolved(let info):
                shareLinkInfo(info, viewer: viewer, rootRecordOptions: rootRecordOptions, url: url(info.share.shortGUID))
            }
        }
        endArray()
        endObject()
    }

    private mutating func shareLinkInfo(_ info: ShareLinkInfo, viewer: String?, rootRecordOptions: FieldWriteOptions, url: String) {
        let share = info.share
        beginObject()
        key("containerIdentifier")
        string(share.database.container)
        key("environment")
        string(share.database.environment.rawValue)
        key("databaseScope")
        string(info.scope == .private ? "PRIVATE" : "SHARED")
        key("zoneID")
        zoneID(share.database.zoneID(share.zoneName))
        key("shortGUID")
        string(share.shortGUID)
        if let rootName = share.rootRecordName {
            key("rootRecordName")
            string(rootName)
        }
        if let root = info.rootRecord {
            key("rootRecord")
            ResponseRecord(root, desiredKeys: info.rootRecordDesiredKeys).write(to: &self, options: rootRecordOptions)
        }
        if let record = share.shareRecord {
            key("share")
            ResponseRecord(record, desiredKeys: nil, share: SharePresentation(share: share, viewer: viewer, url: url))
                .write(to: &self, options: .init())
        }
        ownerIdentity(userRecordName: share.database.ownerRecordName, name: info.owner?.name)
        let participant = info.participant
        key("participantPermission")
        string((participant?.permission ?? share.publicPermission).rawValue)
        key("participantStatus")
        string((participant?.status ?? .invited).rawValue)
        key("participantType")
        string((participant?.type ?? .publicUser).rawValue)
        key("webpageURL")
        string(url)
        endObject()
    }

    /// `"ownerIdentity": {userRecordName?, nameComponents?}`.
    mutating func ownerIdentity(userRecordName: String?, name: String?) {
        key("ownerIdentity")
        beginObject()
        if let userRecordName {
            key("userRecordName")
            string(userRecordName)
        }
        if let name {
            key("nameComponents")
            beginObject()
            key("givenName")
            string(name)
            endObject()
        }
        endObject()
    }
}
