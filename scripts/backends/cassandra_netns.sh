# shellcheck shell=bash
# cassandra_net1, cassandra_net2, cassandra_net3: a three-node Cassandra
# cluster whose nodes each run in a network namespace of their own on the
# private bridge of netns.sh (10.231.77.31, .32, .33), so that
# scripts/partition.sh can cut the network between nodes while every one
# stays up -- apart from cassandra_n1..3 (loopback addresses, killed and
# restarted by tests/cluster_cassandra.rs), configured as those are
# (cassandra_cluster.sh's tokens; cassandra.sh's jars, JDK, yaml and JVM
# flags: commitlog_sync batch, Paxos v2, a 512 MB heap).  Node 1 is the
# seed; each node's JMX port is on 127.0.0.1 of its own namespace.
#
# Each exports BAKERY_CASSANDRA_NETNS_URI: the three nodes, keyspace
# bakery_netns with replication_factor 3 (bakery creates it), so SERIAL and
# QUORUM need 2 of the 3 replicas.  Needs root (ip netns), iproute2 and iptables.
# The data directories are kept across restarts; to start afresh, stop all
# three and remove them (cassandra_cluster.sh says why).
# tests/partition_cassandra.rs partitions it.  (See lib.sh for the functions
# every server file defines.)

# shellcheck disable=SC2034  # describe (lib.sh) reads these
cassandra_net_describe() {
    PIDFILE=$DIR/cassandra.pid
    COMM=java
    LOG=$DIR/system.log
    # The CQL and storage ports are the same on every node, each on its own
    # address in its own namespace (ADDRESS stays 127.0.0.1, where lib.sh
    # looks for a port in use); the JMX port is each node's own.
    PORTS=(BAKERY_CASSANDRA_NETNS_PORT=19044 BAKERY_CASSANDRA_NETNS_STORAGE_PORT=17020
        "BAKERY_CASSANDRA_NET$1_JMX_PORT=$((17210 + $1))")
    READY_TIMEOUT=$((TIMEOUT > 180 ? TIMEOUT : 180))
}

cassandra_net_missing() {
    cassandra_missing
    netns_missing
}

# cassandra_net_start N (after describe).
cassandra_net_start() {
    local n=$1 name=cassandra_net$1 dir java opts
    netns_need_root "$name"
    netns_up "$name"
    dir=$(dir_of "$name")
    java=$(cassandra_java)
    mkdir -p "$dir"/{data,commitlog,saved_caches,hints,cdc_raw,triggers}
    cassandra_config "$dir" bakery_netns "$(netns_ip "$name")" \
        "$(port_of "$name" 2)" "$(port_of "$name" 1)" \
        "$(netns_ip cassandra_net1):$(port_of cassandra_net1 2)" \
        "initial_token: ${CASSANDRA_NODE_TOKENS[n - 1]}
auto_bootstrap: false"
    cassandra_jvm_options "$dir" 512m "$(port_of "$name" 3)"
    netns_session "$name" -C "$dir" "$java" "${opts[@]}"
}

# A CQL OPTIONS request to the node's address; a SUPPORTED reply is
# 84 00 00 00 06.  Cassandra opens the CQL port last, when it has joined
# the ring.
cassandra_net_ready() {
    local reply
    netns_bridged || return 1
    # shellcheck disable=SC2016  # $0..$1 expand in the inner shell
    reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "\x04\x00\x00\x00\x05\x00\x00\x00\x00" >&3 && head -c 5 <&3' \
        "$(netns_ip "cassandra_net$1")" "$(port_of "cassandra_net$1")" </dev/null 2>/dev/null | od -An -v -tx1 | tr -s ' \n' '  ')
    [[ $reply == " 84 00 00 00 06"* ]]
}

cassandra_net_uri() {
    local n hosts=()
    for n in 1 2 3; do hosts+=("$(netns_ip "cassandra_net$n"):$(port_of "cassandra_net$n")"); done
    local IFS=,
    echo "cassandra://${hosts[*]}/bakery_netns?replication=rf=3"
}

cassandra_net_stop() {
    stop_pid "cassandra_net$1" "$2"
    netns_down "cassandra_net$1"
}

# The same function set for each node, naming itself.
for cassandra_net_n in 1 2 3; do
    eval "
cassandra_net${cassandra_net_n}_describe() { cassandra_net_describe $cassandra_net_n; }
cassandra_net${cassandra_net_n}_missing() { cassandra_net_missing; }
cassandra_net${cassandra_net_n}_install() { cassandra_install; }
cassandra_net${cassandra_net_n}_start() { cassandra_net_start $cassandra_net_n; }
cassandra_net${cassandra_net_n}_ready() { cassandra_net_ready $cassandra_net_n; }
cassandra_net${cassandra_net_n}_after_start() { :; }
cassandra_net${cassandra_net_n}_uri() { cassandra_net_uri; }
cassandra_net${cassandra_net_n}_env_var() { echo BAKERY_CASSANDRA_NETNS_URI; }
cassandra_net${cassandra_net_n}_stop() { cassandra_net_stop $cassandra_net_n \"\$1\"; }
"
done
unset cassandra_net_n
