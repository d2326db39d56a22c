"""Wait until the test creates the file named by BAKERY_TEST_GO (all workers start together)."""

import os
import time


def wait_for_go() -> None:
    path = os.environ.get("BAKERY_TEST_GO")
    if not path:
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit("no go signal within 60 s")
        time.sleep(0.01)
