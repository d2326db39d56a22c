"""Run `once` on one key; the function appends a line to a shared file per run."""

import os
import sys
import time

from barrier import wait_for_go

import bakery

url, scope, key, path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]


def work() -> str:
    with open(path, "a") as f:
        f.write(f"ran {os.getpid()}\n")
    time.sleep(0.5)  # keep the key in progress while the others claim it
    return f"result of {os.getpid()}"


wait_for_go()
with bakery.Client(url) as client:
    print(client.once(scope, key, "the payload", work, timeout=60), flush=True)
