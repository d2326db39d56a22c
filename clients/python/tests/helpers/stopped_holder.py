"""Hold a lock with a short session TTL, then report whether `lost` fires.

Prints `held TOKEN` once holding; the test SIGSTOPs this process past the TTL
and SIGCONTs it after a waiter got the lock. Prints `lost` (exit 0) when
`lock.lost` fires, `not lost` (exit 1) if it does not within 60 s.
"""

import sys

import bakery

url, name = sys.argv[1], sys.argv[2]
with bakery.Client(url, session_ttl=2.0) as client:
    lock = client.lock(name)
    assert lock.acquire(timeout=30)
    print(f"held {lock.fencing_token}", flush=True)
    if lock.lost.wait(60):
        print("lost", flush=True)
        assert lock.is_lost and not lock.held
        lock.release()  # quiet: the loss was reported through `lost`
        sys.exit(0)
    print("not lost", flush=True)
    sys.exit(1)
