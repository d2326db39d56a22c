"""Take a lock N times; while holding it, append enter/exit lines to a shared file."""

import os
import sys

from barrier import wait_for_go

import bakery

url, name, rounds, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
pid = os.getpid()


def append(line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


wait_for_go()
with bakery.Client(url) as client:
    lock = client.lock(name, timeout=60)
    for _ in range(rounds):
        with lock:
            token = lock.fencing_token
            append(f"enter {pid} {token}")
            # Work under the lock: read the file back, so overlaps would show.
            with open(path) as f:
                f.read()
            append(f"exit {pid} {token}")
print("done")
