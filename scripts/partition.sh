#!/usr/bin/env bash
# Network partitions between the members of the etcd cluster whose members
# each run in a network namespace of their own (etcd_net1..3 of
# scripts/backends.sh), while every member stays up.  A cut is a blackhole
# route in a member's namespace: what it sends to that peer is dropped (its
# TCP connections to and from the peer then stall both ways; a one-way cut
# still delivers the peer's packets to it).  The bridge's address in the
# root namespace, where the clients are, is never cut.
#
#   scripts/partition.sh isolate N      N (1..3) cut from both others, both ways
#   scripts/partition.sh split          1|1|1: every member cut from every other
#   scripts/partition.sh oneway N M     N's packets to M dropped; M's still reach N
#   scripts/partition.sh heal           every cut removed
#   scripts/partition.sh show           the cuts, one line each ("N -> M")
#
# Needs root (ip netns exec) and iproute2; the members must be running.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=backends/lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/backends/lib.sh"
# shellcheck source=backends/etcd_netns.sh
. "$SERVERS_DIR/etcd_netns.sh"

MEMBERS=(1 2 3)

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$ROOT/scripts/partition.sh" >&2
    exit 2
}

member() {
    [[ $1 =~ ^[123]$ ]] || die "partition: no member $1 (1, 2 or 3)"
    etcd_net_has_ns "$(etcd_net_ns "etcd_net$1")" ||
        die "partition: etcd_net$1 has no namespace; scripts/backends.sh start etcd_net1 etcd_net2 etcd_net3"
}

# drop N M: N's packets to M dropped.
drop() {
    as_root ip -n "$(etcd_net_ns "etcd_net$1")" route replace blackhole "$(etcd_net_ip "$2")/32"
}

# cuts N: the members N's packets are dropped to, one a line.
cuts() {
    local m routes
    routes=$(ip -n "$(etcd_net_ns "etcd_net$1")" route show type blackhole)
    for m in "${MEMBERS[@]}"; do
        if [[ " $routes " == *" $(etcd_net_ip "$m") "* ]]; then echo "$m"; fi
    done
}

heal() {
    local n m
    for n in "${MEMBERS[@]}"; do
        for m in $(cuts "$n"); do
            as_root ip -n "$(etcd_net_ns "etcd_net$n")" route del blackhole "$(etcd_net_ip "$m")/32"
        done
    done
}

case ${1:-} in
isolate)
    [[ $# -eq 2 ]] || usage
    member "$2"
    for m in "${MEMBERS[@]}"; do
        if [[ $m != "$2" ]]; then
            member "$m"
            drop "$2" "$m"
            drop "$m" "$2"
        fi
    done
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
    done
    ;;
*) usage ;;
esac
