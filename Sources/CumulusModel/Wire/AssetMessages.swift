/// One field's upload asked for by `assets/upload`: the record (a new one may have no name yet) and its field.
public struct AssetUploadToken: Sendable, Hashable {
    public var recordName: String?
    public var recordType: String?
    public var fieldName: String

    public init(recordName: String?, recordType: String? = nil, fieldName: String) {
        self.recordName = recordName
        self.recordType = recordType
        self.fieldName = fieldName
    }
}

/// The body of `assets/upload`: `{zoneID?, tokens: [{recordName?, recordType?, fieldName}]}`.
public struct AssetUploadRequest: WireMessage, Hashable {
    public var zoneID: ZoneID?
    public var tokens: [AssetUploadToken]

    public init(zoneID: ZoneID?, tokens: [AssetUploadToken]) {
        self.zoneID = zoneID
        self.tokens = tokens
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        zoneID = try object.object("zoneID").map { (zone) throws(WireFormatError) in try ZoneID(wire: zone) }
        tokens = try object.requiredObjects("tokens") { token throws(WireFormatError) in
            AssetUploadToken(
                recordName: try token.string("recordName"), recordType: try token.string("recordType"),
                fieldName: try token.requiredString("fieldName"))
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("zoneID", zoneID)
        writer.array("tokens", tokens) { writer, token in
            writer.beginObject()
            writer.member("recordName", token.recordName)
            writer.member("recordType", token.recordType)
            writer.member("fieldName", token.fieldName)
            writer.endObject()
        }
        writer.endObject()
    }
}

/// The answer of `assets/upload`: where to send each field's bytes, in the request's order.
public struct AssetUploadResponse: WireMessage, Hashable {
    /// An upload's place: the record's name (minted when the request named none), its field, the URL to POST to.
    public struct Token: Sendable, Hashable {
        public var recordName: String
        public var fieldName: String
        public var url: String

        public init(recordName: String, fieldName: String, url: String) {
            self.recordName = recordName
            self.fieldName = fieldName
            self.url = url
        }
    }

    public var tokens: [Token]

    public init(tokens: [Token]) {
        self.tokens = tokens
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        tokens = try object.objects("tokens") { token throws(WireFormatError) in
            Token(
                recordName: try token.requiredString("recordName"), fieldName: try token.requiredString("fieldName"),
                url: try token.requiredString("url"))
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("tokens", tokens) { writer, token in
            writer.beginObject()
            writer.member("recordName", token.recordName)
            writer.member("fieldName", token.fieldName)
            writer.member("url", token.url)
            writer.endObject()
        }
        writer.endObject()
    }
}

/// An uploaded asset as the upload and `assets/rereference` answer it, in CloudKit's member order: what a record's
/// `ASSETID` field takes.
public struct UploadedAsset: Sendable, Hashable {
    public var asset: Asset

    public init(_ asset: Asset) {
        self.asset = asset
    }

    public init(wire value: JSONValue, path: String) throws(WireFormatError) {
        asset = try Asset(wire: value, path: path)
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("fileChecksum", asset.fileChecksum)
        writer.member("receipt", asset.receipt)
        writer.member("referenceChecksum", asset.referenceChecksum)
        writer.member("size", asset.size.map(Int.init))
        writer.endObject()
    }
}

/// The answer of an asset's upload: `{"singleFile": {fileChecksum, receipt, referenceChecksum, size}}`.
public struct AssetUploadedResponse: WireMessage, Hashable {
    public var singleFile: UploadedAsset

    public init(singleFile: UploadedAsset) {
        self.singleFile = singleFile
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        guard let value = object["singleFile"] else { throw WireFormatError(path: object.path("singleFile"), message: "is required") }
        singleFile = try UploadedAsset(wire: value, path: object.path("singleFile"))
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("singleFile")
        singleFile.write(to: &writer)
        writer.endObject()
    }
}

/// The body of `assets/rereference`: the fields whose assets to make receipts for, to save in other records.
public struct AssetRereferenceRequest: WireMessage, Hashable {
    /// A record's field.
    public struct Field: Sendable, Hashable {
        public var recordName: String
        public var fieldName: String

        public init(recordName: String, fieldName: String) {
            self.recordName = recordName
            self.fieldName = fieldName
        }
    }

    public var zoneID: ZoneID?
    public var assets: [Field]

    public init(zoneID: ZoneID?, assets: [Field]) {
        self.zoneID = zoneID
        self.assets = assets
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        zoneID = try object.object("zoneID").map { (zone) throws(WireFormatError) in try ZoneID(wire: zone) }
        assets = try object.requiredObjects("assets") { asset throws(WireFormatError) in
            Field(recordName: try asset.requiredString("recordName"), fieldName: try asset.requiredString("fieldName"))
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("zoneID", zoneID)
        writer.array("assets", assets) { writer, field in
            writer.beginObject()
            writer.member("recordName", field.recordName)
            writer.member("fieldName", field.fieldName)
            writer.endObject()
        }
        writer.endObject()
    }
}

/// The answer of `assets/rereference`: a new receipt for each asset the fields hold (a list field holds several).
public struct AssetRereferenceResponse: WireMessage, Hashable {
    /// One asset of a field.
    public struct Entry: Sendable, Hashable {
        public var recordName: String
        public var fieldName: String
        public var value: UploadedAsset

        public init(recordName: String, fieldName: String, value: UploadedAsset) {
            self.recordName = recordName
            self.fieldName = fieldName
            self.value = value
        }
    }

    public var assets: [Entry]

    public init(assets: [Entry]) {
        self.assets = assets
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        assets = try object.objects("assets") { entry throws(WireFormatError) in
            guard let value = entry["value"] else { throw WireFormatError(path: entry.path("value"), message: "is required") }
            return Entry(
                recordName: try entry.requiredString("recordName"), fieldName: try entry.requiredString("fieldName"),
                value: try UploadedAsset(wire: value, path: entry.path("value")))
        }
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.array("assets", assets) { writer, entry in
            writer.beginObject()
            writer.member("recordName", entry.recordName)
            writer.member("fieldName", entry.fieldName)
            writer.key("value")
            entry.value.write(to: &writer)
            writer.endObject()
        }
        writer.endObject()
    }
}
