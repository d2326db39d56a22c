#!/bin/bash
# One Cassandra node on the container's address, CQL on 9042 on every
# address; its config (as scripts/backends/cassandra.sh writes it) is
# written at every start; data in /var/lib/cassandra.
# The node tells clients to reach it at CASSANDRA_BROADCAST_RPC_ADDRESS
# (127.0.0.1 by default, the official image's variable): drivers connect to
# the address a node advertises, on the port they first used, so a client on
# the host, through a published port, must be told 127.0.0.1, not the
# container's address.
set -euo pipefail
dir=/var/lib/cassandra
address=$(hostname -i | awk '{print $1}')
mkdir -p "$dir"/{data,commitlog,saved_caches,hints,cdc_raw,triggers}
cat >"$dir/cassandra.yaml" <<YAML
cluster_name: bakery
num_tokens: 1
initial_token: 0
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
listen_address: $address
rpc_address: 0.0.0.0
broadcast_rpc_address: ${CASSANDRA_BROADCAST_RPC_ADDRESS:-127.0.0.1}
native_transport_port: 9042
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$address"
data_file_directories:
  - '$dir/data'
commitlog_directory: '$dir/commitlog'
saved_caches_directory: '$dir/saved_caches'
hints_directory: '$dir/hints'
cdc_raw_directory: '$dir/cdc_raw'
# Acknowledged only once the commit log is fsynced (bakery refuses the
# default periodic sync on a keyspace of fewer than three replicas).
commitlog_sync: batch
auto_snapshot: false
paxos_variant: v2
YAML
cat >"$dir/logback.xml" <<'XML'
<configuration scan="false">
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
XML
exec java -Xms256m "-Xmx$HEAP" -Xss256k -XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxGCPauseMillis=300 \
    -XX:+ExitOnOutOfMemoryError -XX:+PerfDisableSharedMem -Djava.net.preferIPv4Stack=true \
    -Djdk.attach.allowAttachSelf=true \
    --add-exports java.base/jdk.internal.misc=ALL-UNNAMED \
    --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED \
    --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED \
    --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED \
    --add-exports java.sql/java.sql=ALL-UNNAMED \
    --add-exports java.base/java.lang.ref=ALL-UNNAMED \
    --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED \
    --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED \
    --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED \
    --add-opens java.base/java.lang.module=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.loader=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.math=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.module=ALL-UNNAMED \
    --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED \
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
    --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
    --add-opens java.base/java.io=ALL-UNNAMED \
    --add-opens java.base/java.lang.reflect=ALL-UNNAMED \
    --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED \
    --add-opens java.base/java.lang=ALL-UNNAMED \
    --add-opens java.base/java.util=ALL-UNNAMED \
    -Dio.netty.tryReflectionSetAccessible=true -Dio.netty.allocator.useCacheForAllThreads=true \
    -Dio.netty.allocator.maxOrder=11 \
    "-Dcassandra.config=file://$dir/cassandra.yaml" -Dcassandra-foreground=yes \
    "-Dcassandra.storagedir=$dir" "-Dcassandra.logdir=$dir" "-Dcassandra.triggers_dir=$dir/triggers" \
    "-Dlogback.configurationFile=$dir/logback.xml" -Dcassandra.jmx.local.port=7199 \
    -Dcassandra.skip_wait_for_gossip_to_settle=0 \
    -cp '/opt/cassandra/lib/*' org.apache.cassandra.service.CassandraDaemon
