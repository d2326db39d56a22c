# shellcheck shell=bash
# The network namespaces of the partitionable clusters, shared by every one
# of them (etcd_netns.sh, postgres_netns.sh,
# cassandra_netns.sh): each member runs in a
# namespace of its own, bakery-NAME, with one address on a private subnet
# that only this machine routes, joined to the others by a veth pair on one
# bridge.  The bridge has an address in the root namespace too, where the
# clients (the tests) are: they reach every member, the isolated ones
# included.  scripts/partition.sh cuts the network between the members of
# one cluster with blackhole routes in their namespaces.
#
# The clusters (NETNS_CLUSTERS) and their members, in order, one address
# each on $NETNS_SUBNET.0/24:
#   etcd       etcd_net1..3            .11 .12 .13
#   postgres   postgres_net1 (primary), postgres_net2 (standby)   .21 .22
#   cassandra  cassandra_net1..3       .31 .32 .33
# Needs root (ip netns), iproute2 and iptables.

# Private, host-local: nothing routes it off this machine (the namespaces
# have no default route).
NETNS_SUBNET=10.231.77
NETNS_BRIDGE=bakerypart0
# shellcheck disable=SC2034  # partition.sh reads it
NETNS_CLUSTERS=(etcd postgres cassandra)
# shellcheck disable=SC2034  # partition.sh reads these through netns_members
NETNS_MEMBERS_etcd=(etcd_net1 etcd_net2 etcd_net3)
# shellcheck disable=SC2034
NETNS_MEMBERS_postgres=(postgres_net1 postgres_net2)
# shellcheck disable=SC2034
NETNS_MEMBERS_cassandra=(cassandra_net1 cassandra_net2 cassandra_net3)
# The first address of each cluster's block of ten.
declare -gA NETNS_BASE=([etcd]=10 [postgres]=20 [cassandra]=30)

# netns_members CLUSTER: its members' names, one a line.
netns_members() {
    local -n members="NETNS_MEMBERS_$1"
    printf '%s\n' "${members[@]}"
}

