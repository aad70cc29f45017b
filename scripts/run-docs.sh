#!/usr/bin/env bash
# Runs the documentation's walk-throughs as a reader would paste them, one after the other, against a fresh
# `cumulus serve`: every shell block marked `<!-- docs-runner -->` in README.md, docs/SHARING.md and docs/LINKS.md, in
# that order, in one shell. A command that fails, an answer holding a `serverErrorCode` the docs do not show, or
# output other than the `#>` lines after a command, fails the run.
#
#   scripts/run-docs.sh [path-to-cumulus]     # default .build/debug/cumulus
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(realpath "${1:-.build/debug/cumulus}")

data=$(mktemp -d)
export CUMULUS_DATA="$data/cumulus-data"
"$binary" serve --port 0 > "$data/url" 2> "$data/server.log" &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 100); do [ -s "$data/url" ] && break; sleep 0.1; done
url=$(head -1 "$data/url")

# The blocks, with the docs' address replaced by this server's and their own `cumulus` definition by this binary. A
# command followed by `#>` lines prints exactly those lines (`…` stands for any text): the lines since the last
# expectation run with their output kept, then compared; an expectation that shows `serverErrorCode` lets that answer
# be an error.
python3 - "$url" README.md docs/SHARING.md docs/LINKS.md > "$data/walk.sh" <<'PY'
import re, sys
url, files = sys.argv[1], sys.argv[2:]
expectations = 0
for path in files:
    text = open(path).read()
    for block in re.findall(r'<!-- docs-runner -->\n```sh\n(.*?)```', text, re.S):
        print(f'echo "== {path}" >&2')
        block = re.sub(r'^cumulus\(\) \{.*$', '', block, flags=re.M).replace('http://127.0.0.1:8080', url)
        segment, expected = [], []
        def flush():
            global expectations
            if expected:
                expectations += 1
                errors = '1' if any('serverErrorCode' in line for line in expected) else '0'
                print(f'DOCS_ERRORS_EXPECTED={errors}')
                print('{')
                print('\n'.join(segment))
                print(f'}} > "$DOCS_OUTPUT"')
                print('DOCS_ERRORS_EXPECTED=0')
                print(f'docs_expect "{path}" <<\'DOCS_EXPECTED\'')
                print('\n'.join(expected))
                print('DOCS_EXPECTED')
            else:
                print('\n'.join(segment))
            segment.clear()
            expected.clear()
        for line in block.split('\n'):
            if line.startswith('#> ') or line == '#>':
                expected.append(line[3:])
            else:
                if expected:
                    flush()
                segment.append(line)
        flush()
print(f'# {expectations} expectations')
PY
blocks=$(grep -c '^echo "== ' "$data/walk.sh" || true)
[ "$blocks" -gt 0 ] || { echo "no block marked <!-- docs-runner -->" >&2; exit 1; }

cat > "$data/match.py" <<'PY'
import re, sys
path, shown, printed = sys.argv[1], open(sys.argv[2]).read().splitlines(), open(sys.argv[3]).read().splitlines()
def matches(pattern, line):
    return re.fullmatch('.*'.join(re.escape(part) for part in pattern.split('…')), line, re.S) is not None
if len(shown) != len(printed) or not all(matches(p, l) for p, l in zip(shown, printed)):
    print(f'docs runner: {path} shows\n  ' + '\n  '.join(shown) + '\nbut the command printed\n  ' + '\n  '.join(printed), file=sys.stderr)
    sys.exit(1)
PY
cat > "$data/run.sh" <<SH
set -euo pipefail
cumulus() { "$binary" "\$@"; }
DOCS_OUTPUT=$data/expected-output
DOCS_ERRORS_EXPECTED=0
# An answer holding CloudKit's error envelope fails the walk-through, unless the docs show that error.
curl() {
    local answer
    answer=\$(command curl --fail-with-body "\$@")
    printf '%s\n' "\$answer"
    if [ "\$DOCS_ERRORS_EXPECTED" = 0 ] && grep -q '"serverErrorCode"' <<<"\$answer"; then
        echo "docs runner: an error answer: \$answer" >&2; return 1
    fi
}
# What a command printed, against the lines the docs show after it (on standard input).
docs_expect() {
    cat > "\$DOCS_OUTPUT.shown"
    cat "\$DOCS_OUTPUT"
    python3 "$data/match.py" "\$1" "\$DOCS_OUTPUT.shown" "\$DOCS_OUTPUT"
}
SH
cat "$data/walk.sh" >> "$data/run.sh"
# In a folder of its own: the walk-throughs write files (feed.json) where they run.
mkdir -p "$data/walk"
if (cd "$data/walk" && bash "$data/run.sh") > "$data/out.log" 2> "$data/err.log"; then
    echo "docs runner: $blocks walk-throughs ran against $url; $(tail -1 "$data/walk.sh" | tr -dc 0-9) outputs were as the docs show"
else
    echo "docs runner: a walk-through failed" >&2
    tail -30 "$data/err.log" >&2
    tail -5 "$data/out.log" >&2
    # The script as it ran, to read (the data directory goes when this exits).
    cp "$data/run.sh" "${TMPDIR:-/tmp}/cumulus-docs-run.sh" && echo "docs runner: the script that ran: ${TMPDIR:-/tmp}/cumulus-docs-run.sh" >&2
    exit 1
fi
