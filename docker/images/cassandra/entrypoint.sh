#!/bin/bash
# One Cassandra node on the container's address, CQL on 9042, configured and
# run as scripts/backends/cassandra.sh runs a native node: its
# cassandra_config (cassandra.yaml: one token, commitlog_sync batch, Paxos
# v2; logback.xml) and cassandra_jvm_options (the JVM command line), from a
# copy of that file scripts/docker.sh puts in the image.  Written at every
# start; data in /var/lib/cassandra.  What differs here:
# - the jars are in /opt/cassandra/lib, and the heap is $HEAP;
# - the node tells clients to reach it at CASSANDRA_BROADCAST_RPC_ADDRESS
#   (127.0.0.1 by default, the official image's variable): drivers connect
#   to the address a node advertises, on the port they first used, so a
#   client on the host, through a published port, must be told 127.0.0.1,
#   not the container's address;
# - the log file is the container's output (`docker logs`).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../scripts/backends/cassandra.sh
. /usr/local/lib/bakery/cassandra.sh
cassandra_lib() { echo /opt/cassandra/lib; }
dir=/var/lib/cassandra
address=$(hostname -i | awk '{print $1}')
mkdir -p "$dir"/{data,commitlog,saved_caches,hints,cdc_raw,triggers}
cassandra_config "$dir" bakery "$address" 7000 9042 "$address" \
    "initial_token: 0
broadcast_rpc_address: ${CASSANDRA_BROADCAST_RPC_ADDRESS:-127.0.0.1}"
ln -sfn /dev/stdout "$dir/system.log"
cassandra_jvm_options "$dir" "${HEAP:?set by the Dockerfile}" 7199
exec java "${opts[@]}"
