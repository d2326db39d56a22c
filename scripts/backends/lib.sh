# shellcheck shell=bash
# The supervisor behind scripts/backends.sh, shared by every server: paths,
# logging, locking, pid files and process groups, waiting with a deadline,
# apt installs, port checks, and target/backends.env.  Nothing here knows a
# particular server; each is a file next to this one (redis.sh holds redis
# and redis_volatile) defining, for server NAME, these functions:
#
#   NAME_describe      sets PIDFILE (the pid of the server's main process),
#                      COMM (that process's command name), LOG, and PORTS
#                      (ENV_VAR=default, the client port first); may set
#                      REQUIRES (servers to start first), READY_TIMEOUT and
#                      ALIASES (other names accepted on the command line).
#                      DIR, its scratch directory, is set already.
#   NAME_missing       prints the Debian packages it lacks, one a line
#   NAME_install       installs them (install_missing NAME) and whatever else
#                      it needs (a download, a build)
#   NAME_start         launches it, usually with launch_session or
#                      launch_daemon; its ports are free and recorded, and its
#                      REQUIRES run
#   NAME_ready         one probe: succeeds if it answers
#   NAME_after_start   runs once it answers, also when it was running already
#   NAME_uri           prints its BAKERY_NAME_URI value
#   NAME_env_var       (optional) prints another name for that variable
#   NAME_more_env      (optional) prints more variables to export, one
#                      "VARIABLE VALUE" a line (postgres, redis: their TLS
#                      URI and CA)
#   NAME_stop PID      stops it, usually with stop_pid NAME PID
#
# start, after_start and stop run right after NAME_describe, so they may use
# DIR, PIDFILE and LOG; describe, missing, ready and uri may be called for
# another server's sake (mongodb probes postgres), so they must not: they use
# port_of NAME and dir_of NAME.
#
# Sourced by scripts/backends.sh, which has set -euo pipefail.

# ---------------------------------------------------------------- paths and settings

