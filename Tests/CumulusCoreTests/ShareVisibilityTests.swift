import CumulusCore
import CumulusModel
import CumulusStore
import Testing

/// Who sees whom in a share, and whose email: the rule every answer that carries a share follows.
@Suite("Share visibility")
struct ShareVisibilityTests {
    static func share(_ permission: SharePermission) -> ShareState {
        ShareState(
            database: DatabaseRef(container: "c", environment: .development, scope: .private, ownerRecordName: "_owner"), zoneName: "Z",
            zoneIncarnation: 1, shareRecordName: "share", rootRecordName: "root", shortGUID: "g", publicPermission: permission,
            participants: [
                ShareParticipantState(userRecordName: "_owner", type: .owner, permission: .readWrite, status: .accepted, email: "owner@example.com"),
                ShareParticipantState(userRecordName: "_bob", type: .user, permission: .readOnly, status: .accepted, email: "bob@example.com"),
                ShareParticipantState(userRecordName: "_carol", type: .user, permission: .readWrite, status: .invited, email: "carol@example.com"),
                ShareParticipantState(userRecordName: "_dave", type: .user, permission: .readOnly, status: .removed, email: "dave@example.com"),
            ], shareRecord: nil)
    }

    static func names(_ visibility: ShareVisibility) -> [String] { visibility.visibleParticipants.map(\.userRecordName) }

    @Test func theOwnerSeesEveryoneCurrentAndEveryEmail() {
        for permission in [SharePermission.none, .readOnly] {
            let owner = ShareVisibility(share: Self.share(permission), viewer: "_owner")
            #expect(Self.names(owner) == ["_owner", "_bob", "_carol"], "a removed participant is shown to no one")
            #expect(owner.visibleParticipants.allSatisfy { owner.showsEmail(of: $0) })
        }
    }

    @Test func aParticipantOfAPrivateShareSeesTheOthersWithoutTheirEmails() {
        let bob = ShareVisibility(share: Self.share(.none), viewer: "_bob")
        #expect(Self.names(bob) == ["_owner", "_bob", "_carol"])
        #expect(bob.visibleParticipants.filter { bob.showsEmail(of: $0) }.map(\.userRecordName) == ["_bob"], "only their own")
    }

    @Test func aParticipantOfAPublicShareSeesTheOwnerAndThemselves() {
        let bob = ShareVisibility(share: Self.share(.readOnly), viewer: "_bob")
        #expect(Self.names(bob) == ["_owner", "_bob"], "who else joined by the link stays hidden")
        let stranger = ShareVisibility(share: Self.share(.readOnly), viewer: nil)
        #expect(Self.names(stranger) == ["_owner"] && !stranger.viewerIsOwner)
        #expect(!stranger.showsEmail(of: Self.share(.readOnly).participants[0]), "not even the owner's email")
    }
}
