#!/bin/sh
# PONG, and the append-only file is on (the server runs as it was asked to).
[ "$(redis-cli -h 127.0.0.1 ping)" = PONG ] || exit 1
redis-cli -h 127.0.0.1 config get appendonly | grep -qx yes
