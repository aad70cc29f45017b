#!/usr/bin/env bash
# Prepares Debian's PostgreSQL for the test suites and prints the line that points them at it:
#
#   eval "$(scripts/setup-postgres.sh)"     # then: swift test
#
# Starts the first cluster `pg_lsclusters` lists (whatever its version; PostgreSQL refuses to run as root, so through
# pg_ctlcluster), allows 1,000 connections (suites run side by side, each over a database of its own: a full run peaks
# near 400, and a store whose pool cannot connect backs off for up to a minute), and creates the role `cumulus`
# (password `cumulus`, may create databases) and the database `cumulus_test`. Runs as root, or as a user with sudo.
# Prints nothing on standard output but the export line; `.ci/run` uses it too.
set -euo pipefail

# shellcheck source=scripts/postgres-common.sh
. "$(dirname "$0")/postgres-common.sh"

command -v pg_lsclusters >/dev/null 2>&1 || { echo "PostgreSQL is not installed: apt-get install -y postgresql" >&2; exit 1; }
cluster=$(pg_lsclusters --no-header | awk 'NR == 1 { print $1 " " $2 }')
[ -n "$cluster" ] || { echo "no PostgreSQL cluster: pg_createcluster 15 main" >&2; exit 1; }
version=${cluster% *}
name=${cluster#* }
echo "max_connections = 1000" | as_root tee "/etc/postgresql/$version/$name/conf.d/cumulus-tests.conf" >/dev/null
as_root pg_ctlcluster "$version" "$name" restart 2>/dev/null || as_root pg_ctlcluster "$version" "$name" start >&2
port=$(pg_lsclusters --no-header | awk -v v="$version" -v n="$name" '$1 == v && $2 == n { print $3 }')
make_test_role "${port:-5432}"
echo "export CUMULUS_TEST_POSTGRES='postgres://cumulus:cumulus@127.0.0.1:${port:-5432}/cumulus_test?sslmode=disable'"
