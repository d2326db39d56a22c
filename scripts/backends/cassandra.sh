# shellcheck shell=bash
# cassandra: Apache Cassandra from Maven Central: scripts/cassandra/pom.xml
# names the version; its jars are copied once into the cache, and
# CassandraDaemon runs on a JDK 17 with a generated cassandra.yaml (one node,
# commitlog_sync batch, Paxos v2) and logback.xml.
# (See lib.sh for the functions every server file defines.)

# shellcheck disable=SC2034  # describe (lib.sh) reads these
cassandra_describe() {
    PIDFILE=$DIR/cassandra.pid
    COMM=java
    LOG=$DIR/system.log
    PORTS=(BAKERY_CASSANDRA_PORT=19042 BAKERY_CASSANDRA_STORAGE_PORT=17000 BAKERY_CASSANDRA_JMX_PORT=17199)
    # A fresh node takes 20-45 s on two cores; give it room.
    READY_TIMEOUT=$((TIMEOUT > 180 ? TIMEOUT : 180))
}

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

cassandra_missing() {
    if ! cassandra_java >/dev/null; then echo openjdk-17-jre-headless; fi
    if [[ ! -d $(cassandra_lib) ]] && ! have mvn; then echo maven; fi
}

cassandra_install() {
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

# cassandra_config DIR CLUSTER ADDRESS STORAGE_PORT CQL_PORT SEED [YAML]:
# writes cassandra.yaml and logback.xml of a node listening on ADDRESS, with
# the lines YAML added (a cluster node's token).  The yaml holds only keys
# Cassandra 5.0 knows (it rejects unknown ones); everything else keeps its
# default.
cassandra_config() {
    local dir=$1 cluster=$2 address=$3 storage=$4 cql=$5 seed=$6 extra=${7:-}
    cat >"$dir/cassandra.yaml" <<YAML
# Written by scripts/backends.sh at every start.
cluster_name: $cluster
num_tokens: 1
$extra
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
listen_address: $address
rpc_address: $address
storage_port: $storage
native_transport_port: $cql
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$seed"
data_file_directories:
  - '$dir/data'
commitlog_directory: '$dir/commitlog'
saved_caches_directory: '$dir/saved_caches'
hints_directory: '$dir/hints'
cdc_raw_directory: '$dir/cdc_raw'
# A write is acknowledged only once the commit log is fsynced: with the
# default periodic sync a power cut would forget up to 10 s of acknowledged
# LWTs (bakery refuses that setting on a keyspace with fewer than three
# replicas; the cluster's three nodes keep it too, as one machine).
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

# cassandra_jvm_options DIR HEAP JMX_PORT: the JVM command line of a node
# whose config and data are in DIR (what bin/cassandra would build), into
# the caller's array `opts`.
cassandra_jvm_options() {
    local dir=$1 heap=$2 jmx=$3
    opts=(
        -Xms512m "-Xmx$heap" -Xss256k -XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxGCPauseMillis=300
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
        "-Dcassandra.jmx.local.port=$jmx"
        # Open the CQL port without waiting for gossip to settle: one node has
        # none; in a cluster a client that comes early gets Unavailable (typed,
        # nothing applied) until the node sees its peers.
        -Dcassandra.skip_wait_for_gossip_to_settle=0
        -cp "$(cassandra_lib)/*"
        org.apache.cassandra.service.CassandraDaemon
    )
}

cassandra_start() {
    local dir java opts
    dir=$(dir_of cassandra)
    java=$(cassandra_java)
    mkdir -p "$dir"/{data,commitlog,saved_caches,hints,cdc_raw,triggers}
    cassandra_config "$dir" bakery 127.0.0.1 "$(port_of cassandra 2)" "$(port_of cassandra 1)" \
        "127.0.0.1:$(port_of cassandra 2)"
    cassandra_jvm_options "$dir" 1g "$(port_of cassandra 3)"
    # The JVM's own output (bad options, warnings, crashes) goes to the same log
    # as logback's; both append.
    launch_session -C "$dir" "$java" "${opts[@]}"
}

# A CQL OPTIONS request (protocol v4, stream 0); a SUPPORTED reply is
# 84 00 00 00 06.  Cassandra opens the CQL port last, when start-up is done.
cassandra_ready() {
    local reply
    reply=$(wire_reply "$(port_of cassandra)" '\x04\x00\x00\x00\x05\x00\x00\x00\x00' 5)
    [[ $reply == " 84 00 00 00 06"* ]]
}

# The keyspace is created by the cassandra crate, not here.
cassandra_after_start() { :; }

cassandra_uri() { echo "cassandra://127.0.0.1:$(port_of cassandra)/bakery"; }

# SIGTERM: Cassandra's shutdown hook drains (flushes memtables) and exits.
cassandra_stop() { stop_pid cassandra "$1"; }
