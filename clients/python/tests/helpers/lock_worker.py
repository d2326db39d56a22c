"""Take a lock N times; while holding it, append enter/exit lines to a shared file.

With a fifth argument `unguarded`, the same critical section runs without the
lock (the negative control of the overlap check: it must see an overlap).
"""

import os
import sys
import time

from barrier import wait_for_go

import bakery

url, name, rounds, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
unguarded = sys.argv[5:] == ["unguarded"]
pid = os.getpid()


def append(line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def critical_section(token: int) -> None:
    append(f"enter {pid} {token}")
    # Work under the lock, wide enough that an overlap shows: read the file
    # back, and stay a few milliseconds.
    with open(path) as f:
        f.read()
    time.sleep(0.003)
    append(f"exit {pid} {token}")


wait_for_go()
if unguarded:
    for _ in range(rounds):
        critical_section(0)
else:
    with bakery.Client(url) as client:
        lock = client.lock(name, timeout=60)
        for _ in range(rounds):
            with lock:
                critical_section(lock.fencing_token)
print("done")
