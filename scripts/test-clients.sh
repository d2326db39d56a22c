#!/usr/bin/env bash
# The clients of `bakery serve` (clients/python, clients/go, clients/ts) and
# its /ui page (in headless Chromium), each against real `bakery serve`
# processes its tests start: on SQLite, and on every store URI given.
#
#   scripts/test-clients.sh [STORE_URI...]
#
# BAKERY_BIN: the bakery binary, built with the `serve` feature (default
# target/debug/bakery). Installs what it lacks: Debian's chromium, the npm
# and PyPI packages of each suite (into target/, not the tree). A suite that
# cannot run fails; none is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

export BAKERY_BIN=${BAKERY_BIN:-$repo/target/debug/bakery}
[[ -x $BAKERY_BIN ]] || {
    echo "test-clients.sh: no bakery binary at $BAKERY_BIN: cargo build -p bakery-cli --features serve" >&2
    exit 1
}
"$BAKERY_BIN" serve --help >/dev/null 2>&1 || {
    echo "test-clients.sh: $BAKERY_BIN has no serve subcommand: build it with --features serve" >&2
    exit 1
}

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi
}
for tool in node npm go python3; do
    command -v "$tool" >/dev/null || {
        echo "test-clients.sh: $tool not found (the clients' tests need Node 20, Go and Python 3)" >&2
        exit 1
    }
done
if ! command -v chromium >/dev/null; then
    echo "test-clients.sh: installing Debian's chromium (the /ui page's browser test)" >&2
    as_root apt-get update -q >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2
fi
export CHROMIUM=${CHROMIUM:-$(command -v chromium)}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/bakery-clients.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
uris=("sqlite://$scratch/clients.db" "$@")
# (each suite runs once per store here, not again on a second store of its own)
unset BAKERY_TEST_PG_URI

step() { printf '\n--> %s\n' "$*"; }

# The page test's one package (each client's run-tests.sh installs its own).
step "ui page: npm ci"
(cd crates/bakery-serve/ui/test && npm ci --no-audit --no-fund --silent)

for uri in "${uris[@]}"; do
    export BAKERY_TEST_URI=$uri
    shown=${uri%%\?*}
    step "ui page in headless Chromium on $shown"
    (cd crates/bakery-serve/ui/test && npm test)
    step "python client on $shown"
    clients/python/run-tests.sh
    step "go client on $shown"
    clients/go/run-tests.sh
    step "ts client on $shown"
    clients/ts/run-tests.sh
done
echo "test-clients.sh: ui page and the python, go and ts clients passed on ${#uris[@]} store(s)"
