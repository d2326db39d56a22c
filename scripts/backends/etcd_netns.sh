# shellcheck shell=bash
# etcd_net1, etcd_net2, etcd_net3: a three-member etcd cluster whose members
# each run in a network namespace of their own (bakery-etcd_netN), joined by
# a bridge on a private subnet that only this machine routes (netns.sh, shared
# with the postgres and cassandra clusters of the same kind), so that
# scripts/partition.sh can cut the network between members while every one
# of them stays up -- the fault the kill/restart cluster (etcd_m1..3) cannot
# make.  The bridge has an address in the root namespace too: clients (the
# tests) reach every member, the isolated ones included.  Needs root (ip
# netns), iproute2, iptables, and etcd from Debian as the other members.
#
# Each exports BAKERY_ETCD_NETNS_URI (the three client endpoints).  A member
# is "ready" when its peer port answers; after_start waits, when a quorum
# runs, until it serves linearizable reads.  Stopping the last member removes
# the namespaces and the bridge.  tests/partition_etcd.rs partitions it.
# (See lib.sh for the functions every server file defines.)

ETCD_NET_MEMBERS=(etcd_net1 etcd_net2 etcd_net3)

# etcd_net_ip N: member N's address (netns.sh).
etcd_net_ip() { netns_ip "etcd_net$1"; }

# shellcheck disable=SC2034  # describe (lib.sh) reads these
etcd_net_describe() {
    PIDFILE=$DIR/etcd.pid
    COMM=etcd
    LOG=$DIR/etcd.log
    # The same ports on every member, each on its own address in its own
    # namespace: nothing of theirs can be in use in this one, which is
    # where lib.sh looks (ADDRESS stays 127.0.0.1: before the bridge
    # exists, the subnet's addresses would go out by the default route).
    PORTS=(BAKERY_ETCD_NETNS_PORT=12395 BAKERY_ETCD_NETNS_PEER_PORT=12396)
}

etcd_net_missing() {
    etcd_missing
    have curl || echo curl
    netns_missing
}

# etcd_net_list FIELD [peers]: each member's ADDRESS:PORT (FIELD 1, the
# client port; 2, the peer port), or with "peers" NAME=http://ADDRESS:PORT,
# joined by commas.
etcd_net_list() {
    local n out=()
    for n in 1 2 3; do
        out+=("${2:+etcd_net$n=http://}$(etcd_net_ip "$n"):$(port_of "etcd_net$n" "$1")")
    done
    local IFS=,
    echo "${out[*]}"
}

# --initial-cluster: etcd_net1=http://10.231.77.11:12396,...
etcd_net_initial_cluster() { etcd_net_list 2 peers; }

# etcd_net_start N (after describe).  The data directory is kept across
# restarts; etcd then ignores the --initial-* flags.
etcd_net_start() {
    local n=$1 client peer
    # The member itself runs in the namespace, which only root may enter.
    netns_need_root "etcd_net$n"
    client=http://$(etcd_net_ip "$n"):$(port_of "etcd_net$n" 1)
    peer=http://$(etcd_net_ip "$n"):$(port_of "etcd_net$n" 2)
    netns_up "etcd_net$n"
    mkdir -p "$DIR/data"
    chmod 700 "$DIR/data"
    # --pre-vote: a member cut off and healed does not depose the leader
    # with the terms it ran up alone.
    netns_session "etcd_net$n" etcd --name "etcd_net$n" \
        --data-dir "$DIR/data" --logger zap --pre-vote \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "$(etcd_net_initial_cluster)" \
        --initial-cluster-token bakery-etcd-netns --initial-cluster-state new
}

etcd_net_ready() {
    netns_bridged || return 1
    curl -fsS -m 2 -o /dev/null "http://$(etcd_net_ip "$1"):$(port_of "etcd_net$1" 2)/version" </dev/null 2>/dev/null
}

etcd_net_healthy() {
    local answer
    netns_bridged || return 1
    answer=$(curl -fsS -m 2 "http://$(etcd_net_ip "$1"):$(port_of "etcd_net$1" 1)/health" </dev/null 2>/dev/null) ||
        return 1
    [[ $answer == *'"health":"true"'* ]]
}

etcd_net_after_start() { etcd_quorum_after_start "etcd_net$1" "etcd_net_healthy $1" "${ETCD_NET_MEMBERS[@]}"; }

etcd_net_uri() { echo "etcd://$(etcd_net_list 1)"; }

etcd_net_stop() {
    stop_pid "etcd_net$1" "$2"
    netns_down "etcd_net$1"
}

# The same function set for each member, naming itself.
for etcd_net_n in 1 2 3; do
    eval "
etcd_net${etcd_net_n}_describe() { etcd_net_describe $etcd_net_n; }
etcd_net${etcd_net_n}_missing() { etcd_net_missing; }
etcd_net${etcd_net_n}_install() { install_missing etcd_net${etcd_net_n}; }
etcd_net${etcd_net_n}_start() { etcd_net_start $etcd_net_n; }
etcd_net${etcd_net_n}_ready() { etcd_net_ready $etcd_net_n; }
etcd_net${etcd_net_n}_after_start() { etcd_net_after_start $etcd_net_n; }
etcd_net${etcd_net_n}_uri() { etcd_net_uri; }
etcd_net${etcd_net_n}_env_var() { echo BAKERY_ETCD_NETNS_URI; }
etcd_net${etcd_net_n}_stop() { etcd_net_stop $etcd_net_n \"\$1\"; }
"
done
unset etcd_net_n
