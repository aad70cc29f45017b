/// A schema file that cannot be read: where, and what was expected.
public struct SchemaSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    public var line: Int
    public var message: String

    public var description: String { "line \(line): \(message)" }
}

/// CloudKit's schema language, as `cktool export-schema` writes it, for the record types Cumulus keeps:
///
/// ```
/// DEFINE SCHEMA
///
///     RECORD TYPE Cost (
///         amount  DOUBLE QUERYABLE SORTABLE,
///         payer   REFERENCE QUERYABLE,
///         tags    LIST<STRING>
///     );
/// ```
///
/// Reading is lenient where CloudKit's files carry more than Cumulus keeps: system fields (`"___createTime"` and the
/// rest, always indexed here), `GRANT` lines and `SEARCHABLE` are accepted and left out; `//` and `--` start comments.
public enum SchemaLanguage {
    /// Writes a schema, record types and fields in name order.
    public static func write(_ schema: ContainerSchema) -> String {
        var text = "DEFINE SCHEMA\n"
        for type in schema.recordTypes.values.sorted(by: { $0.name < $1.name }) {
            text += "\n    RECORD TYPE \(quoted(type.name)) ("
            let fields = type.fields.values.sorted { $0.name < $1.name }
            let width = fields.map { quoted($0.name).count }.max() ?? 0
            for (index, field) in fields.enumerated() {
                let name = quoted(field.name)
                var line = "\n        " + name + String(repeating: " ", count: width - name.count + 1) + field.type.description
                if field.isQueryable { line += " QUERYABLE" }
                if field.isSortable { line += " SORTABLE" }
                text += line + (index == fields.count - 1 ? "" : ",")
            }
            text += fields.isEmpty ? ");\n" : "\n    );\n"
        }
        return text
    }

    /// Reads a schema file.
    public static func read(_ text: String) throws(SchemaSyntaxError) -> ContainerSchema {
        var tokens = try tokenize(text)[...]
        var schema = ContainerSchema()

        func next(_ expected: String) throws(SchemaSyntaxError) -> Token {
            guard let token = tokens.popFirst() else { throw SchemaSyntaxError(line: lastLine(text), message: "expected \(expected), found the end") }
            return token
        }
        func expect(_ word: String) throws(SchemaSyntaxError) {
            let token = try next("\(word)")
            guard token.isWord(word) else { throw SchemaSyntaxError(line: token.line, message: "expected \(word), found \(token.text)") }
        }

        if tokens.first?.isWord("DEFINE") == true {
            _ = tokens.popFirst()
            try expect("SCHEMA")
        }
        while let token = tokens.popFirst() {
            if token.text == ";" { continue }
            guard token.isWord("RECORD") else {
                throw SchemaSyntaxError(line: token.line, message: "expected RECORD TYPE, found \(token.text)")
            }
            try expect("TYPE")
            let nameToken = try next("a record type name")
            guard nameToken.isName else {
                throw SchemaSyntaxError(line: nameToken.line, message: "expected a record type name, found \(nameToken.text)")
            }
            if schema.recordTypes[nameToken.text] != nil {
                throw SchemaSyntaxError(line: nameToken.line, message: "record type \(nameToken.text) is defined twice")
            }
            var recordType = RecordTypeSchema(name: nameToken.text)
            try expect("(")
            var closed = false
            while !closed {
                var item = try next("a field or )")
                if item.text == ")" { break }
                if item.isWord("GRANT") {
                    // Permissions are the server's (see docs/SCHEMA.md): skip to the end of the item.
                    while true {
                        item = try next(", or )")
                        if item.text == "," { break }
                        if item.text == ")" {
                            closed = true
                            break
                        }
                    }
                    continue
                }
                guard item.isName else { throw SchemaSyntaxError(line: item.line, message: "expected a field name, found \(item.text)") }
                var typeText = try next("a field type").text
                if typeText.uppercased() == "LIST" {
                    let open = try next("<")
                    let element = try next("a list element type")
                    let close = try next(">")
                    guard open.text == "<", close.text == ">" else {
                        throw SchemaSyntaxError(line: item.line, message: "field \(item.text): write a list type as LIST<TYPE>")
                    }
                    typeText = "LIST<\(element.text)>"
                }
                guard let type = SchemaFieldType(parsing: typeText) else {
                    throw SchemaSyntaxError(
                        line: item.line,
                        message:
                            "field \(item.text): unknown type \(typeText); use STRING, INT64, DOUBLE, TIMESTAMP, BYTES, REFERENCE, LOCATION, ASSET or LIST<…> of one"
                    )
                }
                var field = FieldSchema(name: item.text, type: type)
                while true {
                    let word = try next(", or )")
                    if word.text == "," { break }
                    if word.text == ")" {
                        closed = true
                        break
                    }
                    switch word.text.uppercased() {
                    case "QUERYABLE": field.isQueryable = true
                    case "SORTABLE": field.isSortable = true
                    case "SEARCHABLE": break
                    default:
                        throw SchemaSyntaxError(
                            line: word.line, message: "field \(item.text): unknown option \(word.text); use QUERYABLE, SORTABLE or SEARCHABLE")
                    }
                }
                // System fields are always indexed here; CloudKit's files list them.
                if field.name.hasPrefix("___") { continue }
                if recordType.fields[field.name] != nil {
                    throw SchemaSyntaxError(line: item.line, message: "field \(field.name) of record type \(recordType.name) is defined twice")
                }
                recordType.fields[field.name] = field
            }
            schema.recordTypes[recordType.name] = recordType
        }
        return schema
    }

