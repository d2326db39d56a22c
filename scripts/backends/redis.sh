# shellcheck shell=bash
# redis and redis_volatile: two redis-server processes from Debian's
# redis-server package, daemonized, without RDB snapshots.
#
# redis persists through its append-only file, fsync per write by default
# (BAKERY_REDIS_PERSIST=always), so a stop/restart/kill keeps the data like
# postgres and etcd do; everysec or off make bakery refuse it unless its URI
# adds accept_data_loss=true.
#
# redis_volatile has appendonly no (Redis's default) and no snapshots either:
# every restart forgets every write, so bakery refuses it at open unless the
# URI adds accept_data_loss=true (tests/redis_durability.rs).
# (See lib.sh for the functions every server file defines.)

REDIS_PERSIST=${BAKERY_REDIS_PERSIST:-always}
[[ $REDIS_PERSIST == @(always|everysec|off) ]] ||
    die "BAKERY_REDIS_PERSIST=$REDIS_PERSIST: use always, everysec or off"

# ---------------------------------------------------------------- redis

# shellcheck disable=SC2034  # describe (lib.sh) reads these
redis_describe() {
    PIDFILE=$DIR/redis.pid
    COMM=redis-server
    LOG=$DIR/redis.log
    PORTS=(BAKERY_REDIS_PORT=16379)
}

redis_missing() {
    have redis-server || echo redis-server
    have redis-cli || echo redis-tools
}

redis_install() { install_missing redis; }

redis_start() {
    local persist=(--appendonly no)
    # No RDB snapshots; durability (if any) from the append-only file.
    if [[ $REDIS_PERSIST != off ]]; then persist=(--appendonly yes --appendfsync "$REDIS_PERSIST"); fi
    redis_launch redis "${persist[@]}"
}

redis_ready() { redis_ping redis; }

redis_after_start() { :; }

redis_uri() { echo "redis://127.0.0.1:$(port_of redis)/0"; }

# SIGTERM: no snapshot is configured, so nothing is saved.
redis_stop() { stop_pid redis "$1"; }

# ---------------------------------------------------------------- redis_volatile

# shellcheck disable=SC2034  # describe (lib.sh) reads these
redis_volatile_describe() {
    PIDFILE=$DIR/redis.pid
    COMM=redis-server
    LOG=$DIR/redis.log
    PORTS=(BAKERY_REDIS_VOLATILE_PORT=16380)
    ALIASES=(redis-volatile)
}

redis_volatile_missing() { redis_missing; }

redis_volatile_install() { install_missing redis_volatile; }

redis_volatile_start() { redis_launch redis_volatile --appendonly no --save ''; }

redis_volatile_ready() { redis_ping redis_volatile; }

redis_volatile_after_start() { :; }

redis_volatile_uri() { echo "redis://127.0.0.1:$(port_of redis_volatile)/0"; }

redis_volatile_stop() { stop_pid redis_volatile "$1"; }

# ---------------------------------------------------------------- shared by both

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
