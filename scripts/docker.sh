#!/usr/bin/env bash
# A private Docker engine and bakery's server images, built on this machine:
# no container registry is needed (none is reachable on the project's
# machines).  Each image comes from a Debian bookworm root file system made
# with debootstrap (Debian's mirror) plus Debian's packages, or the binaries
# scripts/backends.sh already builds (FerretDB, Cassandra's jars).
#
#   scripts/docker.sh install            apt-get install docker.io, docker-compose and
#                                        debootstrap where missing (root or sudo)
#   scripts/docker.sh start              install if missing, start a private dockerd unless
#                                        one answers on its socket already, and print
#                                          export DOCKER_HOST=unix://…
#                                        so `eval "$(scripts/docker.sh start)"` works
#   scripts/docker.sh build [NAME...]    build the images (default: all) unless present,
#                                        on the engine of DOCKER_HOST if set, else the private one
#   scripts/docker.sh wait [PROJECT]     wait until every container of compose project
#                                        PROJECT (bakery) is healthy; fail if one is not
#   scripts/docker.sh status             the engine, and each image present or not
#   scripts/docker.sh env                the export line, if the engine answers
#   scripts/docker.sh stop               stop the private dockerd (images are kept)
#
# NAME is postgres, redis, etcd, mariadb, cassandra or ferretdb; each image is
# bakery-test/NAME, tagged twice: by a hash of everything it is built from
# (docker/images/NAME, the base image's recipe, the binaries copied in), so a
# second build with the image present does nothing, and `local`, which
# docker/compose.local.yaml and bakery-testkit's containers
# (BAKERY_CONTAINER_IMAGES=local) start.  Each has a HEALTHCHECK on real
# readiness; docker/README.md lists what each runs.
#
# The engine: dockerd with its data, state and socket under
# $BAKERY_SCRATCH/docker (as scripts/backends.sh: ${TMPDIR:-/tmp}/bakery-backends),
# socket $BAKERY_SCRATCH/docker/docker.sock, overlay2 storage (vfs where
# overlay2 fails), its bridge on 10.231.88.0/24 and compose networks in
# 10.231.96.0/20 (clear of 10.231.77.0/24, the partition tests' bridge
# bakerypart0 of scripts/backends/netns.sh).  Needs root.  dockerd sets
# iptables' FORWARD policy to DROP and leaves its rules after a stop;
# bakerypart0 has its own ACCEPT rule (netns.sh).
#
# A new dockerd (after a reboot, a killed engine) first removes what an
# interrupted run left: the containers of compose project bakery and
# testcontainers' (label org.testcontainers.managed-by=testcontainers), all
# stopped by then, with their volumes.  An engine that answers already is
# left alone: a test run may be using its containers.
#
# Environment:
#   BAKERY_SCRATCH                 as scripts/backends.sh
#   XDG_CACHE_HOME                 the debootstrap root file system is cached under
#                                  ${XDG_CACHE_HOME:-~/.cache}/bakery/docker
#   BAKERY_DOCKER_STORAGE          overlay2 (default) or vfs
#   BAKERY_DEBIAN_MIRROR           http://deb.debian.org/debian
#   BAKERY_DOCKER_TIMEOUT          seconds to wait for dockerd or a health check (120)
set -euo pipefail

# The paths, apt and the FerretDB/Cassandra builds of scripts/backends.sh.
# shellcheck source-path=SCRIPTDIR source=backends/lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/backends/lib.sh"

say() { printf 'docker.sh: %s\n' "$*" >&2; }
die() {
    printf 'docker.sh: error: %s\n' "$*" >&2
    exit 1
}

