import CumulusCore
import CumulusModel
import CumulusStore
import Foundation
import HTTPTypes
import Hummingbird

/// A share as a response shows it: to whom (``ShareVisibility``, the domain's rule), and under which link.
struct SharePresentation {
    var share: ShareState
    /// The user the answer is for, for `currentUserParticipant`.
    var viewer: String?
    var url: String

    private var visibility: ShareVisibility { ShareVisibility(share: share, viewer: viewer) }

    var visibleParticipants: [ShareParticipantState] { visibility.visibleParticipants }

    func showsEmail(of participant: ShareParticipantState) -> Bool { visibility.showsEmail(of: participant) }
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

extension ShareMembers {
    /// A share's members as `presentation` shows them to its viewer.
    init(_ presentation: SharePresentation) {
        let share = presentation.share
        func participant(_ state: ShareParticipantState) -> ShareParticipant {
            ShareParticipant(
                userRecordName: state.userRecordName, emailAddress: presentation.showsEmail(of: state) ? state.email : nil,
                permission: state.permission, type: state.type, acceptanceStatus: state.status)
        }
        let current = presentation.viewer.flatMap { share.participant($0) }.flatMap { $0.status == .removed ? nil : $0 }
        self.init(
            shortGUID: share.shareRecord?.header.shortGUID == nil ? share.shortGUID : nil, publicPermission: share.publicPermission,
            participants: presentation.visibleParticipants.map(participant),
            owner: share.participants.first { $0.type == .owner }.map(participant),
            // The viewer sees their own email.
            currentUserParticipant: current.map { state in
                var own = participant(state)
                own.emailAddress = state.email
                return own
            }, url: presentation.url)
    }
}

extension ResponseRecord {
    /// A stored record as an answer carries it: its stored fields spliced in, a share record with its members.
    init(_ record: StoredRecord, desiredKeys: Set<String>?, share: SharePresentation? = nil) {
        self.init(header: record.header, fields: .canonical(record.fieldsJSON), desiredKeys: desiredKeys, share: share.map(ShareMembers.init))
    }
}

extension RecordResult {
    /// The answer to one operation of `records/modify`.
    init(_ result: RecordModificationResult, desiredKeys: Set<String>?, shares: (String) -> SharePresentation?) {
        switch result {
        case .saved(let record):
            self = .record(ResponseRecord(record, desiredKeys: desiredKeys, share: shares(record.header.recordName)))
        case .deleted(let recordName):
            self = .deleted(recordName: recordName, recordType: nil)
        case .failed(let failure):
            self = .failed(
                recordName: failure.recordName, ItemError(code: failure.code, reason: failure.reason),
                serverRecord: failure.serverRecord.map { ResponseRecord($0, desiredKeys: nil) })
        }
    }

    /// A record change of a feed: the record, or its tombstone with its type.
    init(_ change: ZoneRecordChange, desiredKeys: Set<String>?, shares: (String) -> SharePresentation?) {
        switch change {
        case .changed(let record):
            self = .record(ResponseRecord(record, desiredKeys: desiredKeys, share: shares(record.header.recordName)))
        case .deleted(let recordName, let recordType):
            self = .deleted(recordName: recordName, recordType: recordType)
        }
    }
}
