#!/bin/sh
# `redis-server ARGS` (the official image's form) runs with its data in
# /data and protected mode off: without a config file Redis refuses clients
# from other addresses, and a published port arrives from the bridge.
set -eu
if [ "${1:-}" = redis-server ]; then
    shift
    exec redis-server --dir /data --protected-mode no "$@"
fi
exec "$@"
