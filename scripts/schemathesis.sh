#!/usr/bin/env bash
# schemathesis (PyPI) against a live `bakery serve`: every route of the
# served OpenAPI document, with generated valid and invalid requests; fails
# on any 5xx other than a documented one, and on any response that does not
# match the document. Runs on the embedded SQLite store and on each store
# URI given.
#
#   scripts/schemathesis.sh BAKERY_BINARY [URI...]
#
# The binary must be built with the `serve` feature (and the features of
# the URIs). schemathesis is installed once into a virtualenv in the cache.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:?usage: scripts/schemathesis.sh BAKERY_BINARY [URI...]}
shift
version=4.32.5
venv=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/bakery/schemathesis-$version
if [[ ! -x $venv/bin/schemathesis ]]; then
    echo "schemathesis.sh: installing schemathesis $version into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "schemathesis==$version"
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/bakery-schemathesis.XXXXXX")
server=
cleanup() {
    [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT

checks=not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance

# negative_control ADDR: the same run against a copy of the served document
# that says `next` returns its ids as strings must FAIL, or the checks above
# could not see a response that breaks the document.
negative_control() {
    local addr=$1
    python3 - "$scratch/served.json" "$scratch/broken.json" <<'PY'
import json, sys
with open(sys.argv[1]) as served:
    doc = json.load(served)
doc["components"]["schemas"]["Ids"]["properties"]["ids"]["items"] = {"type": "string"}
with open(sys.argv[2], "w") as broken:
    json.dump(doc, broken)
PY
    if (cd "$scratch" && "$venv/bin/schemathesis" run "$scratch/broken.json" --url "$addr" \
        --include-path /v1/sequences/{name}/next --checks "$checks" \
        --max-examples 5 --seed 42 --workers 1 --generation-database none) >"$scratch/control" 2>&1; then
        cat "$scratch/control" >&2
        echo "schemathesis.sh: negative control passed: a response breaking the document went unseen" >&2
        exit 1
    fi
    grep -q "Response violates schema" "$scratch/control" || {
        cat "$scratch/control" >&2
        echo "schemathesis.sh: negative control failed for another reason than the broken schema" >&2
        exit 1
    }
    echo "schemathesis.sh: negative control: a document the server does not match fails, as it must" >&2
}

run_on() {
    local uri=$1 addr line
    "$bin" --uri "$uri" serve --listen 127.0.0.1:0 >"$scratch/out" 2>"$scratch/err" &
    server=$!
    # The first line says where it listens, once it accepts connections.
    for _ in $(seq 1 600); do
        line=$(head -n 1 "$scratch/out" 2>/dev/null || true)
        [[ $line == "listening on "* ]] && break
        kill -0 "$server" 2>/dev/null || { cat "$scratch/err" >&2; exit 1; }
        sleep 0.1
    done
    addr=${line#listening on }
    [[ $addr == http://* ]] || { echo "schemathesis.sh: bakery serve did not start on $uri" >&2; cat "$scratch/err" >&2; exit 1; }
    echo "schemathesis.sh: $uri at $addr" >&2
    # (in the scratch directory: schemathesis writes its cache, .schemathesis/,
    # where it runs)
    # (the two SSE routes are left out: a stream stays open until its
    # timeout, which no response-time limit fits; tests/locks.rs and
    # tests/overview.rs read them)
    (cd "$scratch" && "$venv/bin/schemathesis" run "$addr/openapi.json" --checks "$checks" \
        --exclude-path '/v1/elections/{name}/observe' \
        --exclude-path '/v1/overview/events' \
        --max-examples 25 --seed 42 --workers 1 --generation-database none \
        --max-response-time 30)
    if [[ $uri == sqlite://* ]]; then
        curl -sf "$addr/openapi.json" >"$scratch/served.json"
        negative_control "$addr"
    fi
    kill "$server"
    wait "$server" || true
    server=
}

run_on "sqlite://$scratch/api.db"
for uri in "$@"; do
    run_on "$uri"
done
echo "schemathesis.sh: every route conforms on sqlite${*:+ and $*}"