DOCKER_DIR=$SCRATCH/docker
SOCK=$DOCKER_DIR/docker.sock
HOST=unix://$SOCK
PIDFILE=$DOCKER_DIR/dockerd.pid
DLOG=$DOCKER_DIR/dockerd.log
IMAGE_CACHE=$CACHE_DIR/docker
IMAGES_DIR=$ROOT/docker/images
MIRROR=${BAKERY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
DTIMEOUT=${BAKERY_DOCKER_TIMEOUT:-120}
ALL_IMAGES=(postgres redis etcd mariadb cassandra ferretdb)
[[ $DTIMEOUT =~ ^[1-9][0-9]*$ ]] || die "BAKERY_DOCKER_TIMEOUT=$DTIMEOUT is not a number of seconds"
((${#SOCK} <= 100)) || die "socket path too long for a Unix socket: $SOCK (set BAKERY_SCRATCH shorter)"

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$ROOT/scripts/docker.sh" >&2
}

# build, wait and status use the engine of DOCKER_HOST when it is set (yours,
# or the private one `start` exported), else the private one; start and stop
# are about the private one only.
ENGINE=${DOCKER_HOST:-$HOST}

# The Debian docker.io client talks to the engine it installs; another
# `docker` on PATH (a newer static CLI) works too.  The classic builder:
# bookworm has no buildx.
dk() { DOCKER_HOST=$ENGINE DOCKER_BUILDKIT=0 docker "$@"; }

# answers [HOST]: a Docker engine answers at HOST (default: ENGINE).
answers() { timeout 10 env DOCKER_HOST="${1:-$ENGINE}" docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
engine_answers() { answers "$HOST"; }

# ---------------------------------------------------------------- install

docker_missing() {
    have dockerd || echo docker.io
    have docker || echo docker.io
    have docker-compose || echo docker-compose
    have debootstrap || echo debootstrap
    have iptables || echo iptables
}

cmd_install() {
    local pkgs
    mapfile -t pkgs < <(docker_missing | sort -u)
    ((${#pkgs[@]})) || return 0
    apt_install "${pkgs[@]}"
    mapfile -t pkgs < <(docker_missing | sort -u)
    ((${#pkgs[@]} == 0)) || die "still missing after apt-get install: ${pkgs[*]}"
}

# ---------------------------------------------------------------- engine

dockerd_pid() {
    local pid
    [[ -f $PIDFILE ]] || return 1
    pid=$(<"$PIDFILE")
    [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]] && echo "$pid"
}

# launch DRIVER: dockerd in its own session; 0 once it answers.
launch() {
    local driver=$1 pid deadline dockerd_pidfile=$PIDFILE
    say "starting dockerd (storage driver $driver), log $DLOG"
    # lib.sh's launch_session: a session of its own (the engine outlives this
    # script and the shell that ran it), none of our descriptors (the lock
    # on fd 8, a CI job's pipes), output appended to LOG.  Its PIDFILE is the
    # session's record; dockerd writes its own --pidfile (the same pid).
    PIDFILE=$DOCKER_DIR/session.pid LOG=$DLOG launch_session \
        dockerd --data-root "$DOCKER_DIR/data" --exec-root "$DOCKER_DIR/exec" \
        --pidfile "$dockerd_pidfile" -H "$HOST" --storage-driver "$driver" \
        --bip 10.231.88.1/24 --default-address-pool base=10.231.96.0/20,size=24
    pid=$!
    deadline=$((SECONDS + DTIMEOUT))
    while ((SECONDS < deadline)); do
        if engine_answers; then
            echo "$driver" >"$DOCKER_DIR/storage-driver"
            say "dockerd $pid answers on $HOST"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.5
    done
    kill "$pid" 2>/dev/null || true
    return 1
}

cmd_start() {
    local driver
    if engine_answers; then
        echo "export DOCKER_HOST=$HOST"
        return 0
    fi
    [[ $EUID -eq 0 ]] || die "starting a private dockerd needs root (or run your own engine and set DOCKER_HOST)"
    cmd_install
    mkdir -p "$DOCKER_DIR"
    exec 8>"$DOCKER_DIR/.lock"
    flock -w "$DTIMEOUT" 8 || die "another scripts/docker.sh holds $DOCKER_DIR/.lock"
    if engine_answers; then # started meanwhile by another run
        echo "export DOCKER_HOST=$HOST"
        return 0
    fi
    if dockerd_pid >/dev/null; then
        die "dockerd $(dockerd_pid) runs but does not answer on $HOST; see $DLOG, or scripts/docker.sh stop"
    fi
    rm -f "$SOCK" "$PIDFILE"
    # A data root keeps the storage driver it was made with.
    driver=${BAKERY_DOCKER_STORAGE:-$(cat "$DOCKER_DIR/storage-driver" 2>/dev/null || echo overlay2)}
    if ! launch "$driver"; then
        if [[ $driver == overlay2 && -z ${BAKERY_DOCKER_STORAGE:-} ]]; then
            say "overlay2 failed (last lines of $DLOG below); trying vfs"
            tail -n 5 "$DLOG" | sed 's/^/    /' >&2
            rm -rf "$DOCKER_DIR/data" "$DOCKER_DIR/exec"
            rm -f "$SOCK" "$PIDFILE"
            launch vfs || {
                tail -n 30 "$DLOG" | sed 's/^/    /' >&2
                die "dockerd did not answer on $HOST within ${DTIMEOUT}s (log above)"
            }
        else
            tail -n 30 "$DLOG" | sed 's/^/    /' >&2
            die "dockerd did not answer on $HOST within ${DTIMEOUT}s (log above)"
        fi
    fi
    remove_leftovers
    echo "export DOCKER_HOST=$HOST"
}

# remove_leftovers: on an engine just started, the containers an interrupted
# run left (compose project bakery, testcontainers'; stopped, as the old
# engine went), with their anonymous volumes.  No test can be using them yet.
remove_leftovers() {
    # The private engine's, whatever DOCKER_HOST names (dk reads ENGINE).
    local ENGINE=$HOST ids
    mapfile -t ids < <({
        dk ps -aq --filter label=com.docker.compose.project=bakery
        dk ps -aq --filter label=org.testcontainers.managed-by=testcontainers
    } | sort -u)
    if ((${#ids[@]})); then
        say "removing ${#ids[@]} container(s) an interrupted run left (compose project bakery, testcontainers)"
        dk rm -f -v "${ids[@]}" >/dev/null || die "could not remove leftover containers ${ids[*]}"
    fi
}

cmd_stop() {
    local pid deadline
    pid=$(dockerd_pid) || {
        say "no private dockerd running ($PIDFILE)"
        return 0
    }
    say "stopping dockerd $pid (its containers stop with it; images are kept)"
    kill -TERM "$pid"
    deadline=$((SECONDS + DTIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
        ((SECONDS < deadline)) || die "dockerd $pid still runs after ${DTIMEOUT}s"
        sleep 0.5
    done
}

need_engine() {
    answers || die "no Docker engine answers on $ENGINE: run  eval \"\$(scripts/docker.sh start)\"  first"
}

# ---------------------------------------------------------------- images

# What the base image is made of; any change makes a new base (and so new images).
base_recipe() {
    printf 'debootstrap --variant=minbase %s %s\n' "$SUITE" "$MIRROR"
    declare -f make_rootfs
}

base_tag() { printf 'bakery-test/base:%s\n' "$(base_recipe | sha256sum | cut -c1-16)"; }

# make_rootfs DIR: a minimal bookworm with apt set up for images (no
# recommends, no docs, no services started by package scripts).
make_rootfs() {
    local dir=$1
    debootstrap --variant=minbase "$SUITE" "$dir" "$MIRROR" >&2
    # Package scripts must not start servers while an image is built.
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
    chmod 755 "$dir/usr/sbin/policy-rc.d"
    printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
        >"$dir/etc/apt/apt.conf.d/90bakery"
    printf 'path-exclude=/usr/share/doc/*\npath-exclude=/usr/share/man/*\npath-exclude=/usr/share/locale/*\n' \
        >"$dir/etc/dpkg/dpkg.cfg.d/90bakery"
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/*
}

build_base() {
    local tag tar tmp started=$SECONDS
    tag=$(base_tag)
    if dk image inspect "$tag" >/dev/null 2>&1; then return 0; fi
    tar=$IMAGE_CACHE/rootfs-${tag##*:}.tar
    if [[ ! -f $tar ]]; then
        [[ $EUID -eq 0 ]] || die "debootstrap needs root"
        have debootstrap || cmd_install
        say "base: debootstrap --variant=minbase $SUITE from $MIRROR (once; about a minute)"
        mkdir -p "$IMAGE_CACHE"
        tmp=$(mktemp -d "$IMAGE_CACHE/rootfs.XXXXXX")
        if ! make_rootfs "$tmp/root" >"$tmp.log" 2>&1; then
            tail -n 30 "$tmp.log" | sed 's/^/    /' >&2
            rm -rf "$tmp" "$tmp.log"
            die "base: debootstrap failed (output above); is $MIRROR reachable?"
        fi
        tar --numeric-owner -C "$tmp/root" -cf "$tar.tmp" .
        mv -f "$tar.tmp" "$tar"
        rm -rf "$tmp" "$tmp.log"
    fi
    say "base: importing $tar as $tag"
    dk import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV DEBIAN_FRONTEND=noninteractive' --change 'CMD ["bash"]' \
        "$tar" "$tag" >/dev/null
    say "base: $tag in $((SECONDS - started))s"
    drop_old bakery-test/base "${tag##*:}"
}

# The image another is built FROM (ferretdb runs on the postgres image).
parent_of() {
    case $1 in
    ferretdb) echo postgres ;;
    *) echo base ;;
    esac
}

# extras NAME DIR: copies the binaries NAME's build context needs into DIR
# (built by scripts/backends.sh's functions, in the same cache).
extras() {
    local name=$1 ctx=$2
    case $name in
    ferretdb)
        BACKENDS=(postgres mongodb)
        load_servers
        mongodb_install >&2
        cp "$(ferretdb_bin)" "$ctx/ferretdb"
        ;;
    cassandra)
        BACKENDS=(cassandra)
        load_servers
        # The jars only (mvn; Debian's maven package brings a JDK with it):
        # the image has its own Java, so none is looked for here.
        have mvn || apt_install maven
        cassandra_java() { echo /bin/true; }
        cassandra_install >&2
        mkdir -p "$ctx/lib"
        cp "$(cassandra_lib)"/*.jar "$ctx/lib/"
        # The entrypoint configures and runs the node with its functions.
        cp "$SERVERS_DIR/cassandra.sh" "$ctx/cassandra.sh"
        ;;
    esac
}

# image_hash NAME CONTEXT PARENT_TAG: the hash of what the image is built from.
image_hash() {
    local ctx=$2 parent=$3
    {
        echo "$parent"
        (cd "$ctx" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    } | sha256sum | cut -c1-16
}

# build_one NAME: builds NAME unless its hash tag exists (its parent first:
# the parent's tag is one of its inputs), tags it :local, and records the tag.
declare -A BUILT=()
# Build contexts (copies, with binaries), removed when the script exits.
CONTEXTS=()
trap 'rm -rf "${CONTEXTS[@]}"' EXIT
build_one() {
    local name=$1 parent parent_tag ctx tag started=$SECONDS
    if [[ -n ${BUILT[$name]:-} ]]; then return 0; fi
    [[ -f $IMAGES_DIR/$name/Dockerfile ]] || die "no image $name (docker/images/$name/Dockerfile); known: ${ALL_IMAGES[*]}"
    parent=$(parent_of "$name")
    if [[ $parent == base ]]; then
        build_base
        parent_tag=$(base_tag)
    else
        build_one "$parent"
        parent_tag=${BUILT[$parent]}
    fi
    ctx=$(mktemp -d "${TMPDIR:-/tmp}/bakery-image-$name.XXXXXX")
    CONTEXTS+=("$ctx")
    cp -r "$IMAGES_DIR/$name/." "$ctx/"
    extras "$name" "$ctx"
    tag=bakery-test/$name:$(image_hash "$name" "$ctx" "$parent_tag")
    if ! dk image inspect "$tag" >/dev/null 2>&1; then
        say "$name: building $tag"
        if ! dk build -q --force-rm --build-arg "BASE=$parent_tag" -t "$tag" "$ctx" >"$ctx.log" 2>&1; then
            tail -n 40 "$ctx.log" | sed 's/^/    /' >&2
            rm -f "$ctx.log"
            die "$name: docker build failed (output above)"
        fi
        rm -f "$ctx.log"
        say "$name: built $tag in $((SECONDS - started))s"
    fi
    dk tag "$tag" "bakery-test/$name:local"
    drop_old "bakery-test/$name" "${tag##*:}"
    BUILT[$name]=$tag
}

# drop_old REPO KEEP: removes REPO's hash tags other than KEEP (builds from
# older inputs), so the engine's disk does not grow with every change.
drop_old() {
    local repo=$1 keep=$2 old
    for old in $(dk images "$repo" --format '{{.Tag}}'); do
        if [[ $old != "$keep" && $old != local ]]; then
            dk rmi "$repo:$old" >/dev/null 2>&1 || true # in use by a container: later
        fi
    done
}

cmd_build() {
    local names=("$@") name
    ((${#names[@]})) || names=("${ALL_IMAGES[@]}")
    need_engine
    mkdir -p "$IMAGE_CACHE"
    for name in "${names[@]}"; do build_one "$name"; done
    for name in "${names[@]}"; do say "$name: ${BUILT[$name]} (also :local)"; done
}

# ---------------------------------------------------------------- compose

# cmd_wait PROJECT: every container of the compose project healthy, within
# the timeout; fails at once on one that is unhealthy or has exited.
cmd_wait() {
    local project=${1:-${COMPOSE_PROJECT_NAME:-bakery}} deadline ids id state pending
    need_engine
    deadline=$((SECONDS + DTIMEOUT * 3))
    while :; do
        mapfile -t ids < <(dk ps -aq --filter "label=com.docker.compose.project=$project")
        ((${#ids[@]})) || die "no containers of compose project $project"
        pending=()
        for id in "${ids[@]}"; do
            state=$(dk inspect -f '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id")
            case $state in
            *" running healthy" | *" running none") ;;
            *" running starting") pending+=("${state%% *}") ;;
            *)
                dk logs --tail 30 "$id" 2>&1 | sed 's/^/    /' >&2
                die "container ${state% *} ($state); its log above"
                ;;
            esac
        done
        if ((${#pending[@]} == 0)); then
            say "compose project $project: ${#ids[@]} containers healthy"
            return 0
        fi
        ((SECONDS < deadline)) || die "not healthy after $((DTIMEOUT * 3))s: ${pending[*]}"
        sleep 1
    done
}

cmd_status() {
    local name tag pid
    if answers; then
        pid=$(dockerd_pid) || pid='not started by this script'
        [[ $ENGINE == "$HOST" ]] || pid="not this script's"
        echo "engine: answers on $ENGINE (dockerd $pid, storage $(dk info --format '{{.Driver}}'))"
    else
        echo "engine: none answers on $ENGINE"
        return 0
    fi
    for name in "${ALL_IMAGES[@]}"; do
        if tag=$(dk image inspect -f '{{.Id}}' "bakery-test/$name:local" 2>/dev/null); then
            echo "$name: bakery-test/$name:local ${tag:7:12}"
        else
            echo "$name: not built"
        fi
    done
}

main() {
    local cmd=${1:-help}
    shift || true
    case $cmd in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    build) cmd_build "$@" ;;
    wait) cmd_wait "$@" ;;
    status) cmd_status ;;
    env) if engine_answers; then echo "export DOCKER_HOST=$HOST"; else die "no engine answers on $HOST"; fi ;;
    help | -h | --help) usage ;;
    *)
        usage
        die "unknown command '$cmd'"
        ;;
    esac
}

main "$@"
