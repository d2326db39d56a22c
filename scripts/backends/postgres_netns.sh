# shellcheck shell=bash
# postgres_net1 and postgres_net2: a PostgreSQL primary (postgres_net1) and
# its synchronous streaming standby (postgres_net2), each in a network
# namespace of its own on the private bridge of netns.sh (10.231.77.21 and
# .22), so that scripts/partition.sh can cut the network between them while
# both stay up -- apart from postgres_primary/postgres_standby (loopback,
# killed and promoted by tests/cluster_postgres.rs).  Same binaries
# (postgres.sh: pg_bin, pg_run).  Both listen on their own address only (no
# Unix socket), on the same port; their URIs name database "postgres".
#
# The primary names the standby in synchronous_standby_names (application
# name bakery_net_standby, its cluster_name) with synchronous_commit=on: a
# commit is acknowledged once the standby has flushed its WAL, so with the
# standby cut off the primary's commits wait.  Both are disposable: every
# start of postgres_net1 makes a fresh cluster (initdb), and
# every start of postgres_net2 a fresh standby from a base backup of it
# (pg_basebackup -R), so after a test promoted the standby or the primary
# diverged, `restart postgres_net1 postgres_net2` gives a new pair.  Start
# the primary first (the standby REQUIRES it); while the standby is down the
# primary's commits wait for it.
#
# postgres_net1 exports BAKERY_POSTGRES_NETNS_PRIMARY_URI, postgres_net2
# BAKERY_POSTGRES_NETNS_STANDBY_URI.  Needs root (ip netns), iproute2 and iptables.
# tests/partition_postgres.rs partitions them.  (See lib.sh for the
# functions every server file defines.)

PG_NET_STANDBY_APP=bakery_net_standby

# shellcheck disable=SC2034  # describe (lib.sh) reads these
postgres_net_describe() {
    PIDFILE=$DIR/data/postmaster.pid
    COMM=postgres
    LOG=$DIR/postgres.log
    # The same port on both, each on its own address in its own namespace
    # (ADDRESS stays 127.0.0.1, where lib.sh looks for a port in use).
    PORTS=(BAKERY_PG_NETNS_PORT=15435)
}
postgres_net1_describe() { postgres_net_describe; }
# shellcheck disable=SC2034  # describe (lib.sh) reads it
postgres_net2_describe() {
    postgres_net_describe
    REQUIRES=(postgres_net1)
}

postgres_net_missing() {
    postgres_missing
    netns_missing
}

# pg_net_ctl_start N SETTINGS...: pg_ctl start on $DIR/data inside member
# N's namespace, TCP on its address only, each SETTING a -c name=value.
pg_net_ctl_start() {
    local n=$1 opts setting
    shift
    opts="-p $(port_of "postgres_net$n") -c listen_addresses=$(netns_ip "postgres_net$n") -c unix_socket_directories=''"
    for setting in "$@"; do opts+=" -c $setting"; done
    (
        close_fds
        cd / || exit 1
        ip netns exec "$(netns_of "postgres_net$n")" runuser -u postgres -- \
            "$(pg_bin)/pg_ctl" -D "$DIR/data" -l "$LOG" -w -t "$TIMEOUT" -o "$opts" start
    ) </dev/null
}

postgres_net1_start() {
    netns_need_root postgres_net1
    netns_up postgres_net1
    pg_owned_dir
    rm -rf "$DIR/data"
    say "postgres_net1: initdb $DIR/data"
    pg_run "$(pg_bin)/initdb" -D "$DIR/data" -A trust -U postgres -E UTF8 --no-locale \
        >"$DIR/initdb.log" 2>&1 || return 1
    # The clients (the root namespace's bridge address) and the standby
    # connect over the bridge's subnet.
    printf 'host all all %s.0/24 trust\nhost replication all %s.0/24 trust\n' \
        "$NETNS_SUBNET" "$NETNS_SUBNET" >>"$DIR/data/pg_hba.conf"
    # In the file, not on the command line (which would outrank ALTER
    # SYSTEM): a test makes the pair asynchronous with ALTER SYSTEM.
    echo "synchronous_standby_names = '$PG_NET_STANDBY_APP'" >>"$DIR/data/postgresql.conf"
    pg_net_ctl_start 1 wal_level=replica synchronous_commit=on max_connections=100
}

postgres_net2_start() {
    local primary
    primary=$(netns_ip postgres_net1)
    netns_need_root postgres_net2
    netns_up postgres_net2
    pg_owned_dir
    rm -rf "$DIR/data"
    say "postgres_net2: base backup of $primary into $DIR/data"
    pg_run "$(pg_bin)/pg_basebackup" -h "$primary" -p "$(port_of postgres_net1)" -U postgres \
        -D "$DIR/data" -R -X stream -c fast >"$DIR/basebackup.log" 2>&1 || return 1
    pg_net_ctl_start 2 "cluster_name=$PG_NET_STANDBY_APP" "synchronous_standby_names=''" \
        hot_standby=on synchronous_commit=on max_connections=100
}

# pg_net_psql N SQL: one value from member N.
pg_net_psql() {
    "$(pg_bin)/psql" -X -q -h "$(netns_ip "postgres_net$1")" -p "$(port_of "postgres_net$1")" \
        -U postgres -d postgres -tAc "$2" </dev/null
}

pg_net_ready() {
    netns_bridged || return 1
    "$(pg_bin)/pg_isready" -q -t 2 -h "$(netns_ip "postgres_net$1")" -p "$(port_of "postgres_net$1")" \
        -U postgres -d postgres </dev/null
}

postgres_net1_after_start() { :; }

pg_net_standby_sync() {
    [[ $(pg_net_psql 1 "SELECT sync_state FROM pg_stat_replication
        WHERE application_name = '$PG_NET_STANDBY_APP' AND state = 'streaming'" 2>/dev/null) == sync ]]
}

# Waits until the primary sees the standby streaming and synchronous --
# unless it has been promoted (then it says so).
postgres_net2_after_start() {
    if [[ $(pg_net_psql 2 "SELECT pg_is_in_recovery()") != t ]]; then
        say "postgres_net2: promoted (a primary now); 'restart postgres_net1 postgres_net2' makes a fresh pair"
        return 0
    fi
    poll "$READY_TIMEOUT" pg_net_standby_sync ||
        fail postgres_net2 "the primary does not see it as a streaming synchronous standby after ${READY_TIMEOUT}s"
}

pg_net_uri() { echo "postgres://postgres@$(netns_ip "postgres_net$1"):$(port_of "postgres_net$1")/postgres"; }

pg_net_stop() {
    pg_run "$(pg_bin)/pg_ctl" -D "$DIR/data" -m fast -w -t "$TIMEOUT" stop </dev/null
    netns_down "postgres_net$1"
}

# The same function set for each member, naming itself.
for pg_net_n in 1 2; do
    eval "
postgres_net${pg_net_n}_missing() { postgres_net_missing; }
postgres_net${pg_net_n}_install() { install_missing postgres_net${pg_net_n}; }
postgres_net${pg_net_n}_ready() { pg_net_ready $pg_net_n; }
postgres_net${pg_net_n}_uri() { pg_net_uri $pg_net_n; }
postgres_net${pg_net_n}_stop() { pg_net_stop $pg_net_n; }
"
done
unset pg_net_n
postgres_net1_env_var() { echo BAKERY_POSTGRES_NETNS_PRIMARY_URI; }
postgres_net2_env_var() { echo BAKERY_POSTGRES_NETNS_STANDBY_URI; }
