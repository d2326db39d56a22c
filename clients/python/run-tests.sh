#!/usr/bin/env bash
# The Python client's whole suite, from a fresh machine with python3 and PyPI:
# a venv outside the tree (BAKERY_VENV, default <repo>/target/py-venv), the
# package installed from this folder with its test extras, then ruff (lint and
# format), mypy --strict and pytest against a real `bakery serve`.
#
#   BAKERY_BIN            the server binary (default <repo>/target/debug/bakery,
#                         built by `cargo build -p bakery-cli --features serve`)
#   BAKERY_TEST_URI       the store of the first run (default: SQLite in a temp dir)
#   BAKERY_TEST_PG_URI    if set, pytest runs a second time on this store
#                         (e.g. postgres://postgres@127.0.0.1:15432/bakery)
#   PYTHON                the interpreter that makes the venv (default python3)
#
# Extra arguments go to pytest (e.g. ./run-tests.sh -k lock -x).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${BAKERY_VENV:-$repo/target/py-venv}"

if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here[test]"

cd "$here"
echo "== ruff check" && "$venv/bin/ruff" check --no-cache .
echo "== ruff format --check" && "$venv/bin/ruff" format --no-cache --check .
echo "== mypy --strict" && "$venv/bin/mypy" --cache-dir=/dev/null

export BAKERY_BIN="${BAKERY_BIN:-$repo/target/debug/bakery}"
echo "== pytest on ${BAKERY_TEST_URI:-SQLite (temp dir)}"
"$venv/bin/python" -m pytest -p no:cacheprovider "$@"
if [ -n "${BAKERY_TEST_PG_URI:-}" ]; then
    echo "== pytest on $BAKERY_TEST_PG_URI"
    BAKERY_TEST_URI="$BAKERY_TEST_PG_URI" "$venv/bin/python" -m pytest -p no:cacheprovider "$@"
fi
