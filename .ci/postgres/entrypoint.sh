#!/bin/bash
# The stand-in postgres image's entrypoint (see Containerfile): on an empty
# PGDATA, initdb with POSTGRES_USER as the superuser and POSTGRES_PASSWORD as
# its password, then POSTGRES_DB created; then the server in the foreground,
# listening on every address of the container. Extra arguments go to
# postgres (`-c name=value`).
set -euo pipefail
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
export PGDATA="${PGDATA:-/var/lib/postgresql/data}"

if [ "$(id -u)" = 0 ]; then
  # A new volume is root's: hand it to postgres, then drop to that user.
  mkdir -p "$PGDATA" /run/postgresql
  chown postgres:postgres "$PGDATA" /run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  echo "initialising the cluster in $PGDATA for $POSTGRES_USER, database $POSTGRES_DB"
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" >/dev/null
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  # Not on TCP while it is being set up: a client sees "refused" until the
  # database exists, never a half-made cluster.
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    createdb --username="$POSTGRES_USER" "$POSTGRES_DB"
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "cluster initialised"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
