#!/usr/bin/env bash
# Regenerate docs/RELIABILITY.md: start the real servers (scripts/backends.sh),
# run `bakery verify --json` on the embedded default (SQLite) and on all five
# servers, and on the negative control — FerretDB with `cas=update`, whose
# compare-and-set is known not to be atomic — then write the raw reports to
# target/reliability/ and the Markdown table to docs/RELIABILITY.md; then
# run the proxy and cluster fault tests (as the test command does) and add
# their per-fault figures. That file is generated: never edit it by hand.
#
#   scripts/reliability-report.sh [MORE VERIFY OPTIONS...]   e.g. --clients 8
#
# Environment:
#   BAKERY_VERIFY_DURATION  longest time of each workload (default 10s)
#
# A run in which a real backend fails a check, or the negative control
# passes, exits non-zero and leaves docs/RELIABILITY.md alone.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v jq >/dev/null || { echo "reliability-report.sh: needs jq (apt-get install jq)" >&2; exit 1; }

out=target/reliability
duration=${BAKERY_VERIFY_DURATION:-10s}

# (assigned first: `set -e` would not see a failure inside `eval "$(…)"`)
server_env=$(scripts/backends.sh start all)
eval "$server_env"

# A correctness run, not a speed one: the debug build the tests use.
cargo build -p bakery-cli --features all-backends
bakery=target/debug/bakery

