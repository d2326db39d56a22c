#!/usr/bin/env bash
# Regenerate docs/BENCHMARKS.md: start the real servers (scripts/backends.sh),
# run `bakery bench --workload all` on all five of them, on memory:// and on
# a fresh SQLite file, write the raw results (results.json), the SVG charts
# and the Markdown report to target/bench-report/, then copy the Markdown to
# docs/BENCHMARKS.md. That file is generated: never edit it by hand. Two
# of its sections are other scripts' and kept as they were: the criterion
# section (between `<!-- criterion:begin -->` and `<!-- criterion:end -->`,
# scripts/bench-criterion.sh) and the `bakery serve` section (between
# `<!-- serve:begin -->` and `<!-- serve:end -->`, scripts/bench-serve.sh;
# measured again with BAKERY_BENCH_SERVE=1).
#
#   scripts/bench-report.sh [MORE BENCH OPTIONS...]     e.g. --block-size 5000
#
# Environment:
#   BAKERY_BENCH_DURATION  timed part of each cell (default 2s)
#   BAKERY_BENCH_CLIENTS   client counts (default 1,4,16,64)
#   BAKERY_BENCH_PROCESSES process counts of the cells across processes (the
#                          lock and sequence workloads and their peers with a
#                          client per OS process; default 1,4,16,64)
#   BAKERY_BENCH_ROUNDS    interleaved rounds of every cell, each cell shown
#                          by its median round (default 3: on a machine the
#                          servers share, one 2 s cell can be off by a third)
#   BAKERY_BENCH_SERVE     1: run scripts/bench-serve.sh afterwards (about 14
#                          more minutes, PostgreSQL included) instead of
#                          keeping the serve section of the old report
#
# A run in which a cell failed a check (overlapping grants, an id twice, a
# lost increment) exits non-zero and leaves docs/BENCHMARKS.md alone (the
# results stay in target/bench-report/). Failed operations alone (Paxos
# timeouts of Cassandra's LWTs under 64 contending processes, say) are
# figures of the run: the report shows them in its `errors` column.
# The servers stay up afterwards; stop them with `scripts/backends.sh stop`.
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/bench-report

# (assigned first: `set -e` would not see a failure inside `eval "$(…)"`)
server_env=$(scripts/backends.sh start postgres mariadb redis etcd mongodb cassandra dynamodb)
eval "$server_env"
for var in BAKERY_POSTGRES_URI BAKERY_MARIADB_URI BAKERY_REDIS_URI BAKERY_ETCD_URI BAKERY_MONGODB_URI BAKERY_CASSANDRA_URI BAKERY_DYNAMODB_URI; do
    if [[ -z ${!var:-} ]]; then
        echo "bench-report.sh: scripts/backends.sh did not export $var" >&2
        exit 1
    fi
done

scratch=$(mktemp -d "${TMPDIR:-/tmp}/bakery-bench-report.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
rm -rf "$out"
# The criterion and serve sections are not `bakery bench`'s: saved here,
# put back below.
# shellcheck source=scripts/lib/doc-block.sh
. scripts/lib/doc-block.sh
doc_block_extract criterion docs/BENCHMARKS.md >"$scratch/criterion.md"
scripts/bench-serve.sh --extract >"$scratch/serve.md"

cargo run --release -p bakery-cli --features all-backends,bench,mariadb -- bench --workload all \
    --uri "$BAKERY_POSTGRES_URI" \
    --uri "$BAKERY_REDIS_URI" \
    --uri "$BAKERY_ETCD_URI" \
    --uri "$BAKERY_MONGODB_URI" \
    --uri "$BAKERY_CASSANDRA_URI" \
    --uri "$BAKERY_MARIADB_URI" \
    --uri "$BAKERY_DYNAMODB_URI" \
    --uri memory:// \
    --uri "sqlite://$scratch/bench.db" \
    --mariadb "$BAKERY_MARIADB_URI" \
    --duration "${BAKERY_BENCH_DURATION:-2s}" \
    --clients "${BAKERY_BENCH_CLIENTS:-1,4,16,64}" \
    --processes "${BAKERY_BENCH_PROCESSES:-1,4,16,64}" \
    --rounds "${BAKERY_BENCH_ROUNDS:-3}" \
    --allow-errors \
    --out "$out" \
    "$@"

mkdir -p docs
cp "$out/report.md" docs/BENCHMARKS.md
if [[ -s $scratch/criterion.md ]]; then
    doc_block_splice criterion "$scratch/criterion.md" docs/BENCHMARKS.md "## How to read the tables"
fi
echo "bench-report.sh: wrote docs/BENCHMARKS.md (results.json and charts in $out/)" >&2

if [[ ${BAKERY_BENCH_SERVE:-0} == 1 ]]; then
    if ! scripts/bench-serve.sh; then
        if [[ -s $scratch/serve.md ]]; then
            scripts/bench-serve.sh --splice "$scratch/serve.md"
        fi
        echo "bench-report.sh: scripts/bench-serve.sh failed; the old serve section was kept" >&2
        exit 1
    fi
elif [[ -s $scratch/serve.md ]]; then
    scripts/bench-serve.sh --splice "$scratch/serve.md"
fi
