#!/bin/bash
# PostgreSQL (the parent image's entry point, database ferretdb, on
# 127.0.0.1 only) in the background, then FerretDB in the foreground once
# PostgreSQL answers; when either ends the container ends (a FerretDB
# without its PostgreSQL would still answer pings).
set -euo pipefail
bakery-postgres postgres -c wal_level=logical -c max_connections=200 -c listen_addresses=127.0.0.1 &
pg=$!
for _ in $(seq 1 600); do
    if psql -h 127.0.0.1 -U postgres -d ferretdb -Atqc 'SELECT 1' >/dev/null 2>&1; then break; fi
    kill -0 "$pg" 2>/dev/null || exit 1
    sleep 0.1
done
# Arguments go to ferretdb after these (a later -listen wins).
ferretdb -listen 0.0.0.0:27017 -postgresql-url postgres://postgres@127.0.0.1:5432/ferretdb "$@" &
fdb=$!
trap 'kill -TERM "$fdb" "$pg" 2>/dev/null' TERM INT
set +e
wait -n "$fdb" "$pg"
code=$?
kill -TERM "$fdb" "$pg" 2>/dev/null
wait
exit "$code"