SCRATCH=${BAKERY_SCRATCH:-${TMPDIR:-/tmp}/bakery-backends}
[[ $SCRATCH == /* ]] || SCRATCH=$PWD/$SCRATCH
# Downloads and builds (Cassandra's jars, the FerretDB binary) are cached here;
# postgres, redis and etcd come from apt.
CACHE_DIR=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/bakery
[[ $CACHE_DIR == /* ]] || CACHE_DIR=$PWD/$CACHE_DIR
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
SERVERS_DIR=$ROOT/scripts/backends
ENV_FILE=$ROOT/target/backends.env
TIMEOUT=${BAKERY_BACKENDS_TIMEOUT:-60}

# ---------------------------------------------------------------- logging

say() { printf 'backends: %s\n' "$*" >&2; }
die() {
    printf 'backends: error: %s\n' "$*" >&2
    exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

# fail NAME MESSAGE: dies, showing the end of the server's log ($LOG).
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

[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "BAKERY_BACKENDS_TIMEOUT=$TIMEOUT is not a number of seconds"
[[ $SCRATCH != *"'"* ]] || die "BAKERY_SCRATCH must not contain a single quote: $SCRATCH"

# ---------------------------------------------------------------- locking

# One scripts/backends.sh at a time changes the servers of a scratch directory.
lock() {
    mkdir -p "$SCRATCH"
    have flock || return 0
    exec 9>"$SCRATCH/.lock"
    flock -w $((TIMEOUT * 5)) 9 || die "another scripts/backends.sh holds $SCRATCH/.lock"
}

# ---------------------------------------------------------------- packages

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

# install_missing WHAT...: one apt-get install for the packages that
# WHAT_missing (for each WHAT) reports absent.
install_missing() {
    local what pkgs=()
    for what in "$@"; do
        mapfile -t -O "${#pkgs[@]}" pkgs < <("${what}_missing")
    done
    ((${#pkgs[@]})) || return 0
    apt_install "${pkgs[@]}"
    pkgs=()
    for what in "$@"; do
        mapfile -t -O "${#pkgs[@]}" pkgs < <("${what}_missing")
    done
    ((${#pkgs[@]} == 0)) || die "still missing after apt-get install: ${pkgs[*]}"
}

# Build dependencies (`scripts/backends.sh deps`): protoc and the well-known
# .proto files, which the etcd-client crate needs to build; Python's venv,
# which scripts/schemathesis.sh installs schemathesis into; libfaketime,
# which the snowflake tests move a real process's clock with.
deps_missing() {
    have protoc || echo protobuf-compiler
    pkg_installed libfaketime || echo libfaketime
    python3 -c 'import venv, ensurepip' 2>/dev/null || echo python3-venv
    if [[ ! -f /usr/include/google/protobuf/descriptor.proto ]] && ! pkg_installed libprotobuf-dev; then
        echo libprotobuf-dev
    fi
}
install_deps() { install_missing deps; }

# ---------------------------------------------------------------- Go builds

# FerretDB and Toxiproxy are built from a go.mod of ours (Go is not installed
# from apt: bookworm's 1.19 is too old), once, into the cache.

# go_mod_version GO_MOD MODULE: the version of MODULE that GO_MOD requires.
go_mod_version() {
    awk -v m="$2" '$1 == m { print $2; exit }
         $1 == "require" && $2 == m { print $3; exit }' "$1"
}

# go_build NAME WHAT BIN HASH SRC HOW_LONG GO_ARGS...: unless BIN was built
# from inputs hashing to HASH (kept in BIN.inputs), builds WHAT (e.g.
# "FerretDB v1.24.0") into BIN: `go build -trimpath -buildvcs=false -o BIN
# GO_ARGS...` in SRC.  HOW_LONG says what to expect of the first build.
go_build() {
    local name=$1 what=$2 bin=$3 hash=$4 src=$5 how_long=$6 tmp started=$SECONDS
    shift 6
    if [[ -x $bin && -f $bin.inputs && $(<"$bin.inputs") == "$hash" ]]; then return 0; fi
    have go || die "$name: building $what needs Go >= 1.24 (\`go\` is not on PATH; https://go.dev/dl, or GOTOOLCHAIN with Go >= 1.21)"
    say "$name: building $what into $bin (go build; $how_long)"
    mkdir -p "${bin%/*}"
    tmp=$bin.tmp.$$
    if ! (cd "$src" && go build -trimpath -buildvcs=false -o "$tmp" "$@") >&2; then
        rm -f "$tmp"
        die "$name: go build of $what ($src) failed"
    fi
    mv -f "$tmp" "$bin"
    echo "$hash" >"$bin.inputs"
    say "$name: built $what in $((SECONDS - started))s"
}

# ---------------------------------------------------------------- a test CA

# The TLS ports (postgres's ssl=on, redis's tls-port) present a certificate
# from a CA of our own, made with openssl once and kept in $TLS_DIR while
# valid for another day:
#   ca.pem                  the CA that signed server.pem (BAKERY_*_TLS_CA)
#   server.pem, server.key  the servers' certificate, for DNS:localhost only:
#                           a client connecting to 127.0.0.1 sees a host name
#                           mismatch, which the tests use
#   other-ca.pem            a second CA that signed nothing here: the wrong
#                           trust anchor the tests expect to be refused
TLS_DIR=$SCRATCH/tls

tls_missing() { have openssl || echo openssl; }

# tls_files_valid: every file is there, server.pem chains to ca.pem, and
# neither expires within a day.
tls_files_valid() {
    local file
    for file in ca.pem server.pem server.key other-ca.pem; do
        [[ -s $TLS_DIR/$file ]] || return 1
    done
    openssl verify -CAfile "$TLS_DIR/ca.pem" "$TLS_DIR/server.pem" >/dev/null 2>&1 &&
        openssl x509 -checkend 86400 -noout -in "$TLS_DIR/ca.pem" >/dev/null &&
        openssl x509 -checkend 86400 -noout -in "$TLS_DIR/server.pem" >/dev/null
}

# ensure_test_ca: makes the files of $TLS_DIR unless they are valid already
# (in a scratch directory first, so an interrupted run leaves no half set).
ensure_test_ca() {
    local new=$TLS_DIR.new ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    tls_files_valid && return 0
    say "tls: making a test CA and a certificate for localhost in $TLS_DIR"
    rm -rf "$new"
    mkdir -p "$new"
    (
        cd "$new" || exit 1
        openssl req -x509 "${ec[@]}" -days 3650 -subj "/CN=bakery test CA" \
            -keyout ca.key -out ca.pem &&
            openssl req -x509 "${ec[@]}" -days 3650 -subj "/CN=bakery other test CA" \
                -keyout other-ca.key -out other-ca.pem &&
            openssl req "${ec[@]}" -subj /CN=localhost -keyout server.key -out server.csr &&
            printf '%s\n' subjectAltName=DNS:localhost basicConstraints=critical,CA:FALSE \
                keyUsage=critical,digitalSignature extendedKeyUsage=serverAuth >server.ext &&
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 8)" \
                -days 3650 -extfile server.ext -out server.pem
    ) >"$new/openssl.log" 2>&1 || {
        tail -n 20 "$new/openssl.log" >&2
        die "tls: openssl failed (log: $new/openssl.log)"
    }
    chmod 600 "$new"/*.key
    rm -rf "$TLS_DIR"
    mv "$new" "$TLS_DIR"
    tls_files_valid || die "tls: the certificate openssl made in $TLS_DIR does not verify"
}

# tls_answers NAME PORT WANT LACKING COMMAND...: COMMAND, a client of NAME
# on localhost:PORT checking the certificate against the test CA, must print
# WANT; otherwise fails NAME: a server started without LACKING (its TLS
# port) has none.
tls_answers() {
    local name=$1 port=$2 want=$3 lacking=$4 answer
    shift 4
    answer=$("$@" </dev/null 2>&1) || answer="no TLS: $answer"
    [[ $answer == "$want" ]] ||
        fail "$name" "TLS on localhost:$port ($answer); a server started without $lacking needs 'scripts/backends.sh restart $name'"
}

# ---------------------------------------------------------------- processes

# alive PID [COMM]: the process exists, is not a zombie, and (if given) its
# command name is COMM -- so a pid reused by an unrelated process is not "ours".
# A leader thread that has exited shows as a zombie while the process's
# other threads still run (a JVM shutting down, its ports still bound): the
# process is alive until its last thread is gone.
alive() {
    local pid=$1 want=${2:-} stat comm rest tasks
    [[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
    { read -r stat <"/proc/$pid/stat"; } 2>/dev/null || return 1
    comm=${stat#*(}
    comm=${comm%)*}
    rest=${stat##*) }
    if [[ ${rest%% *} == [ZX] ]]; then
        tasks=(/proc/"$pid"/task/*)
        ((${#tasks[@]} > 1)) || return 1
    fi
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

# poll SECONDS COMMAND...: runs COMMAND every 0.2 s until it succeeds (returns
# 0) or SECONDS have passed (returns 1).
poll() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# gone PID [group]: PID has exited; with "group", its whole process group has.
gone() {
    if [[ ${2:-} == group ]]; then
        ! group_alive "$1"
    else
        ! alive "$1"
    fi
}

# wait_gone PID [group]: waits (bounded) until gone; returns 1 on timeout.
wait_gone() { poll "$TIMEOUT" gone "$@"; }

# stop_pid NAME PID: SIGTERM, then SIGKILL if PID outlives the timeout.
stop_pid() {
    kill -TERM "$2"
    wait_gone "$2" || {
        say "$1: still running after ${TIMEOUT}s; SIGKILL"
        kill -KILL "$2"
    }
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

# launch_session [-C DIR] COMMAND...: starts COMMAND in the background (in
# DIR) in a new session, immune to the caller's terminal and Ctrl-C and the
# leader of its own process group; stdin from /dev/null, stdout and stderr
# appended to $LOG, no other descriptor of ours.  The shell records its own
# pid in $PIDFILE, then becomes COMMAND.
launch_session() {
    local cwd=$PWD
    if [[ $1 == -C ]]; then
        cwd=$2
        shift 2
    fi
    (
        close_fds
        cd "$cwd" || exit 1
        # shellcheck disable=SC2016  # $$ and $@ expand in the inner shell
        exec setsid bash -c 'echo $$ >"$0" && exec "$@"' "$PIDFILE" "$@"
    ) </dev/null >>"$LOG" 2>&1 &
}

# launch_daemon COMMAND...: runs COMMAND, a server that daemonizes itself and
# writes $PIDFILE; stdin from /dev/null, output (errors before it opens its own
# log) appended to $LOG, no other descriptor of ours.  Returns its status.
launch_daemon() {
    (
        close_fds
        exec "$@"
    ) </dev/null >>"$LOG" 2>&1
}

# ---------------------------------------------------------------- ports and probes

# port_in_use PORT: something listens on PORT, on 127.0.0.1 or on the
# server's own ADDRESS (a cluster node's 127.0.0.x).
port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null ||
        { [[ $ADDRESS != 127.0.0.1 ]] && (exec 3<>"/dev/tcp/$ADDRESS/$1") 2>/dev/null; }
}

# who_listens PORT: " (process)" when ss can tell, else nothing.
who_listens() {
    have ss || return 0
    ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*users:((\(.*\)))/ (\1)/p' | head -n 1
}

# wire_reply PORT REQUEST N: sends REQUEST (printf escapes, no %) to
# 127.0.0.1:PORT and prints the first N bytes of the reply as hex ("84 00 ..."),
# within 3 seconds.  A protocol-level "are you there" for servers without a CLI
# here (Cassandra: no cqlsh; FerretDB: no mongosh).
wire_reply() {
    # shellcheck disable=SC2016  # $0..$2 expand in the inner shell
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" && printf "$1" >&3 && head -c "$2" <&3' \
        "$1" "$2" "$3" </dev/null 2>/dev/null | od -An -v -tx1 | tr -s ' \n' '  '
}

# ---------------------------------------------------------------- servers

dir_of() { printf '%s/%s\n' "$SCRATCH" "$1"; }

# describe NAME: sets NAME's settings (see the top of this file), and from
# PORTS: PORT_VARS (the environment variables) and CONFIGURED_PORTS (each the
# variable if set, else the port NAME last ran on -- recorded in its scratch
# directory, so a restart or a start after a crash keeps its URI -- else the
# default).
describe() {
    local name=$1 i var value recorded=()
    DIR=$SCRATCH/$name PIDFILE='' COMM='' LOG='' PORTS=() REQUIRES=() ALIASES=() READY_TIMEOUT=$TIMEOUT
    ADDRESS=127.0.0.1
    "${name}_describe"
    if [[ -f $DIR/ports ]]; then read -r -a recorded <"$DIR/ports" || true; fi
    PORT_VARS=() CONFIGURED_PORTS=()
    for i in "${!PORTS[@]}"; do
        var=${PORTS[i]%%=*}
        value=${!var:-${recorded[i]:-${PORTS[i]#*=}}}
        [[ $value =~ ^[1-9][0-9]{0,4}$ && $value -le 65535 ]] || die "$var=$value is not a port number"
        PORT_VARS+=("$var")
        CONFIGURED_PORTS+=("$value")
    done
}

# port_of NAME [FIELD]: the port NAME runs on: the one recorded when this
# script started it, else the configured one.  FIELD 1 (default) is the client
# port, the next ones as NAME_describe lists them.
port_of() (
    local field=${2:-1} recorded=()
    describe "$1"
    if [[ -f $DIR/ports ]]; then read -r -a recorded <"$DIR/ports" || true; fi
    echo "${recorded[field - 1]:-${CONFIGURED_PORTS[field - 1]}}"
)

# load_servers: sources every server file, and checks that each of BACKENDS
# defines the whole interface and valid ports.
load_servers() {
    local file name fn
    for file in "$SERVERS_DIR"/*.sh; do
        # shellcheck source=/dev/null
        [[ $file == */lib.sh ]] || . "$file"
    done
    for name in "${BACKENDS[@]}"; do
        for fn in describe missing install start ready after_start uri stop; do
            declare -F "${name}_$fn" >/dev/null || die "$name: no function ${name}_$fn in $SERVERS_DIR"
        done
        describe "$name"
        ((${#PORTS[@]})) || die "$name: ${name}_describe sets no PORTS"
    done
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

is_running() { server_pid "$1" >/dev/null && "${1}_ready"; }

# answering NAME: NAME's recorded process is alive and the server answers.
# Fails the run when that process has died.
answering() {
    local name=$1 pid=''
    is_running "$name" && return 0
    { read -r pid <"$PIDFILE"; } 2>/dev/null || true
    if [[ -n $pid ]] && ! alive "$pid"; then
        fail "$name" "the server (pid $pid) exited during start-up"
    fi
    return 1
}

# Waits (bounded by READY_TIMEOUT) until NAME is answering.
wait_ready() {
    describe "$1"
    poll "$READY_TIMEOUT" answering "$1"
}

# ---------------------------------------------------------------- export lines

export_line() {
    local var=$1 value=$2
    if [[ $value =~ ^[A-Za-z0-9@:/._+=-]+$ ]]; then
        printf 'export %s=%s\n' "$var" "$value"
    else
        printf "export %s='%s'\n" "$var" "${value//\'/\'\\\'\'}"
    fi
}

# env_var_of NAME: the variable of NAME's export line: BAKERY_NAME_URI, or
# what NAME_env_var prints if NAME defines one (toxiproxy: an API URL).
env_var_of() {
    if declare -F "${1}_env_var" >/dev/null; then
        "${1}_env_var"
    else
        echo "BAKERY_${1^^}_URI"
    fi
}

print_exports() {
    local name line var value lines
    local -A printed=()
    for name in "$@"; do
        lines=("$(export_line "$(env_var_of "$name")" "$("${name}_uri")")")
        if declare -F "${name}_more_env" >/dev/null; then
            while read -r var value; do
                lines+=("$(export_line "$var" "$value")")
            done < <("${name}_more_env")
        fi
        for line in "${lines[@]}"; do
            # The members of a cluster share one variable: print it once.
            [[ -n ${printed[$line]:-} ]] && continue
            printed[$line]=1
            echo "$line"
        done
    done
}

# target/backends.env: the export lines of every running server.
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

# ---------------------------------------------------------------- start, stop, kill, status

# Servers start_one has brought up (or found running) in this invocation.
STARTED=' '

start_one() {
    local name=$1 pid i port var required started ports
    [[ $STARTED != *" $name "* ]] || return 0
    describe "$name"
    for required in "${REQUIRES[@]}"; do
        start_one "$required"
    done
    "${name}_install"
    describe "$name"
    if pid=$(server_pid "$name"); then
        wait_ready "$name" ||
            fail "$name" "running (pid $pid) but not answering on port $(port_of "$name") after ${READY_TIMEOUT}s"
        say "$name: already running (pid $pid, $ADDRESS:$(port_of "$name"))"
        for i in "${!PORT_VARS[@]}"; do
            port=${CONFIGURED_PORTS[i]} var=${PORT_VARS[i]}
            if [[ -f $DIR/ports && " $(<"$DIR/ports") " != *" $port "* ]]; then
                say "$name: note: $var=$port is ignored while it runs on $(<"$DIR/ports"); use 'restart $name' to move it"
            fi
        done
        "${name}_after_start"
        STARTED+="$name "
        return 0
    fi
    if [[ -f $PIDFILE ]]; then
        say "$name: removing stale pid file $PIDFILE"
        rm -f "$PIDFILE"
    fi
    for i in "${!PORT_VARS[@]}"; do
        port=${CONFIGURED_PORTS[i]} var=${PORT_VARS[i]}
        if port_in_use "$port"; then
            die "$name: port $port on $ADDRESS is already in use by a process this script did not start$(who_listens "$port"); stop it, or choose another port with $var=<port>"
        fi
    done
    mkdir -p "$DIR"
    ports=("${CONFIGURED_PORTS[@]}")
    echo "${ports[*]}" >"$DIR/ports"
    say "$name: starting on $ADDRESS:${ports[0]}${ports[1]:+ (also ports ${ports[*]:1})}, data and log in $DIR"
    started=$SECONDS
    "${name}_start" || fail "$name" "failed to start"
    wait_ready "$name" || fail "$name" "not answering on $ADDRESS:$(port_of "$name") after ${READY_TIMEOUT}s"
    "${name}_after_start"
    say "$name: ready in $((SECONDS - started))s (pid $(server_pid "$name"), $("${name}_uri"))"
    STARTED+="$name "
}

# dependents_of NAME: the running servers whose REQUIRES names NAME.
dependents_of() (
    local other
    for other in "${BACKENDS[@]}"; do
        describe "$other"
        if [[ " ${REQUIRES[*]} " == *" $1 "* ]] && server_pid "$other" >/dev/null; then echo "$other"; fi
    done
)

stop_one() {
    local name=$1 pid other
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
    for other in $(dependents_of "$name"); do
        say "$name: note: $other needs $name; it fails until $name is back"
    done
    "${name}_stop" "$pid"
    wait_gone "$pid" || die "$name: pid $pid did not exit"
    rm -f "$PIDFILE"
    say "$name: stopped"
}

kill_one() {
    local name=$1 pid targets=() all=() p
    describe "$name"
    if ! pid=$(server_pid "$name"); then
        say "$name: not running"
        return 0
    fi
    # A crash of the server's machine: every process of the server stops at
    # once.  The process group is not enough: PostgreSQL's backends each run
    # in a session of their own, and one that outlives its postmaster by a
    # moment finishes a commit still waiting for its synchronous standby —
    # visible to the others, never replicated.  So stop the whole tree
    # first (nothing acts on another's death), then kill it.
    read -r -a targets <<<"$(descendants "$pid")"
    all=("$pid" "${targets[@]}")
    if [[ $(pgrp_of "$pid") == "$pid" ]]; then
        say "$name: SIGKILL process group $pid and ${#targets[@]} descendants"
        kill -STOP -- "-$pid" "${all[@]}" 2>/dev/null || true
        kill -KILL -- "-$pid" "${all[@]}" 2>/dev/null || true
        wait_gone "$pid" group || die "$name: process group $pid did not exit"
    else
        say "$name: SIGKILL pid $pid and ${#targets[@]} descendants"
        kill -STOP "${all[@]}" 2>/dev/null || true
        kill -KILL "${all[@]}" 2>/dev/null || true
    fi
    for p in "${all[@]}"; do
        wait_gone "$p" || die "$name: pid $p did not exit"
    done
    say "$name: killed (data kept; 'start $name' recovers it)"
}

# descendants PID: the pids of every process below PID (children, theirs, …).
descendants() {
    local stat_file stat rest fields queue=("$1") out=() parent child
    local -A children=()
    for stat_file in /proc/[0-9]*/stat; do
        { read -r stat <"$stat_file"; } 2>/dev/null || continue
        rest=${stat##*) }
        read -r -a fields <<<"$rest"
        children[${fields[1]}]+=" ${stat%% *}"
    done
    while ((${#queue[@]})); do
        parent=${queue[0]}
        queue=("${queue[@]:1}")
        for child in ${children[$parent]:-}; do
            out+=("$child")
            queue+=("$child")
        done
    done
    echo "${out[*]}"
}

status_one() {
    local name=$1 pid state detail='' i port
    describe "$name"
    if pid=$(server_pid "$name"); then
        if "${name}_ready"; then
            state=running
            detail="pid $pid, $ADDRESS:$(port_of "$name"), $("${name}_uri")"
        else
            state=not-answering
            detail="pid $pid, $ADDRESS:$(port_of "$name"), log $LOG"
        fi
    else
        state=stopped
        [[ -f $PIDFILE ]] && detail="stale pid file $PIDFILE"
        for i in "${!PORT_VARS[@]}"; do
            port=${CONFIGURED_PORTS[i]}
            if port_in_use "$port"; then
                detail+="${detail:+; }port $port is taken by another process (${PORT_VARS[i]})"
            fi
        done
    fi
    printf '%-14s %-14s %s\n' "$name" "$state" "$detail"
}

# expand_names NAME...: BACKENDS names, in the order given, once each; "all"
# (the default) is every server, an alias its server.
expand_names() {
    local name known found out=() seen=' '
    [[ $# -gt 0 ]] || set -- all
    for name in "$@"; do
        if [[ $name == all ]]; then
            out+=("${BACKENDS[@]}")
            continue
        fi
        found=''
        for known in "${BACKENDS[@]}"; do
            describe "$known"
            if [[ $name == "$known" || " ${ALIASES[*]} " == *" $name "* ]]; then
                found=$known
                break
            fi
        done
        [[ -n $found ]] || die "unknown backend '$name' (known: ${BACKENDS[*]}, all)"
        out+=("$found")
    done
    for name in "${out[@]}"; do
        [[ $seen == *" $name "* ]] || echo "$name"
        seen+="$name "
    done
}
