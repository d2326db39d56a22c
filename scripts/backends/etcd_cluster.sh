# shellcheck shell=bash
# etcd_m1, etcd_m2, etcd_m3: a three-member etcd cluster on 127.0.0.1, apart
# from the one-member `etcd` server (same Debian packages).  Each member is a
# server of its own (pid, ports, data directory), so `kill etcd_m2` and
# `restart etcd_m2` act on one member; all three share one --initial-cluster.
# Each exports BAKERY_ETCD_CLUSTER_URI, which lists the three client
# endpoints, so the line survives while any member runs.
#
# A member answers on its peer port as soon as it runs, but serves clients
# only once a quorum (two members) has formed: so a member is "ready" when its
# peer port answers, and its after_start waits -- when a quorum of members
# runs -- until it serves linearizable reads (its /health).  `start all`
# starts etcd_m1, etcd_m2 (then the cluster forms) and etcd_m3 in turn.
# tests/cluster_etcd.rs kills and restarts the leader.
# (See lib.sh for the functions every server file defines.)

ETCD_MEMBERS=(etcd_m1 etcd_m2 etcd_m3)

# etcd_member_describe N CLIENT_PORT: the settings of member etcd_mN.
# shellcheck disable=SC2034  # describe (lib.sh) reads these
etcd_member_describe() {
    PIDFILE=$DIR/etcd.pid
    COMM=etcd
    LOG=$DIR/etcd.log
    PORTS=("BAKERY_ETCD_M$1_PORT=$2" "BAKERY_ETCD_M$1_PEER_PORT=$(($2 + 1))")
}

etcd_m1_describe() { etcd_member_describe 1 12389; }
etcd_m2_describe() { etcd_member_describe 2 12391; }
etcd_m3_describe() { etcd_member_describe 3 12393; }

etcd_member_missing() {
    etcd_missing
    have curl || echo curl
}
etcd_member_install() { install_missing etcd; }

# etcd_members_list FIELD [peers]: each member's 127.0.0.1:PORT (FIELD 1,
# the client port; 2, the peer port), or with "peers" NAME=http://127.0.0.1:PORT,
# joined by commas.
etcd_members_list() {
    local member out=()
    for member in "${ETCD_MEMBERS[@]}"; do
        out+=("${2:+$member=http://}127.0.0.1:$(port_of "$member" "$1")")
    done
    local IFS=,
    echo "${out[*]}"
}

# The --initial-cluster value: etcd_m1=http://127.0.0.1:12390,...
etcd_initial_cluster() { etcd_members_list 2 peers; }

# etcd_member_start NAME (after NAME_describe).  The data directory is kept
# across restarts; etcd then ignores the --initial-* flags.
etcd_member_start() {
    local name=$1 client peer
    client=http://127.0.0.1:$(port_of "$name" 1)
    peer=http://127.0.0.1:$(port_of "$name" 2)
    mkdir -p "$DIR/data"
    chmod 700 "$DIR/data"
    launch_session etcd --name "$name" --data-dir "$DIR/data" --logger zap \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "$(etcd_initial_cluster)" \
        --initial-cluster-token bakery-etcd-cluster --initial-cluster-state new
}

# The process answers on its peer port (it does before a quorum has formed).
etcd_member_ready() {
    curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$(port_of "$1" 2)/version" </dev/null 2>/dev/null
}

# The member serves linearizable reads: it has a leader and a quorum.
etcd_member_healthy() {
    local answer
    answer=$(curl -fsS -m 2 "http://127.0.0.1:$(port_of "$1" 1)/health" </dev/null 2>/dev/null) || return 1
    [[ $answer == *'"health":"true"'* ]]
}

# etcd_quorum_after_start NAME "HEALTHY ARGS" MEMBER...: when a quorum of
# the MEMBERs runs, wait until `HEALTHY ARGS` says NAME serves linearizable
# reads (also etcd_netns.sh's).
etcd_quorum_after_start() {
    local name=$1 member running=0 healthy
    read -r -a healthy <<<"$2"
    shift 2
    for member in "$@"; do
        if server_pid "$member" >/dev/null; then running=$((running + 1)); fi
    done
    describe "$name"
    if ((running < 2)); then
        say "$name: waiting for a second member before it serves clients"
        return 0
    fi
    poll "$READY_TIMEOUT" "${healthy[@]}" ||
        fail "$name" "no leader or no quorum after ${READY_TIMEOUT}s ($running members running)"
}

etcd_member_after_start() { etcd_quorum_after_start "$1" "etcd_member_healthy $1" "${ETCD_MEMBERS[@]}"; }

etcd_member_uri() { echo "etcd://$(etcd_members_list 1)"; }

# The same function set for each member, naming itself.
for etcd_member in "${ETCD_MEMBERS[@]}"; do
    eval "
${etcd_member}_missing() { etcd_member_missing; }
${etcd_member}_install() { etcd_member_install; }
${etcd_member}_start() { etcd_member_start $etcd_member; }
${etcd_member}_ready() { etcd_member_ready $etcd_member; }
${etcd_member}_after_start() { etcd_member_after_start $etcd_member; }
${etcd_member}_uri() { etcd_member_uri; }
${etcd_member}_env_var() { echo BAKERY_ETCD_CLUSTER_URI; }
${etcd_member}_stop() { stop_pid $etcd_member \"\$1\"; }
"
done
unset etcd_member
