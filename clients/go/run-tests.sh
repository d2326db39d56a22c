#!/usr/bin/env bash
# The Go client's whole suite: go vet, the gofmt check, and the tests with
# the race detector against a real `bakery serve` on SQLite, then again on
# PostgreSQL when BAKERY_TEST_PG_URI is set (or on BAKERY_TEST_URI alone
# when that is set).
#
#   BAKERY_BIN=/path/to/bakery ./run-tests.sh
#   BAKERY_TEST_PG_URI=postgres://postgres@127.0.0.1:15432/bakery ./run-tests.sh
#
# BAKERY_BIN defaults to <repo>/target/debug/bakery (build it with
# `cargo build -p bakery-cli --features serve`). Extra arguments go to
# `go test` (e.g. -run Lock -v).
set -euo pipefail
cd "$(dirname "$0")"

echo "== go vet"
go vet ./...

echo "== gofmt -l"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "not gofmt-formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi

if [ -n "${BAKERY_TEST_URI:-}" ]; then
	echo "== go test -race on $BAKERY_TEST_URI"
	go test -race -count=1 "$@" ./...
	exit 0
fi

echo "== go test -race on SQLite"
go test -race -count=1 "$@" ./...

if [ -n "${BAKERY_TEST_PG_URI:-}" ]; then
	echo "== go test -race on PostgreSQL ($BAKERY_TEST_PG_URI)"
	BAKERY_TEST_URI="$BAKERY_TEST_PG_URI" go test -race -count=1 "$@" ./...
fi
