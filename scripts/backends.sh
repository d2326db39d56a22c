#!/usr/bin/env bash
# Real servers for the conformance suite, run natively (no Docker): installs
# what is missing from Debian packages, starts each server on 127.0.0.1 on a
# non-default port with its data in a scratch directory, and prints the
# BAKERY_<NAME>_URI export lines the tests read.  Cassandra comes from Maven
# Central; FerretDB (standing in for MongoDB) and Toxiproxy (a TCP fault proxy
# the tests put in front of the others) are built from the Go module proxy;
# all are cached outside the checkout, so only the first run is slow.
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
# NAME is postgres, postgres_primary, postgres_standby, mariadb, redis,
# redis_volatile, redis_primary, redis_replica, etcd, etcd_m1, etcd_m2, etcd_m3, etcd_net1,
# etcd_net2, etcd_net3, postgres_net1, postgres_net2, mongodb, cassandra,
# cassandra_n1, cassandra_n2, cassandra_n3, cassandra_net1, cassandra_net2,
# cassandra_net3, dynamodb,
# toxiproxy, or all (in that order; stop goes in reverse).  etcd_m1..3 are
# the members of a three-member etcd cluster (each exports the cluster's
# BAKERY_ETCD_CLUSTER_URI; tests/cluster_etcd.rs kills its leader);
# etcd_net1..3 are another three-member cluster, each member in a network
# namespace of its own on a private bridge (10.231.77.0/24, this machine
# only; root, iproute2 and iptables needed), so scripts/partition.sh can cut the
# network between members (BAKERY_ETCD_NETNS_URI; tests/partition_etcd.rs);
# postgres_net1 and postgres_net2 are a PostgreSQL primary and its
# synchronous standby on the same bridge (10.231.77.21, .22; both made
# afresh at every start: BAKERY_POSTGRES_NETNS_PRIMARY_URI and
# BAKERY_POSTGRES_NETNS_STANDBY_URI; tests/partition_postgres.rs);
# postgres_primary and postgres_standby are a PostgreSQL primary and a
# streaming standby made afresh from it at every start of postgres_standby
# (tests/cluster_postgres.rs promotes it); redis_primary and redis_replica
# are a Redis primary and its replica (--replicaof), pointed at the primary
# again at every start of redis_replica (tests/cluster_redis.rs kills the
# primary and promotes the replica).  cassandra_n1..3 are the nodes of a
# three-node Cassandra cluster on 127.0.0.2, 127.0.0.3 and 127.0.0.4 (each
# exports the cluster's BAKERY_CASSANDRA_CLUSTER_URI, keyspace bakery_cluster
# with replication_factor 3; tests/cluster_cassandra.rs kills one node
# mid-run and restarts it).  cassandra_net1..3 are another three-node
# cluster, each node in a network namespace of its own on the bridge of
# etcd_net1..3 (10.231.77.31..33; BAKERY_CASSANDRA_NETNS_URI, keyspace
# bakery_netns, replication_factor 3; tests/partition_cassandra.rs).  dynamodb is dynalite (npm), a DynamoDB-compatible
# server keeping its tables on disk; its URI carries dummy keys.  mongodb is FerretDB over the postgres server,
# which `start mongodb` starts too.  toxiproxy is
# Shopify's fault proxy; its line is BAKERY_TOXIPROXY_URL=http://… (its HTTP
# API), and tests/proxy_faults.rs creates proxies to the other servers through it.  redis_volatile is a second Redis
# with --appendonly no (Redis's default) and no RDB snapshots (--save ''): a
# restart forgets everything, so bakery refuses it unless the URI says
# accept_data_loss=true; tests/redis_durability.rs uses it to show both
# the refusal and the duplicate ids it prevents.  postgres (ssl=on) and
# redis (a second, TLS port) present a certificate for localhost from a test
# CA made with openssl under the scratch directory; they also print
# BAKERY_POSTGRES_TLS_URI, BAKERY_REDIS_TLS_URI (rediss://) and the CA to
# trust, BAKERY_POSTGRES_TLS_CA and BAKERY_REDIS_TLS_CA (their tests/tls.rs).
# Only export lines go to
# stdout, so
#   eval "$(scripts/backends.sh start all)"
# works; progress goes to stderr.  Every start/stop/restart/kill also rewrites
# target/backends.env with the lines of ALL running servers
# (`source target/backends.env`).
#
# Environment:
#   BAKERY_PG_PORT (15432)  BAKERY_MARIADB_PORT (13306)  BAKERY_REDIS_PORT (16379)
#   BAKERY_REDIS_TLS_PORT (16390, redis's TLS port)
#   BAKERY_REDIS_VOLATILE_PORT (16380)  BAKERY_ETCD_PORT (12379)  BAKERY_ETCD_PEER_PORT (12380)
#   BAKERY_MONGODB_PORT (17017)  BAKERY_TOXIPROXY_PORT (18474, its HTTP API)
#   BAKERY_DYNAMODB_PORT (18000, dynalite's HTTP API)
#   BAKERY_CASSANDRA_PORT (19042, CQL)  BAKERY_CASSANDRA_STORAGE_PORT (17000)
#   BAKERY_CASSANDRA_JMX_PORT (17199)  BAKERY_PG_PRIMARY_PORT (15433)  BAKERY_PG_STANDBY_PORT (15434)
#   BAKERY_ETCD_M1_PORT, _M2_, _M3_ (12389, 12391, 12393; each peer port is the next one)
#   BAKERY_ETCD_NETNS_PORT (12395)  BAKERY_ETCD_NETNS_PEER_PORT (12396)
#                            (each member on its own address)
#   BAKERY_PG_NETNS_PORT (15435, postgres_net1 and _net2, each on its own address)
#   BAKERY_REDIS_PRIMARY_PORT (16381)  BAKERY_REDIS_REPLICA_PORT (16382)
#   BAKERY_CASSANDRA_CLUSTER_PORT (19043, CQL)  BAKERY_CASSANDRA_CLUSTER_STORAGE_PORT (17010)
#                            (each node on its own address)
#   BAKERY_CASSANDRA_N1_JMX_PORT, _N2_, _N3_ (17201, 17202, 17203, on 127.0.0.1)
#   BAKERY_CASSANDRA_NETNS_PORT (19044, CQL)  BAKERY_CASSANDRA_NETNS_STORAGE_PORT (17020)
#                            (each cassandra_netN on its own address)
#   BAKERY_CASSANDRA_NET1_JMX_PORT, _NET2_, _NET3_ (17211, 17212, 17213, each in its namespace)
#                            unset: the port the backend last ran on, else the default
#   BAKERY_SCRATCH           data, logs, pid files (${TMPDIR:-/tmp}/bakery-backends)
#   BAKERY_BACKENDS_TIMEOUT  seconds to wait for a server to answer (60; Cassandra: at least 180)
#   XDG_CACHE_HOME           Cassandra's jars, the FerretDB and Toxiproxy binaries go to
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

# The supervisor is scripts/backends/lib.sh; each server is a file next to it
# (redis.sh holds redis, redis_volatile, redis_primary and redis_replica;
# cassandra_cluster.sh cassandra_n1..3) defining the same functions,
# NAME_describe, _missing, _install, _start, _ready, _after_start, _uri and
# _stop, which lib.sh lists.  A new server: a new file, and its name below.

# shellcheck source-path=SCRIPTDIR source=backends/lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/backends/lib.sh"

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$ROOT/scripts/backends.sh" >&2
}

# Start order; stop goes in reverse.
BACKENDS=(postgres postgres_primary postgres_standby mariadb redis redis_volatile redis_primary redis_replica etcd etcd_m1 etcd_m2 etcd_m3 etcd_net1 etcd_net2 etcd_net3 postgres_net1 postgres_net2 mongodb cassandra cassandra_n1 cassandra_n2 cassandra_n3 cassandra_net1 cassandra_net2 cassandra_net3 dynamodb toxiproxy)
load_servers

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
