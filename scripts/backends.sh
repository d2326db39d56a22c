#!/usr/bin/env bash
# Real servers for the conformance suite, run natively (no Docker): installs
# what is missing from Debian packages, starts each server on 127.0.0.1 on a
# non-default port with its data in a scratch directory, and prints the
# BAKERY_<NAME>_URI export lines the tests read.  Cassandra comes from Maven
# Central and FerretDB (standing in for MongoDB) is built from the Go module
# proxy; both are cached outside the checkout, so only the first run is slow.
#
#   scripts/backends.sh start [NAME...]    install if missing, start (or reuse), wait until
#                                          it answers, print export lines (default: all)
#   scripts/backends.sh stop [NAME...]     stop servers this script started (default: all)
#   scripts/backends.sh restart NAME...    stop, then start again on the same data
#   scripts/backends.sh kill NAME...       SIGKILL the server's processes (crash tests)
#   scripts/backends.sh status             one line per backend
#   scripts/backends.sh env                export lines of the running backends
#   scripts/backends.sh deps               install build dependencies only (protoc)
#
# NAME is postgres, redis, redis_volatile, etcd, mongodb, cassandra, or all (in
# that order; stop goes in reverse).  mongodb is FerretDB over the postgres
# server, which `start mongodb` starts too.  redis_volatile is a second Redis
# with --appendonly no (Redis's default) and no RDB snapshots (--save ''): a
# restart forgets everything, so bakery refuses it unless the URI says
# accept_data_loss=true; tests/redis_durability.rs uses it to show both
# the refusal and the duplicate ids it prevents.  Only export lines go to
# stdout, so
#   eval "$(scripts/backends.sh start all)"
# works; progress goes to stderr.  Every start/stop/restart/kill also rewrites
# target/backends.env with the lines of ALL running servers
# (`source target/backends.env`).
#
# Environment:
#   BAKERY_PG_PORT (15432)  BAKERY_REDIS_PORT (16379)  BAKERY_REDIS_VOLATILE_PORT (16380)
#   BAKERY_ETCD_PORT (12379)  BAKERY_ETCD_PEER_PORT (12380)  BAKERY_MONGODB_PORT (17017)
#   BAKERY_CASSANDRA_PORT (19042, CQL)  BAKERY_CASSANDRA_STORAGE_PORT (17000)
#   BAKERY_CASSANDRA_JMX_PORT (17199)
#                            unset: the port the backend last ran on, else the default
#   BAKERY_SCRATCH           data, logs, pid files (${TMPDIR:-/tmp}/bakery-backends)
#   BAKERY_BACKENDS_TIMEOUT  seconds to wait for a server to answer (60; Cassandra: at least 180)
#   XDG_CACHE_HOME           Cassandra's jars and the FerretDB binary go to
#                            ${XDG_CACHE_HOME:-~/.cache}/bakery (Maven's repository under m2/)
#   BAKERY_JAVA              the `java` for Cassandra (default: a JDK 17 -- JAVA_HOME,
#                            /usr/lib/jvm/*17*, or `java` on PATH; 5.0 does not run on 21+)
#   BAKERY_PG_BIN            PostgreSQL bin directory (newest /usr/lib/postgresql/*/bin)
#   BAKERY_REDIS_PERSIST     always (default): append-only file, fsync per write, so a
#                            stop/restart/kill keeps the data like postgres and etcd do;
#                            everysec: fsync once a second; off: no persistence at all.
#                            Either of those makes bakery refuse the redis server
#                            (it can lose acknowledged writes) unless its URI adds
#                            accept_data_loss=true.  (redis_volatile ignores it.)
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$ROOT/scripts/backends.sh" >&2
}

BACKENDS=(postgres redis redis_volatile etcd mongodb cassandra)