# netns_ip NAME: member NAME's address (its namespace's only one); NAME is
# CLUSTER_netN.
netns_ip() {
    local cluster=${1%_net*} n=${1##*_net}
    [[ -n ${NETNS_BASE[$cluster]:-} && $n =~ ^[1-9]$ ]] || die "netns: no member $1"
    echo "$NETNS_SUBNET.$((NETNS_BASE[$cluster] + n))"
}

# netns_of NAME: the namespace of member NAME.
netns_of() { echo "bakery-$1"; }

# netns_veth NAME: the root namespace's end of NAME's veth pair (named by
# its address: at most 15 characters).
netns_veth() {
    local ip
    ip=$(netns_ip "$1")
    echo "bakeryv${ip##*.}"
}

# netns_mac IP: the MAC address of the member with IPv4 address IP: 02:62
# (locally administered, unicast) and its four bytes.
netns_mac() {
    local a b c d
    IFS=. read -r a b c d <<<"$1"
    printf '02:62:%02x:%02x:%02x:%02x\n' "$a" "$b" "$c" "$d"
}

# netns_has NS: namespace NS exists (no `grep -q` in a pipe: its early exit
# fails the pipe under pipefail).
netns_has() {
    local list
    list=$(ip netns list | cut -d' ' -f1 | tr '\n' ' ')
    [[ " $list " == *" $1 "* ]]
}

# The bridge is up: the subnet is this machine's (else a probe of it would
# go out by the default route).
netns_bridged() { ip link show "$NETNS_BRIDGE" >/dev/null 2>&1; }

netns_missing() {
    have ip || echo iproute2
    have iptables || echo iptables
}

# netns_need_root NAME: dies unless root (only root may enter a namespace).
netns_need_root() {
    [[ $EUID -eq 0 ]] || fail "$1" "needs root (a network namespace of its own): run as root, or start the other servers by name"
}

# netns_up NAME: the bridge (with the root namespace's address on it) and
# NAME's namespace, joined to it by a veth pair; each step only if missing,
# so each also repairs what a start that failed halfway left.
netns_up() {
    local name=$1 ns veth ip
    ns=$(netns_of "$name")
    veth=$(netns_veth "$name")
    ip=$(netns_ip "$name")
    # The bridge's own MAC address (a bridge without one takes a port's,
    # and changes it when that port goes: the ARP caches would point at a
    # gone veth).
    if ! netns_bridged; then as_root ip link add "$NETNS_BRIDGE" type bridge; fi
    as_root ip link set "$NETNS_BRIDGE" address "$(netns_mac "$NETNS_SUBNET.1")"
    as_root ip addr replace "$NETNS_SUBNET.1/24" dev "$NETNS_BRIDGE"
    as_root ip link set "$NETNS_BRIDGE" up
    netns_forward
    # The cuts a partition run left (scripts/partition.sh: blackhole
    # routes, in the root namespace to NAME and in NAME's namespace when it
    # is reused) go: NAME starts reachable.
    netns_unblock "$name"
    if ! netns_has "$ns"; then as_root ip netns add "$ns"; fi
    if [[ -n $(ip -n "$ns" route show type blackhole 2>/dev/null) ]]; then
        as_root ip -n "$ns" route flush type blackhole
    fi
    if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
        # A host end left from a namespace being deleted goes first.
        if ip link show "$veth" >/dev/null 2>&1; then as_root ip link del "$veth"; fi
        # A fixed MAC address, made of the IPv4 one: a member stopped and
        # started again (a new veth) is still where the ARP caches of the
        # others and of the root namespace say it is; with a new random
        # one, they would send to the old one until their entries expire.
        as_root ip link add "$veth" type veth peer name eth0 address "$(netns_mac "$ip")" netns "$ns"
    fi
    as_root ip link set "$veth" master "$NETNS_BRIDGE"
    as_root ip link set "$veth" up
    as_root ip -n "$ns" addr replace "$ip/24" dev eth0
    as_root ip -n "$ns" link set eth0 up
    as_root ip -n "$ns" link set lo up
}

# netns_down NAME: NAME's veth and namespace removed; the bridge too once
# no veth is left on it.  The veth goes first: deleting one end deletes the
# pair at once, whereas `ip netns del` leaves it to the kernel's cleanup of
# the namespace, which can take a minute.
netns_down() {
    local name=$1 ns veth
    ns=$(netns_of "$name")
    veth=$(netns_veth "$name")
    if ip link show "$veth" >/dev/null 2>&1; then as_root ip link del "$veth"; fi
    if netns_has "$ns"; then as_root ip netns del "$ns"; fi
    netns_unblock "$name"
    netns_bridged || return 0
    [[ -z $(ip link show master "$NETNS_BRIDGE" 2>/dev/null) ]] || return 0
    as_root ip link del "$NETNS_BRIDGE"
    while as_root iptables -D FORWARD -i "$NETNS_BRIDGE" -o "$NETNS_BRIDGE" -j ACCEPT 2>/dev/null; do :; done
}

# netns_forward: the bridge's own traffic accepted in iptables' FORWARD
# chain (once).  Bridged frames go through it (br_netfilter, which a Docker
# engine loads), and a Docker engine sets its policy to DROP when it turns
# IP forwarding on.  An engine started later keeps the rule: it inserts its
# own jumps at the top of FORWARD and flushes none of the chain's rules.
netns_forward() {
    local rule=(FORWARD -i "$NETNS_BRIDGE" -o "$NETNS_BRIDGE" -j ACCEPT)
    as_root iptables -C "${rule[@]}" 2>/dev/null && return 0
    as_root iptables -I "${rule[@]}" ||
        die "netns: cannot add iptables rule ${rule[*]} (the members could not reach each other once a Docker engine runs)"
}

# netns_unblock NAME: the root namespace's blackhole route to NAME (left by
# `scripts/partition.sh CLUSTER cutoff`) removed.
netns_unblock() {
    local ip
    ip=$(netns_ip "$1")
    while [[ " $(ip route show type blackhole) " == *" $ip "* ]]; do
        as_root ip route del blackhole "$ip/32"
    done
}

# netns_session NAME [-C DIR] COMMAND...: launch_session (lib.sh) of
# COMMAND (in DIR) inside NAME's namespace.
netns_session() {
    local name=$1 cwd=()
    shift
    if [[ $1 == -C ]]; then
        cwd=(-C "$2")
        shift 2
    fi
    launch_session "${cwd[@]}" ip netns exec "$(netns_of "$name")" "$@"
}

# netns_run NAME COMMAND...: COMMAND run inside NAME's namespace (root).
netns_run() {
    local name=$1
    shift
    as_root ip netns exec "$(netns_of "$name")" "$@"
}
