#!/usr/bin/env bash
# The TypeScript client's whole suite, from a fresh machine with Node 20+ and
# npm: `npm ci`, the build (dist/ with .d.ts), the typecheck of sources and
# tests, then `node --test` against a real `bakery serve` on SQLite, and again
# on PostgreSQL when BAKERY_TEST_PG_URI is set (or on BAKERY_TEST_URI alone
# when that is set).
#
#   BAKERY_BIN            the server binary (default <repo>/target/debug/bakery,
#                         built by `cargo build -p bakery-cli --features serve`)
#   BAKERY_TEST_URI       the store of the only run (default: SQLite in a temp dir)
#   BAKERY_TEST_PG_URI    if set, the tests run a second time on this store
#                         (e.g. postgres://postgres@127.0.0.1:15432/bakery)
#
# Extra arguments go to `node --test` (e.g. --test-name-pattern=lock).
set -euo pipefail
cd "$(dirname "$0")"

echo "== npm ci"
npm ci --no-audit --no-fund

echo "== build"
npm run --silent build

echo "== typecheck (sources and tests)"
npx tsc -p tsconfig.test.json

run() {
	node --test --test-concurrency=1 "$@" .test-build/test/*.test.js
}

if [ -n "${BAKERY_TEST_URI:-}" ]; then
	echo "== node --test on $BAKERY_TEST_URI"
	run "$@"
	exit 0
fi

echo "== node --test on SQLite"
run "$@"

if [ -n "${BAKERY_TEST_PG_URI:-}" ]; then
	echo "== node --test on PostgreSQL ($BAKERY_TEST_PG_URI)"
	BAKERY_TEST_URI="$BAKERY_TEST_PG_URI" run "$@"
fi
