# shellcheck shell=bash
# redis, redis_volatile, redis_primary and redis_replica: redis-server
# processes from Debian's redis-server package, daemonized, without RDB
# snapshots.
#
# redis persists through its append-only file, fsync per write by default
# (BAKERY_REDIS_PERSIST=always), so a stop/restart/kill keeps the data like
# postgres and etcd do; everysec or off make bakery refuse it unless its URI
# adds accept_data_loss=true.  redis also listens for TLS on a second port
# (BAKERY_REDIS_TLS_PORT), with the certificate of the test CA (lib.sh:
# ensure_test_ca) for DNS:localhost and no client certificates:
# BAKERY_REDIS_TLS_URI is rediss://localhost:that port, BAKERY_REDIS_TLS_CA
# the CA to trust (crates/bakery-redis/tests/tls.rs).
#
# redis_volatile has appendonly no (Redis's default) and no snapshots either:
# every restart forgets every write, so bakery refuses it at open unless the
# URI adds accept_data_loss=true (tests/redis_durability.rs).
#
# redis_primary and redis_replica are a primary/replica pair for the
# failover test (tests/cluster_redis.rs): it SIGKILLs the primary mid-run,
# promotes the replica (REPLICAOF NO ONE) and reopens on it. Both persist
# like redis; the replica starts with --replicaof the primary. Starting
# redis_replica (also when it runs already) points it at the primary again
# and waits until it is in sync, so after a test promoted it,
#   scripts/backends.sh start redis_replica
# restores the pair: the killed primary (a requirement) recovers its
# append-only file, and the replica resyncs from it, dropping what it took
# while promoted.
# (See lib.sh for the functions every server file defines.)

REDIS_PERSIST=${BAKERY_REDIS_PERSIST:-always}
[[ $REDIS_PERSIST == @(always|everysec|off) ]] ||
    die "BAKERY_REDIS_PERSIST=$REDIS_PERSIST: use always, everysec or off"

# ---------------------------------------------------------------- shared by all

# The pid file, command and log of every Redis server (in NAME_describe).
# shellcheck disable=SC2034  # describe (lib.sh) reads these
redis_files() {
    PIDFILE=$DIR/redis.pid
    COMM=redis-server
    LOG=$DIR/redis.log
}

