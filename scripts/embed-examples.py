#!/usr/bin/env python3
"""Copies example sources into the docs that show them whole, between their markers:

    <!-- BEGIN Sources/SplitCostsExample/SplitCosts.swift -->
    ...
    <!-- END Sources/SplitCostsExample/SplitCosts.swift -->

`swift test` (DocumentationTests) fails when a doc and its example differ; run this from the repository root to fix.
"""
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent
pattern = re.compile(r"(<!-- BEGIN (\S+) -->\n)(.*?)(<!-- END \2 -->)", re.S)
for doc in sorted((root / "docs").glob("*.md")):
    text = doc.read_text()

    def embed(match):
        source = (root / match.group(2)).read_text()
        return f"{match.group(1)}```swift\n{source}```\n{match.group(4)}"

    updated = pattern.sub(embed, text)
    if updated != text:
        doc.write_text(updated)
        print(f"updated {doc.relative_to(root)}")
