#!/usr/bin/env bash
# Fuzzes a real `cumulus serve` from its own /openapi.json with schemathesis (https://schemathesis.io): every operation
# gets generated requests, valid and invalid; the run fails on a 5xx, a crash, or an answer its description does not
# allow (status, content type, body schema). Needs python3 with venv; installs schemathesis into .build/fuzz-venv.
#
#   scripts/fuzz-openapi.sh [path-to-cumulus]     # default .build/debug/cumulus
#
# CUMULUS_FUZZ_DATABASE=postgres://… fuzzes a server over that (empty) PostgreSQL database instead of a SQLite directory;
# CUMULUS_FUZZ_SEED sets the generator's seed (1 by default, so a failing run can be repeated as it was).
set -euo pipefail
cd "$(dirname "$0")/.."
cumulus=${1:-.build/debug/cumulus}
examples=${CUMULUS_FUZZ_EXAMPLES:-25}
seed=${CUMULUS_FUZZ_SEED:-1}

venv=.build/fuzz-venv
if [ ! -x "$venv/bin/st" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'schemathesis>=4.3,<5'
fi

data=$(mktemp -d)
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$data"' EXIT
container=iCloud.com.example.fuzz
if [ -n "${CUMULUS_FUZZ_DATABASE:-}" ]; then store=(--database "$CUMULUS_FUZZ_DATABASE"); else store=(--data "$data"); fi
"$cumulus" containers create "$container" --create "${store[@]}" >/dev/null   # the store, made before the server first starts
export CUMULUS_FUZZ_API_TOKEN=$("$cumulus" tokens create --container "$container" "${store[@]}")
"$cumulus" users create fuzzer --container "$container" --password 'fuzzing password' "${store[@]}" >/dev/null
export CUMULUS_FUZZ_WEB_AUTH_TOKEN=$("$cumulus" users token fuzzer --container "$container" "${store[@]}")

# The request limit is off: the fuzzer is one caller sending as fast as it can, and a refusal is a 503.
"$cumulus" serve --port 0 "${store[@]}" --requests-per-second 0 --log-level warning > "$data/url" 2> "$data/server.log" &
server=$!
for _ in $(seq 100); do [ -s "$data/url" ] && break; sleep 0.1; done
url=$(head -1 "$data/url")
# A console session, so the console's pages are fuzzed signed in too.
signin=$("$cumulus" console --container "$container" "${store[@]}" --url "$url")
export CUMULUS_FUZZ_CONSOLE_SESSION=$(curl -s -o /dev/null -D - "$signin" | tr -d '\r' | sed -n 's/^[Ss]et-[Cc]ookie: cumulus_console=\([^;]*\).*/\1/p')
[ -n "$CUMULUS_FUZZ_CONSOLE_SESSION" ] || { echo "could not sign in to the console"; exit 1; }
echo "fuzzing $url/openapi.json (${store[0]#--}) with schemathesis $("$venv/bin/st" --version | awk '{print $NF}'), $examples examples per operation, seed $seed"

cat > "$data/schemathesis.toml" <<TOML
[generation]
max-examples = $examples
[parameters]
container = "$container"
environment = "development"
[auth.openapi.ckAPIToken]
api_key = "\${CUMULUS_FUZZ_API_TOKEN}"
[auth.openapi.ckWebAuthToken]
api_key = "\${CUMULUS_FUZZ_WEB_AUTH_TOKEN}"
[auth.openapi.consoleSession]
api_key = "\${CUMULUS_FUZZ_CONSOLE_SESSION}"
TOML

# negative_data_rejection and positive_data_acceptance are left out on purpose: Cumulus is lenient on input, as real
# CloudKit clients differ (unknown members are ignored), and a request valid by the schema can still be refused by the
# data it names (a zone that does not exist).
status=0
"$venv/bin/st" --config-file "$data/schemathesis.toml" run "$url/openapi.json" --url "$url" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance \
    --phases examples,coverage,fuzzing --workers 1 --request-timeout 90 --seed "$seed" --no-color || status=$?
if ! kill -0 "$server" 2>/dev/null; then
    echo "the server exited during the fuzzing run:"; tail -50 "$data/server.log"; exit 1
fi
exit $status
