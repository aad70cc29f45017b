#!/usr/bin/env bash
# Makes a streaming replica of the PostgreSQL cluster scripts/setup-postgres.sh prepared, for the read-replica suites,
# and prints the line that points them at it:
#
#   eval "$(scripts/setup-postgres.sh)"; eval "$(scripts/setup-postgres-replica.sh)"     # then: swift test
#
# A second Debian cluster, `replica`, on the next free port, made with pg_basebackup from the first (-R: it follows the
# primary as a hot standby). Made once; run again, it only starts it. The primary keeps 1 GB of log for a replica that
# was stopped (no replication slot: a replica left stopped never fills the disk). Runs as root, or with sudo.
set -euo pipefail

# shellcheck source=scripts/postgres-common.sh
. "$(dirname "$0")/postgres-common.sh"

primary=$(pg_lsclusters --no-header | awk '$2 != "replica" { print $1 " " $2 " " $3; exit }')
[ -n "$primary" ] || { echo "no PostgreSQL cluster: run scripts/setup-postgres.sh first" >&2; exit 1; }
read -r version name primary_port <<<"$primary"

# The primary: WAL kept for a replica that falls behind or was stopped (wal_level and senders are the defaults).
conf="/etc/postgresql/$version/$name/conf.d/cumulus-replication.conf"
if [ ! -f "$conf" ]; then
    echo "wal_keep_size = 1GB" | as_root tee "$conf" >/dev/null
    as_root pg_ctlcluster "$version" "$name" reload >&2
fi

make_replica() {
    port=$((primary_port + 1))
    as_root pg_createcluster "$version" replica -p "$port" >/dev/null
    data=$(pg_lsclusters --no-header | awk '$2 == "replica" { print $6 }')
    as_postgres bash -c "rm -rf '$data' && PGPASSWORD=cumulus pg_basebackup -h 127.0.0.1 -p $primary_port -U cumulus -D '$data' -R -X stream -c fast" >&2
    connection_limit
}

# A hot standby needs at least the primary's connection limit.
connection_limit() {
    echo "max_connections = 1000" | as_root tee "/etc/postgresql/$version/replica/conf.d/cumulus-tests.conf" >/dev/null
}

if ! pg_lsclusters --no-header | awk '$2 == "replica"' | grep -q .; then
    make_replica
else
    # The start below takes a changed limit.
    connection_limit
    as_root pg_ctlcluster "$version" replica stop >/dev/null 2>&1 || true
fi
# A standby is only a copy: one that cannot start (a machine stopped mid-replay can leave it so) is made again.
if ! as_root pg_ctlcluster "$version" replica start >/dev/null 2>&1 \
    && ! pg_lsclusters --no-header | awk '$2 == "replica" { print $4 }' | grep -q online; then
    echo "the replica cannot start: making it again from the primary" >&2
    as_root pg_dropcluster "$version" replica --stop >/dev/null 2>&1 || true
    make_replica
    as_root pg_ctlcluster "$version" replica start >/dev/null
fi
port=$(pg_lsclusters --no-header | awk '$2 == "replica" { print $3 }')
# Ready once it answers (it first replays what the primary wrote while it was made).
for _ in $(seq 1 60); do
    PGPASSWORD=cumulus psql -h 127.0.0.1 -p "$port" -U cumulus -d postgres -Atc "SELECT pg_is_in_recovery()" 2>/dev/null | grep -q t && break
    sleep 1
done
echo "export CUMULUS_TEST_POSTGRES_REPLICA='postgres://cumulus:cumulus@127.0.0.1:${port}/cumulus_test?sslmode=disable'"
