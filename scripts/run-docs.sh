#!/usr/bin/env bash
# Runs the documentation's walk-throughs as a reader would paste them, one after the other, against a fresh
# `cumulus serve`: every shell block marked `<!-- docs-runner -->` in README.md, docs/SHARING.md and docs/LINKS.md, in
# that order, in one shell. A command that fails, or an answer holding a `serverErrorCode`, fails the run.
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

# The blocks, with the docs' address replaced by this server's and their own `cumulus` definition by this binary.
python3 - "$url" README.md docs/SHARING.md docs/LINKS.md > "$data/walk.sh" <<'PY'
import re, sys
url, files = sys.argv[1], sys.argv[2:]
for path in files:
    text = open(path).read()
    for block in re.findall(r'<!-- docs-runner -->\n```sh\n(.*?)```', text, re.S):
        print(f'echo "== {path}" >&2')
        block = re.sub(r'^cumulus\(\) \{.*$', '', block, flags=re.M)
        print(block.replace('http://127.0.0.1:8080', url))
PY
blocks=$(grep -c '^echo "== ' "$data/walk.sh" || true)
[ "$blocks" -gt 0 ] || { echo "no block marked <!-- docs-runner -->" >&2; exit 1; }

cat > "$data/run.sh" <<SH
set -euo pipefail
cumulus() { "$binary" "\$@"; }
# An answer holding CloudKit's error envelope fails the walk-through.
curl() {
    local answer
    answer=\$(command curl --fail-with-body "\$@")
    printf '%s\n' "\$answer"
    if grep -q '"serverErrorCode"' <<<"\$answer"; then echo "docs runner: an error answer: \$answer" >&2; return 1; fi
}
SH
cat "$data/walk.sh" >> "$data/run.sh"
if bash "$data/run.sh" > "$data/out.log" 2> "$data/err.log"; then
    echo "docs runner: $blocks walk-throughs ran against $url"
else
    echo "docs runner: a walk-through failed" >&2
    tail -30 "$data/err.log" >&2
    tail -5 "$data/out.log" >&2
    exit 1
fi
