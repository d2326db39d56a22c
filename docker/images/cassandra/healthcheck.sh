#!/bin/bash
# be32's \x escapes are meant for printf's format, which turns them into bytes.
# shellcheck disable=SC2059
# CQL protocol v4 by hand (no cqlsh here): STARTUP must be answered READY,
# then CREATE KEYSPACE IF NOT EXISTS bakery must be answered RESULT.  The
# CQL port opens last, when start-up is done.
set -euo pipefail
query="CREATE KEYSPACE IF NOT EXISTS bakery WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
be32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }
hex() { od -An -v -tx1 | tr -s ' \n' '  '; }
# The node's CQL port is on the container's address (rpc_address), as a
# native node's is on its own.
exec 3<>"/dev/tcp/$(hostname -i | awk '{print $1}')/9042"
# STARTUP {CQL_VERSION: 3.0.0}: a string map of 22 bytes.
printf "\\x04\\x00\\x00\\x00\\x01$(be32 22)\\x00\\x01\\x00\\x0bCQL_VERSION\\x00\\x053.0.0" >&3
ready=$(dd bs=1 count=9 <&3 2>/dev/null | hex)
[[ $ready == " 84 00 00 00 02 00 00 00 00"* ]] || exit 1
# QUERY: long string, consistency ONE, no flags.
printf "\\x04\\x00\\x00\\x01\\x07$(be32 $((4 + ${#query} + 3)))$(be32 ${#query})%s\\x00\\x01\\x00" "$query" >&3
result=$(dd bs=1 count=5 <&3 2>/dev/null | hex)
[[ $result == " 84 00 00 01 08"* ]]