scratch=$(mktemp -d "${TMPDIR:-/tmp}/bakery-reliability.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
rm -rf "$out"
mkdir -p "$out"

# label, URI, expected exit status (0: every check holds; 1: a check fails)
targets=(
    "sqlite|sqlite://$scratch/verify.db|0"
    "postgres|$BAKERY_POSTGRES_URI|0"
    "redis|$BAKERY_REDIS_URI|0"
    "etcd|$BAKERY_ETCD_URI|0"
    "mongodb (FerretDB)|$BAKERY_MONGODB_URI|0"
    "cassandra|$BAKERY_CASSANDRA_URI|0"
    "mysql (MariaDB)|$BAKERY_MARIADB_URI|0"
    "dynamodb (dynalite)|$BAKERY_DYNAMODB_URI|0"
    "negative control: FerretDB cas=update|$BAKERY_MONGODB_URI?cas=update&allow_unproven_update=true&collection=bakery_verify_update|1"
)
# Its one-key, eight-client race is where the non-atomic update shows.
control_args=(--keys 1 --clients 8)

status=0
index=0
for target in "${targets[@]}"; do
    IFS='|' read -r label uri expected <<<"$target"
    index=$((index + 1))
    file=$out/$index-$(tr -c 'a-z0-9\n' '-' <<<"${label,,}").json
    args=(--duration "$duration" --json --history "$file.history")
    [[ $label == negative* ]] && args+=("${control_args[@]}")
    set +e
    "$bakery" --uri "$uri" verify "${args[@]}" "$@" >"$file"
    code=$?
    set -e
    echo "$label: exit $code (expected $expected)" >&2
    if [[ $code != "$expected" ]]; then
        status=1
    fi
    jq --arg target "$label" --arg expected "$expected" '. + {"target": $target, "expected_pass": ($expected == "0")}' "$file" >"$file.tmp"
    mv "$file.tmp" "$file"
done
if [[ $status != 0 ]]; then
    echo "reliability-report.sh: a target did not give its expected verdict; docs/RELIABILITY.md left alone (reports in $out)" >&2
    exit 1
fi

# The fault suites, as the test command runs them: Toxiproxy between the
# clients and each server (tests/proxy_faults.rs), and the clusters
# (tests/cluster_*.rs, tests/partition_*.rs). Each test appends one JSON line
# per fault it ran.
faults=$PWD/$out/faults.jsonl
fault_tests=(--test proxy_faults --test cluster_etcd --test cluster_postgres --test cluster_redis --test cluster_cassandra
    --test partition_etcd --test partition_postgres --test partition_cassandra)
if ! BAKERY_FAULT_TESTS=1 BAKERY_RELIABILITY_LOG=$faults \
    cargo test --all-features "${fault_tests[@]}" -- --nocapture >"$out/faults.log" 2>&1; then
    echo "reliability-report.sh: a fault test failed; docs/RELIABILITY.md left alone (log: $out/faults.log)" >&2
    exit 1
fi
# Clock faults on the clients (crates/bakery-cli/tests/clock_faults.rs:
# libfaketime on lock holders, waiters, snowflake and sequence processes).
if ! CI=true BAKERY_RELIABILITY_LOG=$faults \
    cargo test --all-features -p bakery-cli --test clock_faults -- --nocapture >>"$out/faults.log" 2>&1; then
    echo "reliability-report.sh: a clock fault test failed; docs/RELIABILITY.md left alone (log: $out/faults.log)" >&2
    exit 1
fi

# The conformance suite in every topology (tests/conformance.rs: each
# multi-client case with its clients on one store handle and on stores of
# their own; a smaller set in child processes), and the negative controls
# that must make those cases fail (crates/bakery-testkit/tests/negative_controls.rs,
# tests/ferretdb_negative_control.rs, tests/dynamodb_negative_control.rs).
export BAKERY_TEST_URIS="redis-watch=${BAKERY_REDIS_URI}?cas=watch mysql-no-returning=${BAKERY_MARIADB_URI}?returning=false"
# And on PostgreSQL, Redis and etcd in containers of images built here
# (scripts/docker.sh), as the test command runs them.
docker_env=$(scripts/docker.sh start)
eval "$docker_env"
scripts/docker.sh build postgres redis etcd
export BAKERY_CONTAINER_IMAGES=local BAKERY_TEST_CONTAINERS=postgres,redis,etcd
if ! cargo test --all-features --features bakery-testkit/containers --test conformance >"$out/conformance.log" 2>&1; then
    echo "reliability-report.sh: a conformance case failed; docs/RELIABILITY.md left alone (log: $out/conformance.log)" >&2
    exit 1
fi
if ! cargo test --all-features -p bakery-testkit --test negative_controls >"$out/negative.log" 2>&1 ||
    ! cargo test --all-features --test ferretdb_negative_control >>"$out/negative.log" 2>&1 ||
    ! cargo test --all-features --test dynamodb_negative_control >>"$out/negative.log" 2>&1; then
    echo "reliability-report.sh: a negative control passed a broken store; docs/RELIABILITY.md left alone (log: $out/negative.log)" >&2
    exit 1
fi

# One row per backend and topology: a case named `B::separate::C` runs
# `B::C` with shared clients; `B::processes::C` in child processes; any
# other case has one client.
topology_rows() {
    sed -n 's/^test \(\[[^]]*\] *\)\{0,1\}\([^ ]*\) *\.\.\. \(ok\|FAILED\)$/\2 \3/p' "$out/conformance.log" |
        awk '
        $1 ~ /^processes::/ { next }  # the negative control, listed below
        { n++; name[n] = $1; verdict[n] = $2
          if ($1 ~ /::separate::/) { shared = $1; sub(/::separate::/, "::", shared); many[shared] = 1 } }
        END {
          for (i = 1; i <= n; i++) {
            split(name[i], parts, "::"); backend = parts[1]
            if (name[i] ~ /::separate::/) topology = "separate: each client on a store of its own"
            else if (name[i] ~ /::processes::/) topology = "processes: each client an OS process"
            else if (name[i] in many) topology = "shared: clients are tasks on one store handle"
            else topology = "single client"
            key = backend "|" topology
            if (!(key in total)) order[++keys] = key
            total[key]++
            if (verdict[i] == "ok") passed[key]++
          }
          for (k = 1; k <= keys; k++) {
            split(order[k], f, "|")
            printf "| %s | %s | %d | %d | %d |\n", f[1], f[2], total[order[k]], passed[order[k]], total[order[k]] - passed[order[k]]
          }
        }' | sort
}

{
    echo "# Reliability report"
    echo
    echo "Generated by \`scripts/reliability-report.sh\` on $(date -u +%Y-%m-%d) — do not edit by hand."
    echo "Each row is one \`bakery verify\` run (workloads of at most $duration each): concurrent clients"
    echo "recording every store call, then the compare-and-set history checked for per-key"
    echo "linearizability (unknown outcomes may or may not have applied), sequence ids for"
    echo "duplicates, fenced writes for stale tokens accepted, and lock grants for FIFO order."
    echo "The last row is the negative control: a configuration known to lose updates, which"
    echo "the checker must reject."
    echo
    echo "| store | check | verdict | ops ok | failed | unknown | result |"
    echo "|---|---|---|---:|---:|---:|---|"
    jq -rs '.[] | .target as $t | .checks[] |
        "| \($t) | \(.name) | \(.status) | \(.counts.ok) | \(.counts.failed) | \(.counts.unknown) | \(.summary) |"' \
        "$out"/*.json
    echo
    echo "## Under faults"
    echo
    echo "Each row is one fault of the proxy or cluster tests (run by the test command in CI"
    echo "too), every store call recorded. *proxy*: Toxiproxy between the clients (4 counter"
    echo "workers doing read-modify-write \`put_if_version\`, 3 sequence handles) and one"
    echo "server, each fault in turn on one connection; the last row of each backend checks"
    echo "the history of all five for linearizability and the ids of all five for duplicates."
    echo "*cluster*: a replicated deployment losing a node mid-run, or partitioned while every"
    echo "member stays up, each member in a network namespace of its own (\`scripts/partition.sh\`):"
    echo "etcd (3 members: the leader isolated, a 1|1|1 split, a one-way drop), PostgreSQL (a"
    echo "primary and its synchronous standby: the standby isolated, a one-way drop each way, a"
    echo "failover with the primary cut off, the standby cut off then a failover) and Cassandra"
    echo "(3 nodes, RF 3: a node isolated, 1|1|1, a one-way drop), each healed, with counter,"
    echo "sequence and fenced-lock clients. Unknown: the call may have applied"
    echo "(\`Unknown\`, or a timeout). Acked lost: acknowledged increments the store no longer"
    echo "held. The rows marked *accept_data_loss* and *wait_replicas=0* are negative"
    echo "controls: settings bakery refuses by default, measured to show what they lose; the"
    echo "rows marked *negative control* add reads that bypass a quorum to the history — a cut-off"
    echo "etcd member's serializable reads, a cut-off asynchronous PostgreSQL standby's reads,"
    echo "Cassandra reads at consistency ONE from an isolated node — which the checker must and"
    echo "does reject."
    echo
    echo "| suite | backend | setup | fault | ok | failed | unknown | acked lost | duplicate ids | stale fenced accepted | verdict |"
    echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"
    jq -rs 'map(select(.suite != "clock")) | sort_by(.suite != "proxy", .backend) | .[] |
        "| \(.suite) | \(.backend) | \(.setup) | \(.fault | gsub("\\|"; "\\|")) | \(.ok) | \(.failed) | \(.unknown) | \(.lost_acked // "—") | \(.duplicate_ids // "—") | \(.stale_accepted // "—") | \(.verdict) |"' \
        "$faults"
    echo
    echo "## Clock faults on clients"
    echo
    echo "Real \`bakery\` processes under libfaketime (\`crates/bakery-cli/tests/clock_faults.rs\`): the"
    echo "wall clock, or the whole clock including CLOCK_MONOTONIC, of a lock holder, a waiter,"
    echo "or a snowflake or sequence process jumps ±1 h or runs at 0.5x/2x. Lock rows: *ok* is"
    echo "grants; a waiter may evict only after a real lease of its holder's silence, and every"
    echo "stale fenced write must be refused. Id rows: *ok* is ids, none twice, each process's"
    echo "increasing. The rows marked *negative control*: a waiter whose monotonic clock runs"
    echo "fast or jumps evicts early (a lease timed on the observer's clock cannot prevent it);"
    echo "the check catches it and fencing refuses the wronged holder; and two hand-set worker"
    echo "ids whose clocks overlap give duplicate ids, which the check finds."
    echo
    echo "| backend | setup | fault | ok | duplicate ids | stale fenced accepted | verdict |"
    echo "|---|---|---|---:|---:|---:|---|"
    jq -rs 'map(select(.suite == "clock")) | sort_by(.backend) | .[] |
        "| \(.backend) | \(.setup) | \(.fault | gsub("\\|"; "\\|")) | \(.ok) | \(.duplicate_ids // "—") | \(.stale_accepted // "—") | \(.verdict | gsub("\\|"; "\\|")) |"' \
        "$faults"
    echo
    echo "## Topologies"
    echo
    echo "The conformance suite (\`tests/conformance.rs\`) per backend: every case of several"
    echo "clients runs with its clients as tasks on one store handle (sharing the recipes'"
    echo "per-process writer and listener) and with each client on a store of its own (a new"
    echo "connection; on memory a new handle on the same rows); sequence, lock, semaphore, RW"
    echo "lock and election also run with each client an OS process (mutual exclusion checked"
    echo "by a shared file counter and grant intervals, ids by distinctness, tokens by grant order)."
    echo
    echo "| backend | topology | cases | passed | failed |"
    echo "|---|---|---:|---:|---:|"
    topology_rows
    echo
    echo "## Negative controls"
    echo
    echo "Each must see its case FAIL on a broken store (or pass on the sound one it is paired"
    echo "with): a read-then-write CAS (\`LostConflicts\`), a lagging replica (\`StaleReads\`),"
    echo "false capability claims, clients that skip the lock, FerretDB's non-atomic update."
    echo
    echo "| control | verdict |"
    echo "|---|---|"
    sed -n 's/^test \([^ ]*\) *\.\.\. \(ok\|FAILED\)$/| \1 | \2 |/p' "$out/negative.log" |
        sed 's/| ok |$/| held (the broken store was caught) |/'
    sed -n 's/^test \[sqlite\] *\(processes::unlocked_clients_are_caught\) *\.\.\. ok$/| \1 (4 processes without the lock) | held (the broken store was caught) |/p' "$out/conformance.log"
    echo
    echo "Machine: $(nproc) cores, $(uname -sr). Raw reports: \`target/reliability/\`."
} >docs/RELIABILITY.md
echo "wrote docs/RELIABILITY.md" >&2
