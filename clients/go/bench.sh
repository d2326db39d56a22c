#!/usr/bin/env bash
# Print one JSON line measuring this client against the running server at
# $BAKERY_URL (BAKERY_BENCH_SECONDS per measurement, default 2):
#   {"client":"go","ids_per_s":...,"block":100000,"lock_ops_per_s":...,"seconds":...}
set -euo pipefail
cd "$(dirname "$0")"
exec go run ./cmd/bakery-bench
