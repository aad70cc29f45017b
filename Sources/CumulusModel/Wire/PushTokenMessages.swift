/// The answer of `tokens/create` and `tokens/register`: a push token bound to the signed-in user, and the courier URL a
/// client polls (or streams) for its notifications.
public struct PushTokenResponse: WireMessage, Hashable {
    /// `development` or `production`: the environment the token serves.
    public var apnsEnvironment: String
    public var apnsToken: String
    public var webcourierURL: String

    public init(apnsEnvironment: String, apnsToken: String, webcourierURL: String) {
        self.apnsEnvironment = apnsEnvironment
        self.apnsToken = apnsToken
        self.webcourierURL = webcourierURL
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        apnsEnvironment = try object.string("apnsEnvironment") ?? "development"
        apnsToken = try object.requiredString("apnsToken")
        webcourierURL = try object.requiredString("webcourierURL")
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("apnsEnvironment")
        writer.string(apnsEnvironment)
        writer.key("apnsToken")
        writer.string(apnsToken)
        writer.key("webcourierURL")
        writer.string(webcourierURL)
        writer.endObject()
    }
}

/// The body of `tokens/register`: a token the device already holds (`apnsEnvironment` is read and ignored: the token
/// serves the path's environment).
public struct PushTokenRegisterRequest: WireMessage, Hashable {
    public var apnsToken: String
    public var apnsEnvironment: String?

    public init(apnsToken: String, apnsEnvironment: String? = nil) {
        self.apnsToken = apnsToken
        self.apnsEnvironment = apnsEnvironment
    }

    public init(wire object: WireObject) throws(WireFormatError) {
        apnsToken = try object.requiredString("apnsToken")
        apnsEnvironment = try object.string("apnsEnvironment")
    }

    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("apnsToken")
        writer.string(apnsToken)
        if let apnsEnvironment {
            writer.key("apnsEnvironment")
            writer.string(apnsEnvironment)
        }
        writer.endObject()
    }
}
