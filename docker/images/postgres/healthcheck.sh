#!/bin/sh
# A query in $POSTGRES_DB over TCP: the first-boot server listens on its
# socket only, so TCP answering means the real server is up.
exec psql -h 127.0.0.1 -U postgres -d "$POSTGRES_DB" -Atqc 'SELECT 1' >/dev/null