SCRATCH=${BAKERY_SCRATCH:-${TMPDIR:-/tmp}/bakery-backends}
[[ $SCRATCH == /* ]] || SCRATCH=$PWD/$SCRATCH
# Downloads and builds (Cassandra's jars, the FerretDB binary) are cached here;
# postgres, redis and etcd come from apt.
CACHE_DIR=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/bakery
[[ $CACHE_DIR == /* ]] || CACHE_DIR=$PWD/$CACHE_DIR
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ENV_FILE=$ROOT/target/backends.env
TIMEOUT=${BAKERY_BACKENDS_TIMEOUT:-60}

# Ports: the environment variable if set, else the port the backend used last
# time (recorded in its scratch directory, so a restart or a start after a
# crash keeps its URI), else the default.
recorded_port() {
    local file=$SCRATCH/$1/ports ports=()
    if [[ -f $file ]]; then read -r -a ports <"$file" || true; fi
    echo "${ports[$2]:-}"
}
PG_PORT=${BAKERY_PG_PORT:-$(recorded_port postgres 0)}
REDIS_PORT=${BAKERY_REDIS_PORT:-$(recorded_port redis 0)}
REDIS_VOLATILE_PORT=${BAKERY_REDIS_VOLATILE_PORT:-$(recorded_port redis_volatile 0)}
ETCD_PORT=${BAKERY_ETCD_PORT:-$(recorded_port etcd 0)}
ETCD_PEER_PORT=${BAKERY_ETCD_PEER_PORT:-$(recorded_port etcd 1)}
MONGODB_PORT=${BAKERY_MONGODB_PORT:-$(recorded_port mongodb 0)}
CASSANDRA_PORT=${BAKERY_CASSANDRA_PORT:-$(recorded_port cassandra 0)}
CASSANDRA_STORAGE_PORT=${BAKERY_CASSANDRA_STORAGE_PORT:-$(recorded_port cassandra 1)}
CASSANDRA_JMX_PORT=${BAKERY_CASSANDRA_JMX_PORT:-$(recorded_port cassandra 2)}
PG_PORT=${PG_PORT:-15432}
REDIS_PORT=${REDIS_PORT:-16379}
REDIS_VOLATILE_PORT=${REDIS_VOLATILE_PORT:-16380}
ETCD_PORT=${ETCD_PORT:-12379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-12380}
MONGODB_PORT=${MONGODB_PORT:-17017}
CASSANDRA_PORT=${CASSANDRA_PORT:-19042}
CASSANDRA_STORAGE_PORT=${CASSANDRA_STORAGE_PORT:-17000}
CASSANDRA_JMX_PORT=${CASSANDRA_JMX_PORT:-17199}

# ---------------------------------------------------------------- helpers

say() { printf 'backends: %s\n' "$*" >&2; }
die() {
    printf 'backends: error: %s\n' "$*" >&2
    exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

for var in PG_PORT REDIS_PORT REDIS_VOLATILE_PORT ETCD_PORT ETCD_PEER_PORT MONGODB_PORT CASSANDRA_PORT \
    CASSANDRA_STORAGE_PORT CASSANDRA_JMX_PORT; do
    [[ ${!var} =~ ^[1-9][0-9]{0,4}$ && ${!var} -le 65535 ]] ||
        die "BAKERY_$var=${!var} is not a port number"
done
REDIS_PERSIST=${BAKERY_REDIS_PERSIST:-always}
[[ $REDIS_PERSIST == @(always|everysec|off) ]] ||
    die "BAKERY_REDIS_PERSIST=$REDIS_PERSIST: use always, everysec or off"
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "BAKERY_BACKENDS_TIMEOUT=$TIMEOUT is not a number of seconds"
[[ $SCRATCH != *"'"* ]] || die "BAKERY_SCRATCH must not contain a single quote: $SCRATCH"

as_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif have sudo; then
        sudo "$@"
    else
        die "need root for: $* (not root, and sudo is not installed)"
    fi
}

APT_UPDATED=0
apt_install() {
    have apt-get || die "apt-get not found; install by hand: $*"
    if [[ $APT_UPDATED -eq 0 ]]; then
        say "apt-get update"
        as_root apt-get update -q >&2
        APT_UPDATED=1
    fi
    say "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2
}

pkg_installed() {
    local status
    # shellcheck disable=SC2016  # ${Status} is dpkg-query's format, not a shell expansion
    status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) || return 1
    [[ $status == *" ok installed" ]]
}

# alive PID [COMM]: the process exists, is not a zombie, and (if given) its
# command name is COMM -- so a pid reused by an unrelated process is not "ours".
alive() {
    local pid=$1 want=${2:-} stat comm rest
    [[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
    { read -r stat <"/proc/$pid/stat"; } 2>/dev/null || return 1
    comm=${stat#*(}
    comm=${comm%)*}
    rest=${stat##*) }
    [[ ${rest%% *} != [ZX] ]] || return 1
    [[ -z $want || $comm == "$want" ]]
}

pgrp_of() {
    local stat rest fields
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    rest=${stat##*) }
    read -r -a fields <<<"$rest"
    echo "${fields[2]}"
}

# group_alive PGID: some live (non-zombie) process is in process group PGID.
# (Not `kill -0 -PGID`: that also counts zombies, which a container's pid 1
# may never reap.)
group_alive() {
    local stat_file stat rest fields
    for stat_file in /proc/[0-9]*/stat; do
        { read -r stat <"$stat_file"; } 2>/dev/null || continue
        rest=${stat##*) }
        read -r -a fields <<<"$rest"
        [[ ${fields[2]} == "$1" && ${fields[0]} != [ZX] ]] && return 0
    done
    return 1
}

# Waits (bounded) until PID has exited; with "group", until its whole process
# group has.  Returns 1 on timeout.
wait_gone() {
    local pid=$1 group=${2:-} deadline=$((SECONDS + TIMEOUT))
    while :; do
        if [[ $group == group ]]; then
            group_alive "$pid" || return 0
        else
            alive "$pid" || return 0
        fi
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# Closes every inherited descriptor above 2, in a subshell that then launches a
# daemon: a server must not keep the caller's pipes (a CI log, a `$(...)`)
# or our lock open.
close_fds() {
    local fd fds=(/proc/"$BASHPID"/fd/*)
    for fd in "${fds[@]##*/}"; do
        if ((fd > 2)) && [[ -e /proc/$BASHPID/fd/$fd ]]; then exec {fd}>&-; fi
    done
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

dir_of() { printf '%s/%s\n' "$SCRATCH" "$1"; }

# The port a backend runs on: the one recorded when this script started it,
# else the configured one.  Field 1 = client port, field 2 = peer port (etcd).
port_of() {
    local name=$1 field=${2:-1} file ports
    file=$(dir_of "$name")/ports
    if [[ -f $file ]] && read -r -a ports <"$file" && [[ -n ${ports[field - 1]:-} ]]; then
        echo "${ports[field - 1]}"
        return
    fi
    case $name:$field in
    postgres:1) echo "$PG_PORT" ;;
    redis:1) echo "$REDIS_PORT" ;;
    redis_volatile:1) echo "$REDIS_VOLATILE_PORT" ;;
    etcd:1) echo "$ETCD_PORT" ;;
    etcd:2) echo "$ETCD_PEER_PORT" ;;
    mongodb:1) echo "$MONGODB_PORT" ;;
    cassandra:1) echo "$CASSANDRA_PORT" ;;
    cassandra:2) echo "$CASSANDRA_STORAGE_PORT" ;;
    cassandra:3) echo "$CASSANDRA_JMX_PORT" ;;
    esac
}

# ---------------------------------------------------------------- build dependencies

