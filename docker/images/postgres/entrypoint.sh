#!/bin/sh
# Initializes $PGDATA on first start (trust auth, database $POSTGRES_DB,
# made while the server listens on its socket only), then runs postgres on
# every address with fsync on and the arguments given (the official image's
# form: `postgres -c name=value ...`).
set -eu
[ "${1:-}" = postgres ] && shift
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    install -d -o postgres -g postgres -m 700 "$PGDATA"
    as_postgres initdb -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    printf 'host all all 0.0.0.0/0 trust\nhost all all ::/0 trust\n' >>"$PGDATA/pg_hba.conf"
    as_postgres pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -k /tmp" start >/dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        as_postgres psql -h /tmp -U postgres -d postgres -v ON_ERROR_STOP=1 -qc "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    as_postgres pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
fi
install -d -o postgres -g postgres /var/run/postgresql
exec setpriv --reuid=postgres --regid=postgres --init-groups \
    postgres -D "$PGDATA" -c listen_addresses='*' -c fsync=on -c full_page_writes=on "$@"