# redis_server NAME: defines NAME_missing, _install, _ready, _uri and _stop,
# the same for every Redis server but redis itself (NAME's section below
# defines NAME_describe, _start and _after_start).
redis_server() {
    local name=$1
    [[ $name =~ ^[a-z_]+$ ]] || die "redis_server: bad name '$name'"
    eval "
        ${name}_missing() { redis_missing; }
        ${name}_install() { install_missing $name; }
        ${name}_ready() { redis_ping $name; }
        ${name}_uri() { echo \"redis://127.0.0.1:\$(port_of $name)/0\"; }
        ${name}_stop() { stop_pid $name \"\$1\"; }
    "
}

# redis_launch NAME ARGS...: a daemonized redis-server on NAME's port, without
# RDB snapshots, data and log in NAME's scratch directory; ARGS choose its
# persistence.
redis_launch() {
    local name=$1
    shift
    mkdir -p "$DIR/data"
    launch_daemon redis-server --port "$(port_of "$name")" --bind 127.0.0.1 --save '' "$@" \
        --daemonize yes --pidfile "$PIDFILE" --logfile "$LOG" --dir "$DIR/data"
}

# redis_ping NAME: the server on NAME's port answers PING.
redis_ping() {
    local answer
    answer=$(timeout 2 redis-cli -h 127.0.0.1 -p "$(port_of "$1")" ping </dev/null 2>/dev/null) || return 1
    [[ $answer == PONG ]]
}

# ---------------------------------------------------------------- redis

# shellcheck disable=SC2034  # describe (lib.sh) reads these
redis_describe() {
    redis_files
    PORTS=(BAKERY_REDIS_PORT=16379 BAKERY_REDIS_TLS_PORT=16390)
}

redis_missing() {
    have redis-server || echo redis-server
    have redis-cli || echo redis-tools
    tls_missing
}

redis_install() { install_missing redis; }

redis_start() {
    local persist=(--appendonly no)
    # No RDB snapshots; durability (if any) from the append-only file.
    if [[ $REDIS_PERSIST != off ]]; then persist=(--appendonly yes --appendfsync "$REDIS_PERSIST"); fi
    ensure_test_ca
    redis_launch redis "${persist[@]}" --tls-port "$(port_of redis 2)" \
        --tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key" \
        --tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients no
}

redis_ready() { redis_ping redis; }

# The TLS port answers, its certificate checked against the test CA: a server
# started before the TLS port was added has none.
redis_after_start() {
    local port
    port=$(port_of redis 2)
    tls_answers redis "$port" PONG "a TLS port" \
        timeout 5 redis-cli --tls --cacert "$TLS_DIR/ca.pem" -h localhost -p "$port" ping
}

redis_uri() { echo "redis://127.0.0.1:$(port_of redis)/0"; }

redis_more_env() {
    echo "BAKERY_REDIS_TLS_URI rediss://localhost:$(port_of redis 2)/0"
    echo "BAKERY_REDIS_TLS_CA $TLS_DIR/ca.pem"
}

# SIGTERM: no snapshot is configured, so nothing is saved.
redis_stop() { stop_pid redis "$1"; }

# ---------------------------------------------------------------- redis_volatile

# shellcheck disable=SC2034  # describe (lib.sh) reads these
redis_volatile_describe() {
    redis_files
    PORTS=(BAKERY_REDIS_VOLATILE_PORT=16380)
    ALIASES=(redis-volatile)
}

redis_volatile_start() { redis_launch redis_volatile --appendonly no --save ''; }

redis_volatile_after_start() { :; }

redis_server redis_volatile

# ---------------------------------------------------------------- redis_primary

# shellcheck disable=SC2034  # describe (lib.sh) reads these
redis_primary_describe() {
    redis_files
    PORTS=(BAKERY_REDIS_PRIMARY_PORT=16381)
    ALIASES=(redis-primary)
}

# No 5 s wait for more replicas before a (diskless) full sync.
redis_primary_start() {
    redis_launch redis_primary --appendonly yes --appendfsync always --repl-diskless-sync-delay 0
}

redis_primary_after_start() { :; }

redis_server redis_primary

# ---------------------------------------------------------------- redis_replica

# shellcheck disable=SC2034  # describe (lib.sh) reads these
redis_replica_describe() {
    redis_files
    PORTS=(BAKERY_REDIS_REPLICA_PORT=16382)
    REQUIRES=(redis_primary)
    ALIASES=(redis-replica)
}

redis_replica_start() {
    redis_launch redis_replica --appendonly yes --appendfsync always \
        --replicaof 127.0.0.1 "$(port_of redis_primary)"
}

# A replica of the primary again (a test may have promoted it), in sync.
redis_replica_after_start() {
    local answer
    answer=$(redis_replica_cli replicaof 127.0.0.1 "$(port_of redis_primary)") ||
        fail redis_replica "REPLICAOF 127.0.0.1 $(port_of redis_primary) failed"
    [[ $answer == OK* ]] || fail redis_replica "REPLICAOF answered: $answer"
    poll "$READY_TIMEOUT" redis_replica_in_sync ||
        fail redis_replica "no replication link to the primary after ${READY_TIMEOUT}s"
}

redis_server redis_replica

# redis_replica_cli ARGS...: one redis-cli command to the replica.
redis_replica_cli() {
    timeout 5 redis-cli -h 127.0.0.1 -p "$(port_of redis_replica)" "$@" </dev/null 2>/dev/null
}

# The replica's link to the primary is up and the primary lists it online.
redis_replica_in_sync() {
    local replica primary
    replica=$(redis_replica_cli info replication) || return 1
    [[ $replica == *master_link_status:up* ]] || return 1
    primary=$(timeout 5 redis-cli -h 127.0.0.1 -p "$(port_of redis_primary)" info replication \
        </dev/null 2>/dev/null) || return 1
    [[ $primary == *"port=$(port_of redis_replica),state=online"* ]]
}
