# shellcheck shell=bash
# postgres_primary and postgres_standby: a PostgreSQL primary and its
# streaming standby, apart from the `postgres` server (which FerretDB uses),
# with the same binaries (pg_bin, pg_run: postgres.sh).  Both listen on TCP
# only (no Unix socket) and their URIs name database "postgres".
#
# The standby is disposable: every start of postgres_standby makes it afresh
# from a base backup of the primary (pg_basebackup -R), so after a failover
# test promoted it, `restart postgres_standby` gives a standby again.  It
# connects as application_name "bakery_standby", so the primary's
# synchronous_standby_names can name it (tests/cluster_postgres.rs sets that
# with ALTER SYSTEM); its own synchronous_standby_names is empty, so once
# promoted it commits without waiting for a standby it does not have.
# (See lib.sh for the functions every server file defines.)

PG_STANDBY_APP=bakery_standby

# shellcheck disable=SC2034  # describe (lib.sh) reads these
postgres_primary_describe() {
    PIDFILE=$DIR/data/postmaster.pid
    COMM=postgres
    LOG=$DIR/postgres.log
    PORTS=(BAKERY_PG_PRIMARY_PORT=15433)
}

# shellcheck disable=SC2034  # describe (lib.sh) reads these
postgres_standby_describe() {
    PIDFILE=$DIR/data/postmaster.pid
    COMM=postgres
    LOG=$DIR/postgres.log
    PORTS=(BAKERY_PG_STANDBY_PORT=15434)
    REQUIRES=(postgres_primary)
}

postgres_primary_missing() { postgres_missing; }
postgres_standby_missing() { postgres_missing; }
postgres_primary_install() { install_missing postgres_primary; }
postgres_standby_install() { install_missing postgres_standby; }

# pg_owned_dir: $DIR exists and (as root) belongs to the cluster owner.
pg_owned_dir() {
    mkdir -p "$DIR"
    if [[ $EUID -eq 0 ]]; then
        id -u postgres >/dev/null 2>&1 || die "postgres: no user 'postgres' (the postgresql package creates it)"
        chown postgres: "$DIR"
    fi
}

# pg_ctl_start NAME SETTINGS...: pg_ctl start on $DIR/data, TCP on NAME's
# port only, each SETTING a -c name=value.
pg_ctl_start() {
    local name=$1 opts setting
    shift
    opts="-p $(port_of "$name") -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
    for setting in "$@"; do opts+=" -c $setting"; done
    (
        close_fds
        pg_run "$(pg_bin)/pg_ctl" -D "$DIR/data" -l "$LOG" -w -t "$TIMEOUT" -o "$opts" start
    ) </dev/null
}

postgres_primary_start() {
    pg_owned_dir
    if [[ ! -f $DIR/data/PG_VERSION ]]; then
        rm -rf "$DIR/data"
        say "postgres_primary: initdb $DIR/data"
        pg_run "$(pg_bin)/initdb" -D "$DIR/data" -A trust -U postgres -E UTF8 --no-locale \
            >"$DIR/initdb.log" 2>&1 || return 1
    fi
    pg_ctl_start postgres_primary wal_level=replica synchronous_commit=on max_connections=100
}

postgres_standby_start() {
    local primary
    primary=$(port_of postgres_primary)
    pg_owned_dir
    rm -rf "$DIR/data"
    say "postgres_standby: base backup of 127.0.0.1:$primary into $DIR/data"
    pg_run "$(pg_bin)/pg_basebackup" -h 127.0.0.1 -p "$primary" -U postgres -D "$DIR/data" \
        -R -X stream -c fast >"$DIR/basebackup.log" 2>&1 || return 1
    pg_ctl_start postgres_standby "cluster_name=$PG_STANDBY_APP" "synchronous_standby_names=''" \
        hot_standby=on synchronous_commit=on max_connections=100
}

pg_isready_on() { "$(pg_bin)/pg_isready" -q -t 2 -h 127.0.0.1 -p "$(port_of "$1")" -U postgres -d postgres </dev/null; }
postgres_primary_ready() { pg_isready_on postgres_primary; }
postgres_standby_ready() { pg_isready_on postgres_standby; }

# pg_query NAME SQL: one value from NAME's server.
pg_query() {
    "$(pg_bin)/psql" -X -q -h 127.0.0.1 -p "$(port_of "$1")" -U postgres -d postgres -tAc "$2" </dev/null
}

postgres_primary_after_start() { :; }

pg_standby_streaming() {
    [[ $(pg_query postgres_primary "SELECT count(*) FROM pg_stat_replication
        WHERE application_name = '$PG_STANDBY_APP' AND state = 'streaming'" 2>/dev/null) == 1 ]]
}

# Waits until the primary sees the standby streaming -- unless it has been
# promoted (then it says so: `restart postgres_standby` makes it a standby again).
postgres_standby_after_start() {
    if [[ $(pg_query postgres_standby "SELECT pg_is_in_recovery()") != t ]]; then
        say "postgres_standby: promoted (a primary now); 'restart postgres_standby' makes a fresh standby"
        return 0
    fi
    poll "$READY_TIMEOUT" pg_standby_streaming ||
        fail postgres_standby "the primary does not see it streaming after ${READY_TIMEOUT}s"
}

postgres_primary_uri() { echo "postgres://postgres@127.0.0.1:$(port_of postgres_primary)/postgres"; }
postgres_standby_uri() { echo "postgres://postgres@127.0.0.1:$(port_of postgres_standby)/postgres"; }

pg_ctl_stop() { pg_run "$(pg_bin)/pg_ctl" -D "$DIR/data" -m fast -w -t "$TIMEOUT" stop </dev/null; }
postgres_primary_stop() { pg_ctl_stop; }
postgres_standby_stop() { pg_ctl_stop; }
