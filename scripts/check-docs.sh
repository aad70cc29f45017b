#!/usr/bin/env bash
# Checks the documentation without a server, in CI before the tests:
# - every relative link in README.md and docs/*.md reaches a file of the repository and, with `#section`, a heading
#   of that file as GitHub names it (a renamed heading breaks links silently otherwise);
# - the app's `Package.swift` that docs/SYNC.md shows (the block after `<!-- docs-manifest -->`) is read by
#   `swift package dump-package` beside a clone named `cumulus`, and every product it takes from `cumulus` is a library
#   Cumulus ships.
#
#   scripts/check-docs.sh
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - README.md docs/*.md <<'PY'
import os, re, sys

def slug(heading):
    # GitHub's anchors: lower case, punctuation dropped (letters, digits, spaces, hyphens and underscores stay),
    # spaces become hyphens; links and code marks count by their text.
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)
    text = text.replace('`', '').strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')

def anchors(path):
    found, seen, fenced = set(), {}, False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fenced = not fenced
            continue
        if fenced:
            continue
        heading = re.match(r'#{1,6} (.*)', line)
        if heading:
            name = slug(heading.group(1))
            count = seen.get(name, 0)
            seen[name] = count + 1
            found.add(name if count == 0 else f'{name}-{count}')
        for explicit in re.findall(r'<a (?:name|id)="([^"]+)"', line):
            found.add(explicit)
    return found

broken = []
for path in sys.argv[1:]:
    fenced = False
    for number, line in enumerate(open(path, encoding='utf-8'), 1):
        if line.startswith('```'):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r'`[^`]*`', '', line)
        for target in re.findall(r'\]\(([^)\s]+)\)', line) + re.findall(r'<img src="([^"]+)"', line):
            if re.match(r'[a-z]+:', target):
                continue
            file, _, section = target.partition('#')
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(resolved):
                broken.append(f'{path}:{number}: {target}: no file {resolved}')
            elif section and resolved.endswith('.md') and section not in anchors(resolved):
                broken.append(f'{path}:{number}: {target}: no section "{section}" in {resolved}')
if broken:
    print('\n'.join(broken), file=sys.stderr)
    print(f'check-docs: {len(broken)} broken links', file=sys.stderr)
    sys.exit(1)
print(f'check-docs: every link of {len(sys.argv) - 1} files reaches its file and section')
PY

# The app manifest of docs/SYNC.md, beside a clone named `cumulus` (a link to this one).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/app"
ln -s "$(pwd)" "$scratch/cumulus"
python3 - docs/SYNC.md > "$scratch/app/Package.swift" <<'PY'
import re, sys
blocks = re.findall(r'<!-- docs-manifest -->\n```swift\n(.*?)```', open(sys.argv[1]).read(), re.S)
assert len(blocks) == 1, 'docs/SYNC.md: one block after <!-- docs-manifest -->'
print(blocks[0], end='')
PY
swift package --package-path "$scratch/app" dump-package > "$scratch/app.json"
swift package --scratch-path "$scratch/build" dump-package > "$scratch/cumulus.json"
python3 - "$scratch/app.json" "$scratch/cumulus.json" <<'PY'
import json, sys
app, cumulus = (json.load(open(path)) for path in sys.argv[1:])
shipped = {product['name'] for product in cumulus['products'] if 'library' in product['type']}
taken = set()
for target in app['targets']:
    for dependency in target['dependencies']:
        product = dependency.get('product')
        if product and product[1] == 'cumulus':
            taken.add(product[0])
missing = taken - shipped
if missing or not taken:
    sys.exit(f'check-docs: docs/SYNC.md takes {sorted(missing) or "nothing"} from cumulus, which ships {sorted(shipped)}')
print(f'check-docs: docs/SYNC.md\'s Package.swift reads, and takes {", ".join(sorted(taken))} from Cumulus')
PY
