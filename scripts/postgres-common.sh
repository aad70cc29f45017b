# Sourced by the PostgreSQL set-up scripts: run a command as root, or as the postgres user (PostgreSQL refuses to run as
# root), whether this shell is root or a user with sudo.
if [ "$(id -u)" = "0" ]; then
    as_root() { "$@"; }
    as_postgres() { su -s /bin/bash postgres -c "$(printf '%q ' "$@")"; }
else
    as_root() { sudo "$@"; }
    as_postgres() { sudo -u postgres "$@"; }
fi

# The role the suites connect as (password `cumulus`, may create databases), on the cluster at port $1, and the
# database `cumulus_test` it owns.
make_test_role() {
    as_postgres psql -p "$1" -q -v ON_ERROR_STOP=1 -c "DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'cumulus') THEN
        CREATE ROLE cumulus LOGIN SUPERUSER PASSWORD 'cumulus';
    END IF;
END \$\$;" >&2
    as_postgres createdb -p "$1" -O cumulus cumulus_test 2>/dev/null || true
}