# install_missing WHAT...: one apt-get install for the packages that
# missing_WHAT (for each WHAT) reports absent.
install_missing() {
    local what pkgs=()
    for what in "$@"; do
        mapfile -t -O "${#pkgs[@]}" pkgs < <("missing_$what")
    done
    ((${#pkgs[@]})) || return 0
    apt_install "${pkgs[@]}"
    pkgs=()
    for what in "$@"; do
        mapfile -t -O "${#pkgs[@]}" pkgs < <("missing_$what")
    done
    ((${#pkgs[@]} == 0)) || die "still missing after apt-get install: ${pkgs[*]}"
}

# protoc and the well-known .proto files: the etcd-client crate needs both to build.
missing_deps() {
    have protoc || echo protobuf-compiler
    if [[ ! -f /usr/include/google/protobuf/descriptor.proto ]] && ! pkg_installed libprotobuf-dev; then
        echo libprotobuf-dev
    fi
}
install_deps() { install_missing deps; }

# ---------------------------------------------------------------- postgres
# Each backend defines: describe_X (sets PIDFILE, COMM, LOG, PORTS, and may
# set READY_TIMEOUT and REQUIRES), missing_X (the Debian packages it lacks),
# install_X, start_X (launch; the driver has checked the ports are free and
# started the REQUIRES backends), ready_X (one probe), after_start_X, uri_X,
# stop_X PID.

pg_bin() {
    local data version found=()
    if [[ -n ${BAKERY_PG_BIN:-} ]]; then
        echo "$BAKERY_PG_BIN"
        return
    fi
    data=$(dir_of postgres)/data
    if [[ -f $data/PG_VERSION ]]; then # an existing cluster needs its own major version
        version=$(<"$data/PG_VERSION")
        [[ -x /usr/lib/postgresql/$version/bin/postgres ]] || return 1
        echo "/usr/lib/postgresql/$version/bin"
        return
    fi
    shopt -s nullglob
    found=(/usr/lib/postgresql/*/bin/initdb)
    shopt -u nullglob
    ((${#found[@]})) || return 1
    printf '%s\n' "${found[@]%/initdb}" | sort -V | tail -n 1
}

# Runs a PostgreSQL program as the cluster owner: initdb and postgres refuse root.
pg_run() {
    if [[ $EUID -eq 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

describe_postgres() {
    PIDFILE=$(dir_of postgres)/data/postmaster.pid
    COMM=postgres
    LOG=$(dir_of postgres)/postgres.log
    PORTS=("$PG_PORT:BAKERY_PG_PORT")
}

missing_postgres() {
    local data
    pg_bin >/dev/null && return
    data=$(dir_of postgres)/data
    if [[ -f $data/PG_VERSION ]]; then
        die "postgres: $data was created by PostgreSQL $(<"$data/PG_VERSION"), which is not installed; remove $(dir_of postgres) or install that version"
    fi
    echo postgresql
}

install_postgres() {
    install_missing postgres
}

start_postgres() {
    local dir data bin sock port
    dir=$(dir_of postgres)
    data=$dir/data
    port=$(port_of postgres)
    bin=$(pg_bin)
    if [[ $EUID -eq 0 ]]; then
        id -u postgres >/dev/null 2>&1 || die "postgres: no user 'postgres' (the postgresql package creates it)"
        chown postgres: "$dir"
        pg_run test -w "$dir" ||
            die "postgres: user postgres cannot write $dir (a parent directory is closed to it); set BAKERY_SCRATCH to a directory under /tmp"
    fi
    if [[ ! -f $data/PG_VERSION ]]; then
        say "postgres: initdb $data ($bin)"
        rm -rf "$data" # a half-made cluster from an interrupted initdb
        LOG=$dir/initdb.log
        pg_run "$bin/initdb" -D "$data" -A trust -U postgres -E UTF8 --no-locale >"$LOG" 2>&1 || return 1
        LOG=$dir/postgres.log
    fi
    # The Unix socket lives next to the data unless that path is too long for a socket.
    sock=$dir
    ((${#sock} <= 90)) || sock=/tmp
    # After a SIGKILL the socket's lock file names a dead postmaster; PostgreSQL
    # refuses to start while that pid exists even as an unreaped zombie.
    local lock_file=$sock/.s.PGSQL.$port.lock lock_pid=''
    if [[ -f $lock_file ]]; then
        { read -r lock_pid <"$lock_file"; } 2>/dev/null || true
        if ! alive "$lock_pid" postgres; then
            say "postgres: removing stale socket lock $lock_file"
            rm -f "$lock_file" "$sock/.s.PGSQL.$port"
        fi
    fi
    (
        close_fds
        pg_run "$bin/pg_ctl" -D "$data" -l "$LOG" -w -t "$TIMEOUT" \
            -o "-p $port -k '$sock' -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_connections=200 -c synchronous_commit=on" \
            start
    ) </dev/null
}

ready_postgres() {
    local bin
    bin=$(pg_bin) || return 1
    "$bin/pg_isready" -q -t 2 -h 127.0.0.1 -p "$(port_of postgres)" -U postgres -d postgres </dev/null
}

# pg_ensure_db DB: creates database DB (a plain name) in the running server if absent.
pg_ensure_db() {
    local db=$1 bin port found
    bin=$(pg_bin)
    port=$(port_of postgres)
    found=$("$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$db'" </dev/null) ||
        fail postgres "cannot query pg_database on 127.0.0.1:$port"
    if [[ $found != 1 ]]; then
        say "postgres: createdb $db"
        "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres "$db" </dev/null ||
            fail postgres "createdb $db failed"
    fi
}

after_start_postgres() { pg_ensure_db bakery; }

uri_postgres() { echo "postgres://postgres@127.0.0.1:$(port_of postgres)/bakery"; }

stop_postgres() {
    pg_run "$(pg_bin)/pg_ctl" -D "$(dir_of postgres)/data" -m fast -w -t "$TIMEOUT" stop </dev/null
}

# ---------------------------------------------------------------- redis

describe_redis() {
    PIDFILE=$(dir_of redis)/redis.pid
    COMM=redis-server
    LOG=$(dir_of redis)/redis.log
    PORTS=("$REDIS_PORT:BAKERY_REDIS_PORT")
}

missing_redis() {
    have redis-server || echo redis-server
    have redis-cli || echo redis-tools
}

install_redis() { install_missing redis; }

start_redis() {
    local persist=(--appendonly no)
    # No RDB snapshots; durability (if any) from the append-only file.
    if [[ $REDIS_PERSIST != off ]]; then persist=(--appendonly yes --appendfsync "$REDIS_PERSIST"); fi
    redis_launch redis "${persist[@]}"
}

# redis_launch NAME ARGS...: a daemonized redis-server on NAME's port, without
# RDB snapshots, data and log in NAME's scratch directory; ARGS choose its
# persistence.  (describe_NAME has set PIDFILE and LOG.)
redis_launch() {
    local name=$1 dir
    shift
    dir=$(dir_of "$name")
    mkdir -p "$dir/data"
    # Errors before redis opens its log (bad arguments) land in the same file.
    # shellcheck disable=SC2094
    (
        close_fds
        exec redis-server --port "$(port_of "$name")" --bind 127.0.0.1 --save '' "$@" \
            --daemonize yes --pidfile "$PIDFILE" --logfile "$LOG" --dir "$dir/data"
    ) </dev/null >>"$LOG" 2>&1
}

# redis_ping NAME: the server on NAME's port answers PING.
redis_ping() {
    local answer
    answer=$(timeout 2 redis-cli -h 127.0.0.1 -p "$(port_of "$1")" ping </dev/null 2>/dev/null) || return 1
    [[ $answer == PONG ]]
}

# redis_stop NAME PID: SIGTERM (no snapshot is configured, so nothing is
# saved), SIGKILL after the timeout.
redis_stop() {
    kill -TERM "$2"
    wait_gone "$2" || {
        say "$1: still running after ${TIMEOUT}s; SIGKILL"
        kill -KILL "$2"
    }
}

ready_redis() { redis_ping redis; }

after_start_redis() { :; }

uri_redis() { echo "redis://127.0.0.1:$(port_of redis)/0"; }

stop_redis() { redis_stop redis "$1"; }

# ---------------------------------------------------------------- redis_volatile
# A second Redis with appendonly no (Redis's default) and no RDB snapshots
# either.  Every restart forgets every write, so bakery refuses it at open
# unless the URI adds accept_data_loss=true (tests/redis_durability.rs).

describe_redis_volatile() {
    PIDFILE=$(dir_of redis_volatile)/redis.pid
    COMM=redis-server
    LOG=$(dir_of redis_volatile)/redis.log
    PORTS=("$REDIS_VOLATILE_PORT:BAKERY_REDIS_VOLATILE_PORT")
}

missing_redis_volatile() { missing_redis; }

install_redis_volatile() { install_missing redis_volatile; }

start_redis_volatile() { redis_launch redis_volatile --appendonly no --save ''; }

ready_redis_volatile() { redis_ping redis_volatile; }

after_start_redis_volatile() { :; }

uri_redis_volatile() { echo "redis://127.0.0.1:$(port_of redis_volatile)/0"; }

stop_redis_volatile() { redis_stop redis_volatile "$1"; }

# ---------------------------------------------------------------- etcd

describe_etcd() {
    PIDFILE=$(dir_of etcd)/etcd.pid
    COMM=etcd
    LOG=$(dir_of etcd)/etcd.log
    PORTS=("$ETCD_PORT:BAKERY_ETCD_PORT" "$ETCD_PEER_PORT:BAKERY_ETCD_PEER_PORT")
}

# etcd-client provides etcdctl; deps: the etcd-client crate needs protoc to build.
missing_etcd() {
    have etcd || echo etcd-server
    have etcdctl || echo etcd-client
    missing_deps
}

install_etcd() { install_missing etcd; }

start_etcd() {
    local dir client peer
    dir=$(dir_of etcd)
    client=http://127.0.0.1:$(port_of etcd 1)
    peer=http://127.0.0.1:$(port_of etcd 2)
    mkdir -p "$dir/data"
    chmod 700 "$dir/data"
    # A new session (immune to the caller's terminal and Ctrl-C); the shell
    # records its own pid, then becomes etcd.
    (
        close_fds
        # shellcheck disable=SC2016  # $$ and $@ expand in the inner shell
        exec setsid bash -c 'echo $$ >"$0" && exec "$@"' "$PIDFILE" \
            etcd --name bakery --data-dir "$dir/data" --logger zap \
            --listen-client-urls "$client" --advertise-client-urls "$client" \
            --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
            --initial-cluster "bakery=$peer"
    ) </dev/null >>"$LOG" 2>&1 &
}

ready_etcd() {
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

after_start_etcd() { :; }

uri_etcd() { echo "etcd://127.0.0.1:$(port_of etcd)"; }

stop_etcd() {
    kill -TERM "$1"
    wait_gone "$1" || {
        say "etcd: still running after ${TIMEOUT}s; SIGKILL"
        kill -KILL "$1"
    }
}

# ---------------------------------------------------------------- probes

# wire_reply PORT REQUEST N: sends REQUEST (printf escapes, no %) to
# 127.0.0.1:PORT and prints the first N bytes of the reply as hex ("84 00 ..."),
# within 3 seconds.  A protocol-level "are you there" for servers without a CLI
# here (Cassandra: no cqlsh; FerretDB: no mongosh).
wire_reply() {
    # shellcheck disable=SC2016  # $0..$2 expand in the inner shell
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" && printf "$1" >&3 && head -c "$2" <&3' \
        "$1" "$2" "$3" </dev/null 2>/dev/null | od -An -v -tx1 | tr -s ' \n' '  '
}

# ---------------------------------------------------------------- mongodb (FerretDB)
# No registry reachable here ships a mongod, so FerretDB v1 (the MongoDB wire
# protocol over PostgreSQL) stands in: a tiny Go main in scripts/ferretdb
# (go.mod/go.sum pin FerretDB; see main.go for why not `go install`), built
# once into the cache, storing its data in database "ferretdb" of the postgres
# backend.

FERRETDB_SRC=$ROOT/scripts/ferretdb

ferretdb_version() {
    awk '$1 == "github.com/FerretDB/FerretDB" { print $2; exit }
         $1 == "require" && $2 == "github.com/FerretDB/FerretDB" { print $3; exit }' "$FERRETDB_SRC/go.mod"
}

ferretdb_bin() { printf '%s/ferretdb-%s/ferretdb\n' "$CACHE_DIR" "$(ferretdb_version)"; }

# What the binary is built from: a change to any of these rebuilds it.
ferretdb_inputs_hash() {
    cat "$FERRETDB_SRC/go.mod" "$FERRETDB_SRC/go.sum" "$FERRETDB_SRC"/*.go | sha256sum | cut -c1-16
}

describe_mongodb() {
    PIDFILE=$(dir_of mongodb)/ferretdb.pid
    COMM=ferretdb
    LOG=$(dir_of mongodb)/ferretdb.log
    PORTS=("$MONGODB_PORT:BAKERY_MONGODB_PORT")
    REQUIRES=(postgres)
}

# Go is not installed from apt: bookworm's 1.19 cannot build FerretDB 1.24 (go 1.24).
missing_mongodb() { missing_postgres; }

install_mongodb() {
    local bin hash version tmp started=$SECONDS
    install_missing mongodb
    version=$(ferretdb_version)
    [[ -n $version ]] || die "mongodb: no github.com/FerretDB/FerretDB requirement in $FERRETDB_SRC/go.mod"
    bin=$(ferretdb_bin)
    hash=$(ferretdb_inputs_hash)
    if [[ -x $bin && -f $bin.inputs && $(<"$bin.inputs") == "$hash" ]]; then return 0; fi
    have go || die "mongodb: building FerretDB $version needs Go >= 1.24 (\`go\` is not on PATH; https://go.dev/dl, or GOTOOLCHAIN with Go >= 1.21)"
    say "mongodb: building FerretDB $version into $bin (go build; the first time, with nothing in Go's caches, takes a few minutes)"
    mkdir -p "${bin%/*}"
    tmp=$bin.tmp.$$
    # -tags ferretdb_no_sqlite: only the PostgreSQL handler is compiled in.
    if ! (cd "$FERRETDB_SRC" && go build -trimpath -buildvcs=false -tags ferretdb_no_sqlite -o "$tmp" .) >&2; then
        rm -f "$tmp"
        die "mongodb: go build of $FERRETDB_SRC failed"
    fi
    mv -f "$tmp" "$bin"
    echo "$hash" >"$bin.inputs"
    say "mongodb: built FerretDB $version in $((SECONDS - started))s"
}

start_mongodb() {
    local dir
    dir=$(dir_of mongodb)
    pg_ensure_db ferretdb
    (
        close_fds
        # shellcheck disable=SC2016  # $$ and $@ expand in the inner shell
        exec setsid bash -c 'echo $$ >"$0" && exec "$@"' "$PIDFILE" \
            "$(ferretdb_bin)" -listen "127.0.0.1:$(port_of mongodb)" \
            -postgresql-url "postgres://postgres@127.0.0.1:$(port_of postgres)/ferretdb"
    ) </dev/null >>"$LOG" 2>&1 &
}

# OP_MSG {ping: 1, $db: "admin"} (\x24 is "$"); ready when the reply carries
# ok: 1.0 (double 0x3ff0000000000000).  FerretDB answers ping (and reads
# metadata it has cached) while its PostgreSQL is down, so that is probed too.
ready_mongodb() {
    local reply
    ready_postgres || return 1
    reply=$(wire_reply "$(port_of mongodb)" \
        '\x33\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\xdd\x07\x00\x00\x00\x00\x00\x00\x00\x1e\x00\x00\x00\x10ping\x00\x01\x00\x00\x00\x02\x24db\x00\x06\x00\x00\x00admin\x00\x00' \
        38)
    [[ $reply == *" 01 6f 6b 00 00 00 00 00 00 00 f0 3f"* ]]
}

after_start_mongodb() { :; }

# The plain URI, as a user would write it: the mongodb crate identifies
# FerretDB at connect and picks the insert strategy itself (FerretDB v1 does
# not apply findAndModify atomically; FerretDB issue 3040).
uri_mongodb() { echo "mongodb://127.0.0.1:$(port_of mongodb)/bakery"; }

stop_mongodb() {
    kill -TERM "$1"
    wait_gone "$1" || {
        say "mongodb: still running after ${TIMEOUT}s; SIGKILL"
        kill -KILL "$1"
    }
}

# ---------------------------------------------------------------- cassandra
# Apache Cassandra from Maven Central: scripts/cassandra/pom.xml names the
# version; its jars are copied once into the cache, and CassandraDaemon runs
# on a JDK 17 with a generated cassandra.yaml and logback.xml.

cassandra_version() {
    sed -n 's:.*<cassandra\.version>\([^<]*\)</cassandra\.version>.*:\1:p' "$ROOT/scripts/cassandra/pom.xml" | head -n 1
}

cassandra_lib() { printf '%s/cassandra-%s/lib\n' "$CACHE_DIR" "$(cassandra_version)"; }

java_major() {
    local home=${1%/bin/java} line version=''
    if [[ -f $home/release ]]; then
        line=$(grep -m 1 '^JAVA_VERSION=' "$home/release" 2>/dev/null) || true
        version=${line#*=}
        version=${version//\"/}
    fi
    if [[ -z $version ]]; then
        version=$("$1" -XshowSettings:properties -version 2>&1 |
            sed -n 's/^ *java\.specification\.version = //p') || true
    fi
    version=${version#1.}
    echo "${version%%.*}"
}

# The java that runs Cassandra: BAKERY_JAVA, else the first JDK 17 among
# JAVA_HOME, /usr/lib/jvm/*17*, and `java` on PATH.  Cassandra
# 5.0 supports 11 and 17 only, and the default java may be another version.
CASSANDRA_JAVA=''
cassandra_java() {
    local candidate candidates=() path
    if [[ -n $CASSANDRA_JAVA ]]; then
        echo "$CASSANDRA_JAVA"
        return
    fi
    if [[ -n ${BAKERY_JAVA:-} ]]; then
        [[ -x $BAKERY_JAVA ]] || die "cassandra: BAKERY_JAVA=$BAKERY_JAVA is not executable"
        CASSANDRA_JAVA=$BAKERY_JAVA
        echo "$CASSANDRA_JAVA"
        return
    fi
    [[ -n ${JAVA_HOME:-} ]] && candidates+=("$JAVA_HOME/bin/java")
    shopt -s nullglob
    for candidate in /usr/lib/jvm/*17*/bin/java; do candidates+=("$candidate"); done
    shopt -u nullglob
    if path=$(command -v java); then candidates+=("$(readlink -f "$path")"); fi
    for candidate in "${candidates[@]}"; do
        if [[ -x $candidate && $(java_major "$candidate") == 17 ]]; then
            CASSANDRA_JAVA=$candidate
            echo "$CASSANDRA_JAVA"
            return
        fi
    done
    return 1
}

describe_cassandra() {
    PIDFILE=$(dir_of cassandra)/cassandra.pid
    COMM=java
    LOG=$(dir_of cassandra)/system.log
    PORTS=("$CASSANDRA_PORT:BAKERY_CASSANDRA_PORT" "$CASSANDRA_STORAGE_PORT:BAKERY_CASSANDRA_STORAGE_PORT"
        "$CASSANDRA_JMX_PORT:BAKERY_CASSANDRA_JMX_PORT")
    # A fresh node takes 20-45 s on two cores; give it room.
    READY_TIMEOUT=$((TIMEOUT > 180 ? TIMEOUT : 180))
}

missing_cassandra() {
    if ! cassandra_java >/dev/null; then echo openjdk-17-jre-headless; fi
    if [[ ! -d $(cassandra_lib) ]] && ! have mvn; then echo maven; fi
}

install_cassandra() {
    local lib version tmp started=$SECONDS
    install_missing cassandra
    CASSANDRA_JAVA='' # apt may just have installed it
    cassandra_java >/dev/null || die "cassandra: no JDK 17 found (JAVA_HOME, /usr/lib/jvm/*17*, PATH); set BAKERY_JAVA"
    version=$(cassandra_version)
    [[ -n $version ]] || die "cassandra: no <cassandra.version> in scripts/cassandra/pom.xml"
    lib=$(cassandra_lib)
    [[ -f $lib/cassandra-all-$version.jar ]] && return 0
    say "cassandra: fetching Cassandra $version from Maven Central into $lib (once; a minute or two)"
    mkdir -p "${lib%/*}"
    tmp=$lib.tmp.$$
    rm -rf "$tmp"
    # The local Maven repository lives in the cache too: a retry after a failed
    # copy downloads only what is missing.  (Debian's mvn -q still prints bare
    # colour codes, so its output is kept for a failure only.)
    if ! mvn -B -q -f "$ROOT/scripts/cassandra/pom.xml" -Dmaven.repo.local="$CACHE_DIR/m2" \
        dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
        </dev/null >"$tmp.log" 2>&1 || [[ ! -f $tmp/cassandra-all-$version.jar ]]; then
        sed 's/\x1b\[[0-9;]*m//g' "$tmp.log" | tail -n 40 | sed 's/^/    /' >&2
        rm -rf "$tmp" "$tmp.log"
        die "cassandra: mvn dependency:copy-dependencies failed (scripts/cassandra/pom.xml); output above"
    fi
    rm -f "$tmp.log"
    # Another run (another BAKERY_SCRATCH) may have finished first.
    mv -T "$tmp" "$lib" 2>/dev/null || rm -rf "$tmp"
    say "cassandra: fetched $(find "$lib" -name '*.jar' | wc -l) jars in $((SECONDS - started))s"
}

# Writes cassandra.yaml and logback.xml for this scratch directory and ports.
# The yaml holds only keys Cassandra 5.0 knows (it rejects unknown ones);
# everything else keeps its default.
cassandra_config() {
    local dir=$1
    cat >"$dir/cassandra.yaml" <<YAML
# Written by scripts/backends.sh at every start: a one-node test cluster.
cluster_name: bakery
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: $(port_of cassandra 2)
native_transport_port: $(port_of cassandra 1)
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$(port_of cassandra 2)"
data_file_directories:
  - '$dir/data'
commitlog_directory: '$dir/commitlog'
saved_caches_directory: '$dir/saved_caches'
hints_directory: '$dir/hints'
cdc_raw_directory: '$dir/cdc_raw'
# One node holds every replica, so a write is acknowledged only once the
# commit log is fsynced: with the default periodic sync a power cut would
# forget up to 10 s of acknowledged LWTs (bakery refuses that setting on a
# keyspace with fewer than three replicas).
commitlog_sync: batch
auto_snapshot: false
# Paxos v2 (Cassandra 4.1+): fewer round trips per LWT and far less
# contention backoff when several clients CAS the same row (a lock's row).
paxos_variant: v2
YAML
    cat >"$dir/logback.xml" <<XML
<!-- Written by scripts/backends.sh: INFO and above to one file, no rotation. -->
<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$dir/system.log</file>
    <append>true</append>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
XML
}

start_cassandra() {
    local dir java lib opts
    dir=$(dir_of cassandra)
    java=$(cassandra_java)
    lib=$(cassandra_lib)
    mkdir -p "$dir"/{data,commitlog,saved_caches,hints,cdc_raw,triggers}
    cassandra_config "$dir"
    opts=(
        -Xms512m -Xmx1g -Xss256k -XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxGCPauseMillis=300
        -XX:+ExitOnOutOfMemoryError -XX:+PerfDisableSharedMem -Djava.net.preferIPv4Stack=true
        # conf/jvm17-server.options (JPMS and Netty)
        -Djdk.attach.allowAttachSelf=true
        --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
        --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
        --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
        --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
        --add-exports java.sql/java.sql=ALL-UNNAMED
        --add-exports java.base/java.lang.ref=ALL-UNNAMED
        --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
        --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
        --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
        --add-opens java.base/java.lang.module=ALL-UNNAMED
        --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
        --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
        --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
        --add-opens java.base/jdk.internal.math=ALL-UNNAMED
        --add-opens java.base/jdk.internal.module=ALL-UNNAMED
        --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
        --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
        --add-opens java.base/sun.nio.ch=ALL-UNNAMED
        --add-opens java.base/java.io=ALL-UNNAMED
        --add-opens java.base/java.lang.reflect=ALL-UNNAMED
        --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
        --add-opens java.base/java.lang=ALL-UNNAMED
        --add-opens java.base/java.util=ALL-UNNAMED
        -Dio.netty.tryReflectionSetAccessible=true
        -Dio.netty.allocator.useCacheForAllThreads=true
        -Dio.netty.allocator.maxOrder=11
        # what bin/cassandra and cassandra-env.sh would set
        "-Dcassandra.config=file://$dir/cassandra.yaml"
        -Dcassandra-foreground=yes
        "-Dcassandra.storagedir=$dir"
        "-Dcassandra.logdir=$dir"
        "-Dcassandra.triggers_dir=$dir/triggers"
        "-Dlogback.configurationFile=$dir/logback.xml"
        "-Dcassandra.jmx.local.port=$(port_of cassandra 3)"
        # one node: no gossip to wait for
        -Dcassandra.skip_wait_for_gossip_to_settle=0
        -cp "$lib/*"
        org.apache.cassandra.service.CassandraDaemon
    )
    # The JVM's own output (bad options, warnings, crashes) goes to the same log
    # as logback's; both append.
    (
        close_fds
        cd "$dir"
        # shellcheck disable=SC2016  # $$ and $@ expand in the inner shell
        exec setsid bash -c 'echo $$ >"$0" && exec "$@"' "$PIDFILE" "$java" "${opts[@]}"
    ) </dev/null >>"$LOG" 2>&1 &
}

# A CQL OPTIONS request (protocol v4, stream 0); a SUPPORTED reply is
# 84 00 00 00 06.  Cassandra opens the CQL port last, when start-up is done.
ready_cassandra() {
    local reply
    reply=$(wire_reply "$(port_of cassandra)" '\x04\x00\x00\x00\x05\x00\x00\x00\x00' 5)
    [[ $reply == " 84 00 00 00 06"* ]]
}

# The keyspace is created by the cassandra crate, not here.
after_start_cassandra() { :; }

uri_cassandra() { echo "cassandra://127.0.0.1:$(port_of cassandra)/bakery"; }

# SIGTERM: Cassandra's shutdown hook drains (flushes memtables) and exits.
stop_cassandra() {
    kill -TERM "$1"
    wait_gone "$1" || {
        say "cassandra: still running after ${TIMEOUT}s; SIGKILL"
        kill -KILL "$1"
    }
}

# ---------------------------------------------------------------- driver

describe() {
    PIDFILE='' COMM='' LOG='' PORTS=() REQUIRES=() READY_TIMEOUT=$TIMEOUT
    "describe_$1"
}

# Prints the pid of NAME's server if this script started it and it is alive.
server_pid() {
    local pid=''
    describe "$1"
    [[ -f $PIDFILE ]] || return 1
    { read -r pid <"$PIDFILE"; } 2>/dev/null || true
    alive "$pid" "$COMM" || return 1
    echo "$pid"
}

fail() {
    local name=$1
    shift
    printf 'backends: error: %s: %s\n' "$name" "$*" >&2
    if [[ -f $LOG ]]; then
        printf 'backends: last 30 lines of %s:\n' "$LOG" >&2
        tail -n 30 "$LOG" | sed 's/^/    /' >&2
    fi
    exit 1
}

# Waits (bounded) until NAME's recorded process is alive and the server answers.
wait_ready() {
    local name=$1 deadline pid
    describe "$name"
    deadline=$((SECONDS + READY_TIMEOUT))
    while :; do
        if server_pid "$name" >/dev/null && "ready_$name"; then
            return 0
        fi
        # Fail fast when the recorded process has died.
        pid=''
        { read -r pid <"$PIDFILE"; } 2>/dev/null || true
        if [[ -n $pid ]] && ! alive "$pid"; then
            fail "$name" "the server (pid $pid) exited during start-up"
        fi
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

export_line() {
    local var=$1 value=$2
    if [[ $value =~ ^[A-Za-z0-9@:/._+=-]+$ ]]; then
        printf 'export %s=%s\n' "$var" "$value"
    else
        printf "export %s='%s'\n" "$var" "${value//\'/\'\\\'\'}"
    fi
}

env_var_of() { echo "BAKERY_${1^^}_URI"; }

is_running() { server_pid "$1" >/dev/null && "ready_$1"; }

print_exports() {
    local name
    for name in "$@"; do
        export_line "$(env_var_of "$name")" "$("uri_$name")"
    done
}

write_env_file() {
    local name running=()
    for name in "${BACKENDS[@]}"; do
        if is_running "$name"; then running+=("$name"); fi
    done
    mkdir -p "${ENV_FILE%/*}"
    {
        echo "# Written by scripts/backends.sh: the servers it runs (source this file)."
        print_exports "${running[@]}"
    } >"$ENV_FILE.tmp"
    mv -f "$ENV_FILE.tmp" "$ENV_FILE"
}

# Backends start_one has brought up (or found running) in this invocation.
STARTED=' '

start_one() {
    local name=$1 dir pid spec port var required started
    [[ $STARTED != *" $name "* ]] || return 0
    describe "$name"
    for required in "${REQUIRES[@]}"; do
        start_one "$required"
    done
    dir=$(dir_of "$name")
    "install_$name"
    describe "$name"
    if pid=$(server_pid "$name"); then
        wait_ready "$name" ||
            fail "$name" "running (pid $pid) but not answering on port $(port_of "$name") after ${READY_TIMEOUT}s"
        say "$name: already running (pid $pid, 127.0.0.1:$(port_of "$name"))"
        for spec in "${PORTS[@]}"; do
            port=${spec%%:*} var=${spec#*:}
            if [[ -f $dir/ports && " $(<"$dir/ports") " != *" $port "* ]]; then
                say "$name: note: $var=$port is ignored while it runs on $(<"$dir/ports"); use 'restart $name' to move it"
            fi
        done
        "after_start_$name"
        STARTED+="$name "
        return 0
    fi
    if [[ -f $PIDFILE ]]; then
        say "$name: removing stale pid file $PIDFILE"
        rm -f "$PIDFILE"
    fi
    for spec in "${PORTS[@]}"; do
        port=${spec%%:*} var=${spec#*:}
        if port_in_use "$port"; then
            local who=''
            if have ss; then who=$(ss -Hltnp "sport = :$port" 2>/dev/null | sed -n 's/.*users:((\(.*\)))/ (\1)/p' | head -n 1); fi
            die "$name: port $port on 127.0.0.1 is already in use by a process this script did not start$who; stop it, or choose another port with $var=<port>"
        fi
    done
    mkdir -p "$dir"
    local ports=()
    for spec in "${PORTS[@]}"; do ports+=("${spec%%:*}"); done
    echo "${ports[*]}" >"$dir/ports"
    say "$name: starting on 127.0.0.1:${ports[0]}${ports[1]:+ (also ports ${ports[*]:1})}, data and log in $dir"
    started=$SECONDS
    "start_$name" || fail "$name" "failed to start"
    describe "$name"
    wait_ready "$name" || fail "$name" "not answering on 127.0.0.1:$(port_of "$name") after ${READY_TIMEOUT}s"
    "after_start_$name"
    say "$name: ready in $((SECONDS - started))s (pid $(server_pid "$name"), $("uri_$name"))"
    STARTED+="$name "
}

stop_one() {
    local name=$1 pid
    describe "$name"
    if ! pid=$(server_pid "$name"); then
        if [[ -f $PIDFILE ]]; then
            say "$name: not running; removing stale pid file $PIDFILE"
            rm -f "$PIDFILE"
        else
            say "$name: not running"
        fi
        return 0
    fi
    say "$name: stopping (pid $pid)"
    if [[ $name == postgres ]] && server_pid mongodb >/dev/null; then
        say "postgres: note: mongodb (FerretDB) keeps its data in postgres; it fails until postgres is back"
        describe postgres
    fi
    "stop_$name" "$pid"
    wait_gone "$pid" || die "$name: pid $pid did not exit"
    rm -f "$PIDFILE"
    say "$name: stopped"
}

kill_one() {
    local name=$1 pid
    describe "$name"
    if ! pid=$(server_pid "$name"); then
        say "$name: not running"
        return 0
    fi
    # pg_ctl, redis --daemonize and our setsid make each server a process-group
    # leader: SIGKILL the group, so no orphaned PostgreSQL backend outlives it.
    if [[ $(pgrp_of "$pid") == "$pid" ]]; then
        say "$name: SIGKILL process group $pid"
        kill -KILL -- "-$pid"
        wait_gone "$pid" group || die "$name: process group $pid did not exit"
    else
        say "$name: SIGKILL pid $pid"
        kill -KILL "$pid"
        wait_gone "$pid" || die "$name: pid $pid did not exit"
    fi
    say "$name: killed (data kept; 'start $name' recovers it)"
}

status_one() {
    local name=$1 pid state detail='' spec port
    describe "$name"
    if pid=$(server_pid "$name"); then
        if "ready_$name"; then
            state=running
            detail="pid $pid, 127.0.0.1:$(port_of "$name"), $("uri_$name")"
        else
            state=not-answering
            detail="pid $pid, 127.0.0.1:$(port_of "$name"), log $LOG"
        fi
    else
        state=stopped
        [[ -f $PIDFILE ]] && detail="stale pid file $PIDFILE"
        for spec in "${PORTS[@]}"; do
            port=${spec%%:*}
            if port_in_use "$port"; then
                detail+="${detail:+; }port $port is taken by another process (${spec#*:})"
            fi
        done
    fi
    printf '%-14s %-14s %s\n' "$name" "$state" "$detail"
}

lock() {
    mkdir -p "$SCRATCH"
    have flock || return 0
    exec 9>"$SCRATCH/.lock"
    flock -w $((TIMEOUT * 5)) 9 || die "another scripts/backends.sh holds $SCRATCH/.lock"
}

expand_names() {
    local name out=()
    [[ $# -gt 0 ]] || set -- all
    for name in "$@"; do
        case $name in
        all) out+=("${BACKENDS[@]}") ;;
        postgres | redis | redis_volatile | etcd | mongodb | cassandra) out+=("$name") ;;
        redis-volatile) out+=(redis_volatile) ;;
        postgresql | pg) out+=(postgres) ;;
        mongo | ferretdb) out+=(mongodb) ;;
        *) die "unknown backend '$name' (known: ${BACKENDS[*]}, all)" ;;
        esac
    done
    # de-duplicate, keeping order
    local seen=' ' result=()
    for name in "${out[@]}"; do
        [[ $seen == *" $name "* ]] || result+=("$name")
        seen+="$name "
    done
    printf '%s\n' "${result[@]}"
}

main() {
    local cmd=${1:-help} names=() name
    shift || true
    case $cmd in
    start | stop | restart | kill)
        if [[ $cmd == restart || $cmd == kill ]] && [[ $# -eq 0 ]]; then
            die "usage: scripts/backends.sh $cmd NAME... (or all)"
        fi
        mapfile -t names < <(expand_names "$@")
        [[ ${#names[@]} -gt 0 ]] || exit 1
        lock
        case $cmd in
        start | restart)
            # All missing packages in one apt-get install; install_X then finds none.
            install_missing "${names[@]}" >&2
            ;;
        esac
        case $cmd in
        start)
            # Everything but the final export lines goes to stderr.
            for name in "${names[@]}"; do start_one "$name" >&2; done
            write_env_file
            print_exports "${names[@]}"
            ;;
        stop)
            # Reverse order: mongodb (FerretDB) before the postgres it uses.
            local i
            for ((i = ${#names[@]} - 1; i >= 0; i--)); do stop_one "${names[i]}" >&2; done
            write_env_file
            ;;
        restart)
            for name in "${names[@]}"; do
                stop_one "$name" >&2
                STARTED=${STARTED/ $name / } # (it may have been started as another's dependency)
                start_one "$name" >&2
            done
            write_env_file
            print_exports "${names[@]}"
            ;;
        kill)
            for name in "${names[@]}"; do kill_one "$name" >&2; done
            write_env_file
            ;;
        esac
        ;;
    status)
        mapfile -t names < <(expand_names "$@")
        [[ ${#names[@]} -gt 0 ]] || exit 1
        for name in "${names[@]}"; do status_one "$name"; done
        echo "scratch: $SCRATCH   cache: $CACHE_DIR   env file: $ENV_FILE"
        ;;
    env)
        for name in "${BACKENDS[@]}"; do
            if is_running "$name"; then print_exports "$name"; fi
        done
        ;;
    deps)
        lock
        install_deps
        ;;
    help | -h | --help)
        usage
        ;;
    *)
        usage
        die "unknown command '$cmd'"
        ;;
    esac
}

main "$@"
