#!/usr/bin/env bash
# Makes a second, independent PostgreSQL server for the shard suites (databases spread over two servers), and prints the
# line that points them at it:
#
#   eval "$(scripts/setup-postgres.sh)"; eval "$(scripts/setup-postgres-second.sh)"     # then: swift test
#
# A Debian cluster `second` on the first cluster's port + 2 (the replica takes + 1), with the same role `cumulus`
# (password `cumulus`, may create databases). Made once; run again, it only starts it. Runs as root, or with sudo.
set -euo pipefail

# shellcheck source=scripts/postgres-common.sh
. "$(dirname "$0")/postgres-common.sh"

first=$(pg_lsclusters --no-header | awk '$2 != "replica" && $2 != "second" { print $1 " " $3; exit }')
[ -n "$first" ] || { echo "no PostgreSQL cluster: run scripts/setup-postgres.sh first" >&2; exit 1; }
read -r version first_port <<<"$first"

if ! pg_lsclusters --no-header | awk '$2 == "second"' | grep -q .; then
    as_root pg_createcluster "$version" second -p "$((first_port + 2))" >/dev/null
fi
echo "max_connections = 1000" | as_root tee "/etc/postgresql/$version/second/conf.d/cumulus-tests.conf" >/dev/null
# A restart takes a changed limit; a cluster that was stopped just starts.
as_root pg_ctlcluster "$version" second restart >/dev/null 2>&1 || as_root pg_ctlcluster "$version" second start >/dev/null 2>&1 || true
port=$(pg_lsclusters --no-header | awk '$2 == "second" { print $3 }')
for _ in $(seq 1 30); do
    as_postgres psql -p "$port" -Atc "SELECT 1" >/dev/null 2>&1 && break
    sleep 1
done
make_test_role "$port"
echo "export CUMULUS_TEST_POSTGRES_SECOND='postgres://cumulus:cumulus@127.0.0.1:${port}/cumulus_test?sslmode=disable'"
