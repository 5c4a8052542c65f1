#!/bin/sh
# First start: initdb with the password from the environment, create POSTGRES_DB, run
# /docker-entrypoint-initdb.d/*.sql; every start: run postgres as the postgres user.
set -eu
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
[ "${1:-postgres}" = postgres ] || exec "$@"
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
[ -n "${POSTGRES_PASSWORD:-}" ] || { echo "POSTGRES_PASSWORD is not set" >&2; exit 1; }
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp)
  printf '%s' "$POSTGRES_PASSWORD" >"$pw"
  chown postgres "$pw"
  as_pg initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  # Init scripts run on the unix socket only, so no client sees a half-initialised server.
  as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    as_pg psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -qc "CREATE DATABASE \"$POSTGRES_DB\""
  fi
  for f in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$f" ] && as_pg psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -qf "$f"
  done
  as_pg pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*'
