import CumulusModel
import Hummingbird

/// A wire message a handler returns: it writes itself as the response's JSON body (Hummingbird's
/// `ResponseEncodable`, with the project's own writer).
protocol WireResponse: WireMessage, ResponseGenerator {
    /// Bytes to reserve for the body, so that a long answer is written without growing its buffer again and again.
    var expectedSize: Int { get }
}

extension WireResponse {
    var expectedSize: Int { 256 }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        var writer = JSONWriter(reservingCapacity: expectedSize)
        write(to: &writer)
        return .json(writer)
    }
}

extension RecordsResponse: WireResponse {
    var expectedSize: Int { 1024 * records.count }
}

extension ZoneChangesResponse: WireResponse {
    var expectedSize: Int { 64 * 1024 }
}

extension RecordChangesResponse: WireResponse {
    var expectedSize: Int { 64 * 1024 }
}

extension ZonesResponse: WireResponse {}
extension RecordsReconcileResponse: WireResponse {
    var expectedSize: Int { 4 * 1024 }
}
extension DatabaseChangesResponse: WireResponse {}
extension SubscriptionsResponse: WireResponse {}
extension PushTokenResponse: WireResponse {}
extension CallerResponse: WireResponse {}
extension DeviceVerificationResponse: WireResponse {}
extension UsersResponse: WireResponse {}

extension ShareLinksResponse: WireResponse {}
extension AssetUploadResponse: WireResponse {}
extension AssetUploadedResponse: WireResponse {}
extension AssetRereferenceResponse: WireResponse {}
extension CreatedLinksResponse: WireResponse {}

extension LinkSnapshotResponse: WireResponse {}
