# Sourced by the PostgreSQL set-up scripts: run a command as root, or as the postgres user (PostgreSQL refuses to run as
# root), whether this shell is root or a user with sudo.
if [ "$(id -u)" = "0" ]; then
    as_root() { "$@"; }
    as_postgres() { su -s /bin/bash postgres -c "$(printf '%q ' "$@")"; }
else
    as_root() { sudo "$@"; }
    as_postgres() { sudo -u postgres "$@"; }
fi
