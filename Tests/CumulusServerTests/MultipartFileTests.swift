import Testing

@testable import CumulusServer

/// The file part of a form body, taken out as the body streams in chunks of any size.
@Suite("Multipart asset bodies", .timeLimit(.minutes(10)))
struct MultipartFileTests {
    static let boundary = "----cumulusBoundary7MA4YWxk"

    static func form(_ file: [UInt8], before: Bool = true) -> [UInt8] {
        var body: [UInt8] = []
        if before {
            body += Array("preamble to ignore\r\n--\(boundary)\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nnot the file\r\n".utf8)
        }
        body += Array(
            "--\(boundary)\r\nContent-Disposition: form-data; name=\"upload\"; filename=\"photo.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n".utf8)
        body += file
        body += Array("\r\n--\(boundary)\r\nContent-Disposition: form-data; name=\"after\"\r\n\r\nalso not\r\n--\(boundary)--\r\n".utf8)
        return body
    }

    static func extract(_ body: [UInt8], chunk: Int) throws -> [UInt8] {
        var reader = MultipartFile(boundary: boundary)
        var output: [UInt8] = []
        var index = 0
        while index < body.count {
            output += try reader.feed(Array(body[index..<min(index + chunk, body.count)]))
            index += chunk
        }
        try reader.finish()
        return output
    }

    @Test(arguments: [1, 2, 7, 31, 64, 4096, 1 << 20])
    func theFilePartComesOutWholeWhateverTheChunks(_ chunk: Int) throws {
        // The file holds what looks like a delimiter's beginning, and CR LF pairs.
        let file = Array("line one\r\nline two\r\n--not-the-boundary\r\n-\r\n--".utf8) + (0..<3000).map { UInt8(truncatingIfNeeded: $0) }
        #expect(try Self.extract(Self.form(file), chunk: chunk) == file)
        #expect(try Self.extract(Self.form([], before: false), chunk: chunk).isEmpty)
    }

    @Test func aBodyWithNoFileOrNoEndIsRefused() throws {
        let noFile = Array("--\(Self.boundary)\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\ntext\r\n--\(Self.boundary)--\r\n".utf8)
        #expect(throws: MultipartFile.Failure.self) { try Self.extract(noFile, chunk: 10) }
        let cut = Array(Self.form(Array("abc".utf8)).dropLast(20))
        #expect(throws: MultipartFile.Failure.self) { try Self.extract(cut, chunk: 10) }
        #expect(MultipartFile.boundary(contentType: #"multipart/form-data; boundary="abc""#) == "abc")
        #expect(MultipartFile.boundary(contentType: "application/octet-stream") == nil)
    }
}
