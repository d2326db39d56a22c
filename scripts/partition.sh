#!/usr/bin/env bash
# Network partitions between the members of a cluster whose members each run
# in a network namespace of their own (scripts/backends/netns.sh), while
# every member stays up.  CLUSTER is etcd (etcd_net1..3), postgres
# (postgres_net1, the primary, and postgres_net2, its standby) or
# cassandra (cassandra_net1..3); without it,
# $BAKERY_PARTITION_CLUSTER, else etcd.  A cut is a blackhole route in a
# member's namespace: what it sends to that peer is dropped (its TCP
# connections to and from the peer then stall both ways; a one-way cut
# still delivers the peer's packets to it).  The bridge's address in the
# root namespace, where the clients are, is never cut, except by `cutoff`.
#
#   scripts/partition.sh [CLUSTER] isolate N    N cut from every other member, both ways
#   scripts/partition.sh [CLUSTER] split        every member cut from every other
#                                               (1|1|1; with two members, 1|1)
#   scripts/partition.sh [CLUSTER] oneway N M   N's packets to M dropped; M's still reach N
#   scripts/partition.sh [CLUSTER] cutoff N     N isolated, and cut from the clients too (the
#                                               root namespace), both ways
#   scripts/partition.sh [CLUSTER] heal         every cut of CLUSTER removed
#   scripts/partition.sh [CLUSTER] show         its cuts, one line each ("N -> M")
#
# N and M count from 1 in the cluster's member order.  Needs root (ip netns
# exec) and iproute2; the members must be running.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=backends/lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/backends/lib.sh"
# shellcheck source-path=SCRIPTDIR source=backends/netns.sh
. "$SERVERS_DIR/netns.sh"

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$ROOT/scripts/partition.sh" >&2
    exit 2
}

CLUSTER=${BAKERY_PARTITION_CLUSTER:-etcd}
if [[ " ${NETNS_CLUSTERS[*]} " == *" ${1:-} "* ]]; then
    CLUSTER=$1
    shift
fi
[[ " ${NETNS_CLUSTERS[*]} " == *" $CLUSTER "* ]] ||
    die "partition: no cluster $CLUSTER (${NETNS_CLUSTERS[*]})"
mapfile -t NAMES < <(netns_members "$CLUSTER")
MEMBERS=()
for i in "${!NAMES[@]}"; do MEMBERS+=($((i + 1))); done

# name N: member N's name.
name() { echo "${NAMES[$1 - 1]}"; }

member() {
    [[ $1 =~ ^[1-9]$ && $1 -le ${#NAMES[@]} ]] ||
        die "partition: $CLUSTER has no member $1 (1 to ${#NAMES[@]})"
    netns_has "$(netns_of "$(name "$1")")" ||
        die "partition: $(name "$1") has no namespace; scripts/backends.sh start ${NAMES[*]}"
}

# drop N M: N's packets to M dropped.
drop() {
    as_root ip -n "$(netns_of "$(name "$1")")" route replace blackhole "$(netns_ip "$(name "$2")")/32"
}

# cuts N: the members N's packets are dropped to, one a line.
cuts() {
    local m routes
    routes=$(ip -n "$(netns_of "$(name "$1")")" route show type blackhole)
    for m in "${MEMBERS[@]}"; do
        if [[ " $routes " == *" $(netns_ip "$(name "$m")") "* ]]; then echo "$m"; fi
    done
}

# The clients' address, in the root namespace (the bridge's).
CLIENTS=$NETNS_SUBNET.1

# cut_from_clients N: N's packets to the clients dropped, and theirs to N.
cut_from_clients() {
    as_root ip -n "$(netns_of "$(name "$1")")" route replace blackhole "$CLIENTS/32"
    as_root ip route replace blackhole "$(netns_ip "$(name "$1")")/32"
}

# clients_cut N: succeeds if N is cut from the clients (either way).
clients_cut() {
    local ours theirs
    ours=$(ip -n "$(netns_of "$(name "$1")")" route show type blackhole)
    theirs=$(ip route show type blackhole)
    [[ " $ours " == *" $CLIENTS "* || " $theirs " == *" $(netns_ip "$(name "$1")") "* ]]
}

# Members without a namespace (not started) have no cuts.
heal() {
    local n m ns ip
    for n in "${MEMBERS[@]}"; do
        ns=$(netns_of "$(name "$n")")
        ip=$(netns_ip "$(name "$n")")
        if [[ " $(ip route show type blackhole) " == *" $ip "* ]]; then
            as_root ip route del blackhole "$ip/32"
        fi
        netns_has "$ns" || continue
        for m in $(cuts "$n"); do
            as_root ip -n "$ns" route del blackhole "$(netns_ip "$(name "$m")")/32"
        done
        if [[ " $(ip -n "$ns" route show type blackhole) " == *" $CLIENTS "* ]]; then
            as_root ip -n "$ns" route del blackhole "$CLIENTS/32"
        fi
    done
}

isolate() {
    local m
    member "$1"
    for m in "${MEMBERS[@]}"; do
        if [[ $m != "$1" ]]; then
            member "$m"
            drop "$1" "$m"
            drop "$m" "$1"
        fi
    done
}

case ${1:-} in
isolate)
    [[ $# -eq 2 ]] || usage
    isolate "$2"
    ;;
cutoff)
    [[ $# -eq 2 ]] || usage
    isolate "$2"
    cut_from_clients "$2"
    ;;
split)
    [[ $# -eq 1 ]] || usage
    for n in "${MEMBERS[@]}"; do
        member "$n"
        for m in "${MEMBERS[@]}"; do
            if [[ $m != "$n" ]]; then drop "$n" "$m"; fi
        done
    done
    ;;
oneway)
    [[ $# -eq 3 && $2 != "$3" ]] || usage
    member "$2"
    member "$3"
    drop "$2" "$3"
    ;;
heal)
    [[ $# -eq 1 ]] || usage
    heal
    ;;
show)
    [[ $# -eq 1 ]] || usage
    for n in "${MEMBERS[@]}"; do
        member "$n"
        for m in $(cuts "$n"); do echo "$n -> $m"; done
        if clients_cut "$n"; then echo "$n <-> clients"; fi
    done
    ;;
*) usage ;;
esac
