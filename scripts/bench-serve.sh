#!/usr/bin/env bash
# Measure `bakery serve` over HTTP and write its section of docs/BENCHMARKS.md:
# build the release `bakery` (features serve and postgres), run the bench
# `cargo bench -p bakery-serve --bench serve` against a copy of it (the
# server a process of its own, the load generator on loopback; see
# crates/bakery-serve/benches/serve/main.rs), then replace the block between
# `<!-- serve:begin -->` and `<!-- serve:end -->` in docs/BENCHMARKS.md with
# the new section. Nothing else in the file changes; a file without the block
# gets it before "## How to read the tables", or at the end. About 9 minutes
# on 2 cores after the build (4 1/2 more with PostgreSQL): 3 rounds of 5 s
# cells on each store.
#
#   scripts/bench-serve.sh [BENCH OPTIONS...]   e.g. --duration 10s --rounds 5
#                                               (`... --help` lists them)
#   scripts/bench-serve.sh --extract [FILE]     print FILE's block (default
#                                               docs/BENCHMARKS.md), markers
#                                               excluded; nothing if it has none
#   scripts/bench-serve.sh --splice SECTION     put the Markdown in SECTION
#                                               into docs/BENCHMARKS.md as the
#                                               block; no build, no run
#
# scripts/bench-report.sh, which regenerates the rest of docs/BENCHMARKS.md,
# keeps the block with --extract and --splice (or runs this script again
# when BAKERY_BENCH_SERVE=1).
#
# Environment:
#   BAKERY_POSTGRES_URI   also measure this PostgreSQL (e.g. from
#                         `eval "$(scripts/backends.sh start postgres)"`)
#
# With the clients in other languages (clients/python, clients/go,
# clients/ts; BAKERY_BENCH_CLIENTS=0 leaves them out): each is installed or
# built first and runs its own bench against the same server every round.
#
# A run in which a check failed (an id twice, overlapping blocks, two holders
# of the lock at once, a token not above the one before) or a cell could not
# run exits non-zero and leaves docs/BENCHMARKS.md alone. Measure on a quiet
# machine: the report shows how busy other processes kept the CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."

doc=docs/BENCHMARKS.md
# shellcheck source=scripts/lib/doc-block.sh
. scripts/lib/doc-block.sh

# The block of $1 (default $doc), markers excluded.
extract() {
    doc_block_extract serve "${1:-$doc}"
}

# Replace (or insert, before the tables' reading guide) the block of $doc
# with the Markdown in $1.
splice() {
    doc_block_splice serve "$1" "$doc" "## How to read the tables"
}

case "${1:-}" in
--extract)
    extract "${2:-}"
    exit 0
    ;;
--splice)
    if [[ -z ${2:-} ]]; then
        echo "usage: scripts/bench-serve.sh --splice SECTION" >&2
        exit 2
    fi
    splice "$2"
    echo "bench-serve.sh: wrote the serve block of $doc" >&2
    exit 0
    ;;
esac

scratch=$(mktemp -d "${TMPDIR:-/tmp}/bakery-bench-serve.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

cargo build --release -p bakery-cli --features serve,postgres
# The bench is built before it runs, so the build's CPU does not fall on
# the first cells.
cargo bench -p bakery-serve --bench serve --no-run
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
# A copy: another build in a shared target directory may replace the binary
# while the bench runs.
cp "$target_dir/release/bakery" "$scratch/bakery"

# The clients in other languages (clients/), each built or installed first
# (BAKERY_BENCH_CLIENTS=0 leaves them out).
clients=()
if [[ ${BAKERY_BENCH_CLIENTS:-1} != 0 ]]; then
    venv=${BAKERY_VENV:-$PWD/target/py-venv}
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet ./clients/python
    (cd clients/ts && npm ci --no-audit --no-fund --silent && npm run --silent build)
    (cd clients/go && go build -o "$scratch/bakery-go-bench" ./cmd/bakery-bench)
    clients=(
        --client "python=$venv/bin/python -m bakery.bench"
        --client "go=$scratch/bakery-go-bench"
        --client "ts=node clients/ts/dist/bench.js"
    )
fi

cargo bench -p bakery-serve --bench serve -- \
    --bakery "$scratch/bakery" --out "$scratch/serve.md" "${clients[@]}" "$@"

if [[ ! -s $scratch/serve.md ]]; then
    echo "bench-serve.sh: the bench wrote no section (--help?); $doc left alone" >&2
    exit 0
fi
splice "$scratch/serve.md"
echo "bench-serve.sh: wrote the serve block of $doc" >&2
