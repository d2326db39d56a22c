"""Hold a lock with a short session TTL, then report whether `lost` fires.

Prints `held TOKEN` once holding; the test SIGSTOPs this process past the TTL
and SIGCONTs it after a waiter got the lock. Prints `lost SECONDS` (exit 0)
when `lock.lost` fires, SECONDS after the process was continued; `not lost`
(exit 1) if it does not within 60 s.

The moment of SIGCONT is taken from a watcher thread that ticks every 10 ms:
the first tick after a gap of more than a second is when the process ran again.
"""

import sys
import threading
import time

import bakery

TTL = 2.0

resumed: list[float] = []


def watch() -> None:
    last = time.monotonic()
    while not resumed:
        time.sleep(0.01)
        now = time.monotonic()
        if now - last > 1.0:
            resumed.append(now)
        last = now


url, name = sys.argv[1], sys.argv[2]
with bakery.Client(url, session_ttl=TTL) as client:
    lock = client.lock(name)
    assert lock.acquire(timeout=30)
    threading.Thread(target=watch, daemon=True).start()
    print(f"held {lock.fencing_token}", flush=True)
    if lock.lost.wait(60):
        fired = time.monotonic()
        deadline = time.monotonic() + 5
        while not resumed and time.monotonic() < deadline:
            time.sleep(0.01)
        after = max(0.0, fired - resumed[0]) if resumed else float("nan")
        print(f"lost {after:.3f}", flush=True)
        assert lock.is_lost and not lock.held
        lock.release()  # quiet: the loss was reported through `lost`
        sys.exit(0)
    print("not lost", flush=True)
    sys.exit(1)
