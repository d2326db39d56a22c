# shellcheck shell=bash
# etcd: a one-member cluster from Debian's etcd-server package (etcdctl from
# etcd-client), client and peer URLs on 127.0.0.1.  Installing it also
# installs protoc, which the etcd-client crate needs to build.
# (See lib.sh for the functions every server file defines.)

# shellcheck disable=SC2034  # describe (lib.sh) reads these
etcd_describe() {
    PIDFILE=$DIR/etcd.pid
    COMM=etcd
    LOG=$DIR/etcd.log
    PORTS=(BAKERY_ETCD_PORT=12379 BAKERY_ETCD_PEER_PORT=12380)
}

etcd_missing() {
    have etcd || echo etcd-server
    have etcdctl || echo etcd-client
    deps_missing
}

etcd_install() { install_missing etcd; }

etcd_start() {
    local client peer
    client=http://127.0.0.1:$(port_of etcd 1)
    peer=http://127.0.0.1:$(port_of etcd 2)
    mkdir -p "$DIR/data"
    chmod 700 "$DIR/data"
    launch_session etcd --name bakery --data-dir "$DIR/data" --logger zap \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "bakery=$peer"
}

etcd_ready() {
    local port answer
    port=$(port_of etcd)
    if have curl; then
        answer=$(curl -fsS -m 2 "http://127.0.0.1:$port/health" </dev/null 2>/dev/null) || return 1
        [[ $answer == *'"health":"true"'* ]]
    else
        ETCDCTL_API=3 etcdctl --endpoints="http://127.0.0.1:$port" --dial-timeout=1s \
            --command-timeout=2s endpoint health </dev/null >/dev/null 2>&1
    fi
}

etcd_after_start() { :; }

etcd_uri() { echo "etcd://127.0.0.1:$(port_of etcd)"; }

etcd_stop() { stop_pid etcd "$1"; }