    private struct Token {
        var text: String
        var line: Int
        var wasQuoted: Bool

        func isWord(_ word: String) -> Bool { !wasQuoted && text.uppercased() == word }
        var isName: Bool { wasQuoted || text.first.map { $0.isLetter || $0 == "_" } == true }
    }

    private static func tokenize(_ text: String) throws(SchemaSyntaxError) -> [Token] {
        var tokens: [Token] = []
        var line = 1
        var characters = text[...]
        while let character = characters.first {
            if character == "\n" {
                line += 1
                characters.removeFirst()
            } else if character.isWhitespace {
                characters.removeFirst()
            } else if characters.hasPrefix("//") || characters.hasPrefix("--") {
                characters = characters.drop { $0 != "\n" }
            } else if character == "\"" {
                characters.removeFirst()
                guard let end = characters.firstIndex(of: "\"") else {
                    throw SchemaSyntaxError(line: line, message: "a quoted name is not closed")
                }
                tokens.append(Token(text: String(characters[..<end]), line: line, wasQuoted: true))
                characters = characters[characters.index(after: end)...]
            } else if "(),;<>".contains(character) {
                tokens.append(Token(text: String(character), line: line, wasQuoted: false))
                characters.removeFirst()
            } else {
                let word = characters.prefix { !$0.isWhitespace && !"(),;<>\"".contains($0) }
                tokens.append(Token(text: String(word), line: line, wasQuoted: false))
                characters = characters.dropFirst(word.count)
            }
        }
        return tokens
    }

    private static func lastLine(_ text: String) -> Int { text.count { $0 == "\n" } + 1 }

    /// Names that are words of the language, or not plain identifiers, are quoted.
    private static func quoted(_ name: String) -> String {
        let keywords: Set<String> = ["DEFINE", "SCHEMA", "RECORD", "TYPE", "GRANT", "QUERYABLE", "SORTABLE", "SEARCHABLE", "LIST"]
        let plain = name.first.map { $0.isLetter } == true && name.allSatisfy { $0.isLetter || $0.isNumber || $0 == "_" }
        return plain && !keywords.contains(name.uppercased()) ? name : "\"\(name)\""
    }
}
