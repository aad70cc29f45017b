import CumulusCore
import CumulusModel
import CumulusStore

extension ShareLinksResponse {
    /// The answer of `records/resolve` and `records/accept` for `results`, as `viewer` may see each share.
    ///
    /// - Parameters:
    ///   - rootRecordOptions: How root records' fields are written (their assets' download URLs).
    ///   - url: A share's link by its short GUID.
    init(_ results: [ShareLinkResult], viewer: String?, rootRecordOptions: FieldWriteOptions = .init(), url: (String) -> String) {
        self.init(
            results: results.map { result in
                switch result {
                case .failed(let shortGUID, let error):
                    return .failed(shortGUID: shortGUID, ItemError(error))
                case .resolved(let info):
                    return .resolved(ShareLinkMetadata(info, viewer: viewer, url: url(info.share.shortGUID)))
                }
            }, options: rootRecordOptions)
    }
}

extension ShareLinkMetadata {
    init(_ info: ShareLinkInfo, viewer: String?, url: String) {
        let share = info.share
        let participant = info.participant
        self.init(
            containerIdentifier: share.database.container, environment: share.database.environment.rawValue,
            databaseScope: info.scope == .private ? "PRIVATE" : "SHARED", zoneID: share.database.zoneID(share.zoneName),
            shortGUID: share.shortGUID, rootRecordName: share.rootRecordName,
            rootRecord: info.rootRecord.map { ResponseRecord($0, desiredKeys: info.rootRecordDesiredKeys) },
            share: share.shareRecord.map { ResponseRecord($0, desiredKeys: nil, share: SharePresentation(share: share, viewer: viewer, url: url)) },
            owner: OwnerIdentity(userRecordName: share.database.ownerRecordName, name: info.owner?.name),
            participantPermission: participant?.permission ?? share.publicPermission, participantStatus: participant?.status ?? .invited,
            participantType: participant?.type ?? .publicUser, webpageURL: url)
    }
}
