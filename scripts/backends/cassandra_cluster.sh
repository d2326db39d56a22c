# shellcheck shell=bash
# cassandra_n1, cassandra_n2, cassandra_n3: a three-node Cassandra cluster on
# the loopback addresses 127.0.0.2, 127.0.0.3 and 127.0.0.4 (Linux routes all
# of 127.0.0.0/8 to lo, no setup needed), apart from the one-node `cassandra`
# server on 127.0.0.1.  Same jars and JDK as cassandra.sh (its install, its
# cache directory: nothing is downloaded twice).  Each node is a server of its
# own (pid, JMX port, data directory under the scratch directory), so
# `kill cassandra_n2` and `start cassandra_n2` act on one node.  All three
# share the CQL and storage ports (each on its own address: the driver
# reaches the peers it discovers on the port of its contact point), one
# cluster name, node 1 as the seed, one token each (evenly spaced, so each
# node is the first replica of a third of the ring), commitlog_sync batch
# and Paxos v2 like the one-node server, a 512 MB heap.
#
# Each exports BAKERY_CASSANDRA_CLUSTER_URI, which lists the three nodes and
# asks for keyspace bakery_cluster with replication_factor 3 (bakery creates
# it): SERIAL and QUORUM need 2 of the 3 replicas, so the cluster serves
# conditional writes with any one node down.  tests/cluster_cassandra.rs
# kills one node mid-run and restarts it.
#
# The nodes never stream: they start with auto_bootstrap false and their own
# initial_token, which is right for a cluster whose nodes are first started
# together, empty.  A node whose data directory is removed while the others
# keep theirs is refused by Cassandra ("a node with address … already
# exists"): stop all three and remove their directories to start afresh.
# (See lib.sh for the functions every server file defines.)

# Murmur3 tokens -2^63 + i * 2^64 / 3: an even split of the ring.
CASSANDRA_NODE_TOKENS=(-9223372036854775808 -3074457345618258603 3074457345618258602)

# cassandra_node_ip N: the address of node N (1, 2, 3).
cassandra_node_ip() { echo "127.0.0.$(($1 + 1))"; }

# cassandra_node_describe N JMX_PORT: the settings of node cassandra_nN.
# shellcheck disable=SC2034  # describe (lib.sh) reads these
cassandra_node_describe() {
    PIDFILE=$DIR/cassandra.pid
    COMM=java
    LOG=$DIR/system.log
    ADDRESS=$(cassandra_node_ip "$1")
    # The CQL and storage ports are the same on every node (on its own
    # address); the JMX port, on 127.0.0.1, is each node's own.
    PORTS=(BAKERY_CASSANDRA_CLUSTER_PORT=19043 BAKERY_CASSANDRA_CLUSTER_STORAGE_PORT=17010
        "BAKERY_CASSANDRA_N$1_JMX_PORT=$2")
    READY_TIMEOUT=$((TIMEOUT > 180 ? TIMEOUT : 180))
}

cassandra_n1_describe() { cassandra_node_describe 1 17201; }
cassandra_n2_describe() { cassandra_node_describe 2 17202; }
cassandra_n3_describe() { cassandra_node_describe 3 17203; }

# cassandra_node_config N DIR: cassandra.yaml and logback.xml of node N, as
# the one-node server's but for its address, cluster, seed and token.  The
# nodes are first started together, empty: nothing to stream, so no
# bootstrap.
cassandra_node_config() {
    local n=$1 dir=$2
    cassandra_config "$dir" bakery_cluster "$(cassandra_node_ip "$n")" \
        "$(port_of "cassandra_n$n" 2)" "$(port_of "cassandra_n$n" 1)" \
        "$(cassandra_node_ip 1):$(port_of cassandra_n1 2)" \
        "initial_token: ${CASSANDRA_NODE_TOKENS[n - 1]}
auto_bootstrap: false"
}

# cassandra_node_start N (after cassandra_nN_describe).  The data directory
# is kept across restarts.  The JVM flags are cassandra.sh's with a 512 MB
# heap and the node's own JMX port.
cassandra_node_start() {
    local n=$1 name=cassandra_n$1 dir java opts
    dir=$(dir_of "$name")
    java=$(cassandra_java)
    mkdir -p "$dir"/{data,commitlog,saved_caches,hints,cdc_raw,triggers}
    cassandra_node_config "$n" "$dir"
    cassandra_jvm_options "$dir" 512m "$(port_of "$name" 3)"
    launch_session -C "$dir" "$java" "${opts[@]}"
}

# A CQL OPTIONS request to the node's own address (lib.sh's wire_reply asks
# 127.0.0.1 only); a SUPPORTED reply is 84 00 00 00 06.  Cassandra opens the
# CQL port last, when it has joined the ring.
cassandra_node_ready() {
    local n=$1 reply
    # shellcheck disable=SC2016  # $0..$1 expand in the inner shell
    reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "\x04\x00\x00\x00\x05\x00\x00\x00\x00" >&3 && head -c 5 <&3' \
        "$(cassandra_node_ip "$n")" "$(port_of "cassandra_n$n")" </dev/null 2>/dev/null | od -An -v -tx1 | tr -s ' \n' '  ')
    [[ $reply == " 84 00 00 00 06"* ]]
}

# The keyspace (replication_factor 3, from the URI) is created by the
# cassandra crate, not here.
cassandra_node_after_start() { :; }

cassandra_node_uri() {
    local n hosts=()
    for n in 1 2 3; do hosts+=("$(cassandra_node_ip "$n"):$(port_of "cassandra_n$n")"); done
    local IFS=,
    echo "cassandra://${hosts[*]}/bakery_cluster?replication=rf=3"
}

# The same function set for each node, naming itself.
for cassandra_node in 1 2 3; do
    eval "
cassandra_n${cassandra_node}_missing() { cassandra_missing; }
cassandra_n${cassandra_node}_install() { cassandra_install; }
cassandra_n${cassandra_node}_start() { cassandra_node_start $cassandra_node; }
cassandra_n${cassandra_node}_ready() { cassandra_node_ready $cassandra_node; }
cassandra_n${cassandra_node}_after_start() { cassandra_node_after_start; }
cassandra_n${cassandra_node}_uri() { cassandra_node_uri; }
cassandra_n${cassandra_node}_env_var() { echo BAKERY_CASSANDRA_CLUSTER_URI; }
cassandra_n${cassandra_node}_stop() { stop_pid cassandra_n$cassandra_node \"\$1\"; }
"
done
unset cassandra_node
