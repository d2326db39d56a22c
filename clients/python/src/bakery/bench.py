"""Benchmark: ``BAKERY_URL=http://127.0.0.1:PORT python -m bakery.bench``.

Prints one JSON line: ``Sequence.next()`` calls per second from locally
reserved blocks (block 100000, background prefetch) and acquire+release pairs
per second on one uncontended lock, each measured for ``BAKERY_BENCH_SECONDS``
(default 2) in this process.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

from ._sync import Client

BLOCK = 100_000


def bench_ids(client: Client, seconds: float) -> float:
    """``Sequence.next()`` calls per second."""
    seq = client.sequence(f"bench-py-{uuid.uuid4().hex[:12]}", block=BLOCK)
    seq.next()  # the first block
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(10_000):
            seq.next()
        n += 10_000
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def bench_lock(client: Client, seconds: float) -> float:
    """Acquire + release pairs per second, sequential, uncontended."""
    lock = client.lock(f"bench-py-{uuid.uuid4().hex[:12]}")
    lock.acquire()
    lock.release()  # opens the session, warms the connection
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        lock.acquire()
        lock.release()
        n += 1
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def main() -> int:
    """Run both measurements and print the JSON line."""
    url = os.environ.get("BAKERY_URL")
    if not url:
        print("set BAKERY_URL to a running `bakery serve`", file=sys.stderr)
        return 2
    seconds = float(os.environ.get("BAKERY_BENCH_SECONDS", "2"))
    with Client(url) as client:
        ids = bench_ids(client, seconds)
        locks = bench_lock(client, seconds)
    line = {
        "client": "python",
        "ids_per_s": round(ids, 1),
        "block": BLOCK,
        "lock_ops_per_s": round(locks, 1),
        "seconds": seconds,
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
