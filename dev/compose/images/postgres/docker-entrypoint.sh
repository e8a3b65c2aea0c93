#!/usr/bin/env bash
# The image's entrypoint: on an empty PGDATA, initdb (UTF-8) with POSTGRES_USER and POSTGRES_PASSWORD, create
# POSTGRES_DB, run /docker-entrypoint-initdb.d/* against a server that listens on its socket only; then run the
# server as user postgres, listening on every address with password authentication.
set -Eeuo pipefail
if [ "${1:0:1}" = '-' ]; then set -- postgres "$@"; fi
if [ "$1" != postgres ]; then exec "$@"; fi

if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA" && chmod 700 "$PGDATA"
  chown postgres:postgres "$(dirname "$PGDATA")"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
export POSTGRES_USER POSTGRES_DB
sockets="unix_socket_directories=/var/run/postgresql,/tmp"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?the database is uninitialised and POSTGRES_PASSWORD is not set}"
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    --encoding=UTF8 --locale=C.UTF-8 ${POSTGRES_INITDB_ARGS:-} -D "$PGDATA"
  printf '\nhost all all all %s\n' "${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >>"$PGDATA/pg_hba.conf"
  PGUSER=$POSTGRES_USER PGPASSWORD=$POSTGRES_PASSWORD pg_ctl -D "$PGDATA" -w \
    -o "-c listen_addresses='' -c $sockets" start
  export PGHOST=/var/run/postgresql PGUSER=$POSTGRES_USER PGPASSWORD=$POSTGRES_PASSWORD
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 --dbname postgres -v db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh) if [ -x "$f" ]; then echo "running $f"; "$f"; else echo "sourcing $f"; . "$f"; fi ;;
      *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 --dbname "$POSTGRES_DB" -f "$f" ;;
      *) [ -e "$f" ] && echo "ignoring $f" ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop
  unset PGHOST PGUSER PGPASSWORD
  echo "PostgreSQL init process complete; ready for start up."
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c "$sockets" "${@:2}"
