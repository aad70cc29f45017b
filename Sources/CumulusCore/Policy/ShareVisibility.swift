import CumulusModel
public import CumulusStore

/// Who a share shows to whom: the privacy rule for participants and their emails, wherever a share is answered (record
/// lookups, feeds, share links).
///
/// The owner sees everyone. A participant sees what CloudKit shows one: in a private share, the owner and the other
/// participants, without the emails they were invited by; in a public share, where anyone with the link may join, only
/// the owner and themselves. Everyone sees their own email. Removed participants are shown to no one.
public struct ShareVisibility: Sendable {
    public var share: ShareState
    /// The user the answer is for; `nil` for a caller with no user (they are never the owner).
    public var viewer: String?

    public init(share: ShareState, viewer: String?) {
        self.share = share
        self.viewer = viewer
    }

    public var viewerIsOwner: Bool { viewer == share.database.ownerRecordName }

    /// The participants the viewer may see, in the share's order.
    public var visibleParticipants: [ShareParticipantState] {
        let current = share.participants.filter { $0.status != .removed }
        if viewerIsOwner || share.publicPermission == .none { return current }
        return current.filter { $0.type == .owner || $0.userRecordName == viewer }
    }

    /// Whether the viewer may see the email `participant` was invited by.
    public func showsEmail(of participant: ShareParticipantState) -> Bool {
        viewerIsOwner || participant.userRecordName == viewer
    }
}
