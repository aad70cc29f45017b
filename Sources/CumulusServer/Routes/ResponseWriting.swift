import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird

/// A share as a response shows it: to whom, and under which link.
///
/// The owner sees everyone. A participant sees what CloudKit shows one: in a private share, the owner and the other
/// participants (without the emails they were invited by); in a public share, where anyone with the link may join,
/// only the owner and themselves.
struct SharePresentation {
    var share: ShareState
    /// The user the answer is for, for `currentUserParticipant`.
    var viewer: String?
    var url: String

    private var viewerIsOwner: Bool { viewer == share.database.ownerRecordName }

    var visibleParticipants: [ShareParticipantState] {
        let current = share.participants.filter { $0.status != .removed }
        if viewerIsOwner || share.publicPermission == .none { return current }
        return current.filter { $0.type == .owner || $0.userRecordName == viewer }
    }

    func showsEmail(of participant: ShareParticipantState) -> Bool {
        viewerIsOwner || participant.userRecordName == viewer
    }
}

/// Writing response bodies with `JSONWriter`, so stored fields JSON is spliced in without a decode and re-encode.
extension Response {
    static func json(_ writer: JSONWriter, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: writer.bytes))
        )
    }

    /// A web page of Cumulus's own (link and share pages): self-contained, so the policy allows nothing but the page.
    static func html(_ page: String, status: HTTPResponse.Status) -> Response {
        Response(
            status: status,
            headers: [
                .contentType: "text/html; charset=utf-8",
                // Nothing but the page itself: no scripts, no external resources.
                .contentSecurityPolicy: "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
                .init("X-Content-Type-Options")!: "nosniff",
                .cacheControl: "no-store",
            ],
            body: .init(byteBuffer: ByteBuffer(string: page))
        )
    }
}

extension JSONWriter {
    /// A per-item error dictionary, as CloudKit puts inside result arrays with HTTP 200.
    mutating func itemError(code: ServerErrorCode, reason: String, identify: (inout JSONWriter) -> Void) {
        beginObject()
        identify(&self)
        ItemError(code: code, reason: reason).write(to: &self)
        endObject()
    }

    mutating func storedRecord(_ record: StoredRecord, desiredKeys: Set<String>?, options: FieldWriteOptions, share: SharePresentation? = nil) {
        self.record(header: record.header, fields: .canonical(record.fieldsJSON), desiredKeys: desiredKeys, options: options) { writer in
            if let share { writer.shareKeys(share) }
        }
    }

    /// The keys of a share record: its link, public permission and participants, as the viewer may see them.
    mutating func shareKeys(_ presentation: SharePresentation) {
        let share = presentation.share
        if share.shareRecord?.header.shortGUID == nil {
            key("shortGUID")
            string(share.shortGUID)
        }
        key("publicPermission")
        string(share.publicPermission.rawValue)
        key("participants")
        beginArray()
        for participant in presentation.visibleParticipants { self.participant(participant, showEmail: presentation.showsEmail(of: participant)) }
        endArray()
        if let owner = share.participants.first(where: { $0.type == .owner }) {
            key("owner")
            participant(owner, showEmail: presentation.showsEmail(of: owner))
        }
        if let viewer = presentation.viewer, let current = share.participant(viewer), current.status != .removed {
            key("currentUserParticipant")
            participant(current, showEmail: true)
        }
        // Not in the 2016 documents: the share's stable link (CKShare.url; CKTool's stableUrl).
        key("url")
        string(presentation.url)
        key("stableUrl")
        string(presentation.url)
    }

    mutating func participant(_ participant: ShareParticipantState, showEmail: Bool) {
        beginObject()
        key("participantId")
        string(participant.userRecordName)
        key("userIdentity")
        beginObject()
        key("userRecordName")
        string(participant.userRecordName)
        key("lookupInfo")
        beginObject()
        key("userRecordName")
        string(participant.userRecordName)
        if showEmail, let email = participant.email {
            key("emailAddress")
            string(email)
        }
        endObject()
        endObject()
        key("permission")
        string(participant.permission.rawValue)
        key("type")
        string(participant.type.rawValue)
        key("acceptanceStatus")
        string(participant.status.rawValue)
        endObject()
    }

    mutating func recordResult(
        _ result: RecordModificationResult, desiredKeys: Set<String>?, options: FieldWriteOptions,
        shares: (String) -> SharePresentation? = { _ in nil }
    ) {
        switch result {
        case .saved(let record):
            storedRecord(record, desiredKeys: desiredKeys, options: options, share: shares(record.header.recordName))
        case .deleted(let recordName):
            tombstone(recordName: recordName)
        case .failed(let failure):
            beginObject()
            key("recordName")
            string(failure.recordName)
            ItemError(code: failure.code, reason: failure.reason).write(to: &self)
            if let serverRecord = failure.serverRecord {
                // Not in Apple's documentation: the server's record on CONFLICT and EXISTS, so the client can merge
                // without a second round trip (CKError.serverRecordChanged carries it natively).
                key("serverRecord")
                storedRecord(serverRecord, desiredKeys: nil, options: options)
            }
            endObject()
        }
    }

    /// A record change in a feed: the record, or its tombstone.
    mutating func recordChange(
        _ change: ZoneRecordChange, desiredKeys: Set<String>?, options: FieldWriteOptions, shares: (String) -> SharePresentation? = { _ in nil }
    ) {
        switch change {
        case .changed(let record):
            storedRecord(record, desiredKeys: desiredKeys, options: options, share: shares(record.header.recordName))
        case .deleted(let recordName, let recordType):
            beginObject()
            key("recordName")
            string(recordName)
            key("recordType")
            string(recordType)
            key("deleted")
            bool(true)
            endObject()
        }
    }
}
