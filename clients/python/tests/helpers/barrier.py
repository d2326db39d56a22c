"""Say this worker is ready (a file beside BAKERY_TEST_GO), then wait until the
test creates BAKERY_TEST_GO, which it does once every worker is ready: all
workers start together."""

import os
import time


def wait_for_go() -> None:
    path = os.environ.get("BAKERY_TEST_GO")
    if not path:
        return
    open(f"{path}.ready.{os.getpid()}", "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit("no go signal within 60 s")
        time.sleep(0.01)
