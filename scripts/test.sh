#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
# Formatting, lints, docs, then every test: unit tests, doctests, the CLI's
# multi-process tests and the conformance suite on every configured backend.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "test.sh: cargo not found; install Rust with rustup first" >&2
    exit 1
fi
# rustfmt and clippy come with rustup's default profile; add them if missing.
if command -v rustup >/dev/null 2>&1; then
    for component in rustfmt clippy; do
        rustup component list --installed 2>/dev/null | grep -q "^$component" ||
            rustup component add "$component"
    done
fi

step() { printf '\n==> %s\n' "$*"; }

# A one-off CI build gains nothing from incremental caches (they were a third
# of target/ here); keep the disk use of a fresh machine small.
if [ -n "${CI:-}" ]; then
    export CARGO_INCREMENTAL=0
fi

# Real servers, installed and started by the project's own script (no
# Docker). They stay up afterwards so a re-run is quick; stop them with
# `scripts/backends.sh stop`.
step "real servers: scripts/backends.sh start all"
scripts/backends.sh deps
# (assigned first: `set -e` would not see a failure inside `eval "$(…)"`)
server_env=$(scripts/backends.sh start all)
eval "$server_env"
# Every server backend must run: a missing one fails, it is never skipped.
# (mysql runs on the mariadb server: BAKERY_MARIADB_URI.)
export BAKERY_TEST_REQUIRE=postgres,redis,etcd,cassandra,mongodb,mysql,dynamodb
# The second Redis CAS strategy runs the whole suite too, and so does
# MariaDB writing creates as on MySQL 8 (no RETURNING).
export BAKERY_TEST_URIS="redis-watch=${BAKERY_REDIS_URI}?cas=watch mysql-no-returning=${BAKERY_MARIADB_URI}?returning=false"
# tests/faults.rs may stop and restart the servers this script started;
# tests/partition_*.rs cut the network between etcd_net1..3, postgres_net1..2
# and cassandra_net1..3 (scripts/partition.sh; needs root).
export BAKERY_FAULT_TESTS=1
# tests/proxy_faults.rs puts Toxiproxy (BAKERY_TOXIPROXY_URL, exported by
# `start all` above) between its clients and each server; it fails in CI
# without it.

# A private Docker engine and the server images, built here from Debian's
# packages (no registry is reachable): the conformance suite also runs on
# PostgreSQL, Redis and etcd in containers (testcontainers, NAME-container
# targets) beside the native servers, and tests/docker_compose.rs brings up
# docker/compose.yaml with docker/README.md's own commands.
step "Docker: a private engine and the server images (scripts/docker.sh)"
docker_env=$(scripts/docker.sh start)
eval "$docker_env"
scripts/docker.sh build
export BAKERY_CONTAINER_IMAGES=local BAKERY_TEST_CONTAINERS=postgres,redis,etcd

step "layers: no import circle, no upward arrow (scripts/layers.py, and its negative control)"
python3 scripts/layers.py --self-test
python3 scripts/layers.py

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, all features, warnings are errors)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo doc (broken links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet

step "cargo test (unit, doc, CLI and conformance tests)"
cargo test --workspace --all-features

step "schemathesis over bakery serve's OpenAPI document (SQLite and PostgreSQL)"
# (the binary the CLI tests ran, built with every feature)
scripts/schemathesis.sh target/debug/bakery "$BAKERY_POSTGRES_URI"

step "the clients of bakery serve (Python, Go, TypeScript) and its /ui page in Chromium (SQLite and PostgreSQL)"
# (the same binary, before the light build below replaces it)
scripts/test-clients.sh "$BAKERY_POSTGRES_URI"

step "the light default CLI: ids on SQLite work, a left-out subcommand names its feature"
# (after the tests: this build replaces target/debug/bakery, which the CLI
# tests ran with every feature)
cargo build -p bakery-cli --quiet
light_dir=$(mktemp -d "${TMPDIR:-/tmp}/bakery-light.XXXXXX")
ids=$(target/debug/bakery --uri "sqlite://$light_dir/ids.db" seq next orders --count 3 | tr '\n' ' ')
if [ "$ids" != "1 2 3 " ]; then
    echo "test.sh: the default CLI handed out '$ids', expected '1 2 3 '" >&2
    exit 1
fi
for sub in bench migrate outbox serve; do
    status=0
    message=$(target/debug/bakery --uri "sqlite://$light_dir/ids.db" "$sub" 2>&1 >/dev/null) || status=$?
    if [ "$status" != 2 ] || ! grep -q "cargo feature \`$sub\`" <<<"$message"; then
        echo "test.sh: the default CLI's \`$sub\` gave status $status and '$message'" >&2
        exit 1
    fi
done
rm -rf "$light_dir"
echo "default CLI: ids 1 2 3; bench, migrate, outbox and serve refused, each naming its feature"
