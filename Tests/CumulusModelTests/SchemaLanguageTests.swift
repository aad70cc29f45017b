import CumulusModel
import Testing

@Suite("The schema language", .timeLimit(.minutes(10)))
struct SchemaLanguageTests {
    static let sample = """
        // An app's schema.
        DEFINE SCHEMA
            RECORD TYPE Cost (
                "___createTime" TIMESTAMP SORTABLE,
                amount  DOUBLE QUERYABLE SORTABLE,
                payer   REFERENCE QUERYABLE,
                tags    LIST<STRING> SEARCHABLE,
                receipt ASSETID,
                "type"  STRING_LIST,
                GRANT WRITE TO "_creator"
            );
            record type Empty ();
        """

    @Test func readsCloudKitsFilesAndWritesThemBack() throws {
        let schema = try SchemaLanguage.read(Self.sample)
        #expect(schema.recordTypes.keys.sorted() == ["Cost", "Empty"])
        #expect(
            schema.field("amount", of: "Cost") == FieldSchema(name: "amount", type: SchemaFieldType(.double), isQueryable: true, isSortable: true))
        #expect(schema.field("tags", of: "Cost")?.type.description == "LIST<STRING>")
        #expect(schema.field("receipt", of: "Cost")?.type.description == "ASSET")
        #expect(schema.field("type", of: "Cost")?.type == SchemaFieldType(.string, isList: true))
        #expect(schema.field("___createTime", of: "Cost") == nil)
        let written = SchemaLanguage.write(schema)
        #expect(written.contains(#""type"  LIST<STRING>"#), "\(written)")
        #expect(try SchemaLanguage.read(written) == schema)
    }

    @Test(arguments: [
        ("RECORD TYPE A (\n x TEXT\n);", "line 2: field x: unknown type TEXT"),
        ("RECORD TYPE A (x STRING FAST);", "line 1: field x: unknown option FAST"),
        ("RECORD TYPE A (x STRING, x INT64);", "field x of record type A is defined twice"),
        ("RECORD TYPE A (x STRING", "expected , or ), found the end"),
        ("TABLE A (x STRING);", "expected RECORD TYPE, found TABLE"),
        ("RECORD TYPE A (\"x STRING);", "a quoted name is not closed"),
    ])
    func unreadableFilesNameTheirLine(_ text: String, _ message: String) {
        #expect(throws: SchemaSyntaxError.self) { try SchemaLanguage.read(text) }
        do {
            _ = try SchemaLanguage.read(text)
        } catch {
            #expect(error.description.contains(message), "\(error.description)")
        }
    }

    @Test func mangledFilesEitherReadOrFailWithALine() {
        // Every prefix and every one-character deletion of the sample: no crash, and what reads writes back the same.
        let characters = Array(Self.sample)
        var texts = (0...characters.count).map { String(characters[..<$0]) }
        texts += characters.indices.map { index in String(characters[..<index] + characters[(index + 1)...]) }
        for text in texts {
            do {
                let schema = try SchemaLanguage.read(text)
                #expect(try SchemaLanguage.read(SchemaLanguage.write(schema)) == schema)
            } catch {
                #expect(error.line >= 1)
            }
        }
    }

    @Test func aDiffAddsAndRefusesEachKindOfChange() throws {
        let current = try SchemaLanguage.read("RECORD TYPE A (x STRING QUERYABLE, y INT64); RECORD TYPE B (z DOUBLE);")
        let declared = try SchemaLanguage.read("RECORD TYPE A (x STRING, y DOUBLE SORTABLE, w BYTES); RECORD TYPE C ();")
        let diff = SchemaDiff(from: current, to: declared)
        #expect(diff.additions == ["add field A.w BYTES", "add record type C"])
        #expect(
            diff.problems == [
                "record type B: missing from the new schema; record types cannot be removed", "field A.x: QUERYABLE cannot be removed",
                "field A.y: type INT64 cannot change to DOUBLE",
            ])
        #expect(SchemaDiff(from: current, to: current) == SchemaDiff(from: ContainerSchema(), to: ContainerSchema()))
    }
}
