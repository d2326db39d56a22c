"""Lock, Semaphore, RWLock, Election and sessions against the real server."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

import bakery


def test_try_acquire_and_release(client, other, name):
    a, b = client.lock(name), other.lock(name)
    assert a.try_acquire()
    assert a.held
    assert not b.try_acquire()
    a.release()
    assert not a.held
    assert b.try_acquire()
    b.release()


def test_fencing_tokens_increase(client, other, name):
    tokens = []
    for c in (client, other, client, other):
        with c.lock(name) as lock:
            tokens.append(lock.fencing_token)
    assert tokens == sorted(set(tokens))


def test_acquire_times_out_and_with_raises(client, other, name):
    holder = client.lock(name)
    assert holder.acquire()
    waiter = other.lock(name)
    assert not waiter.acquire(timeout=0.3)
    with pytest.raises(bakery.WaitTimeoutError) as err, other.lock(name, timeout=0.3):
        pass
    assert err.value.kind == "timed_out"
    holder.release()


def test_waiter_is_served_in_order_on_release(client, other, name):
    holder = client.lock(name)
    assert holder.acquire()
    held_token = holder.fencing_token
    waiter = other.lock(name)
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30)))
    t.start()
    deadline = time.monotonic() + 10
    while not client.state("locks", name)["queue"]:
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.02)
    holder.release()
    t.join(30)
    assert got == [True]
    assert waiter.fencing_token > held_token
    waiter.release()


def test_lock_data_is_stored(client, name):
    with client.lock(name, data="payload-1"):
        state = client.state("locks", name)
        assert state["holders"][0]["data"] == "payload-1"


def test_semaphore_permits(client, other, name):
    a, b, c = (client.semaphore(name, 2), other.semaphore(name, 2), client.semaphore(name, 2))
    assert a.try_acquire() and b.try_acquire()
    assert not c.try_acquire(), "a third holder of 2 permits"
    a.release()
    assert c.try_acquire()
    with pytest.raises(bakery.BakeryError, match="permits"):
        other.semaphore(name, 3).try_acquire()
    b.release()
    c.release()


def test_semaphore_permit_mismatch_is_conflict(client, name):
    assert client.semaphore(name, 2).try_acquire()
    with pytest.raises(bakery.ConflictError):
        client.semaphore(name, 3).try_acquire()


def test_rwlock_readers_share_writers_exclude(client, other, name):
    r1, r2, w = client.rwlock(name), other.rwlock(name), other.rwlock(name)
    assert r1.read.try_acquire() and r2.read.try_acquire(), "readers do not share"
    assert not w.write.try_acquire(), "a writer while readers hold"
    r1.read.release()
    r2.read.release()
    with w.write:
        assert not r1.read.try_acquire(), "a reader while the writer holds"
        assert not client.rwlock(name).write.try_acquire(), "two writers"
    assert r1.read.try_acquire()
    r1.read.release()


def test_election_leader_and_observe(client, other, name):
    a, b = client.election(name, "node-a"), other.election(name, "node-b")
    assert a.campaign(timeout=10)
    assert a.is_leader
    assert a.leader() == bakery.Leader(a.term, f"session {client.session_id}", "node-a")
    events = a.observe(timeout=20)
    first = next(events)
    assert (first.term, first.value) == (a.term, "node-a")
    got_b: list[bool] = []
    t = threading.Thread(target=lambda: got_b.append(b.campaign(timeout=30)))
    t.start()
    a.resign()
    for leader in events:
        if leader.value == "node-b":
            assert leader.term > first.term
            break
    else:
        pytest.fail("observe never showed node-b leading")
    t.join(30)
    assert got_b == [True] and b.is_leader
    b.resign()


def test_close_releases_grants(url, other, name):
    c = bakery.Client(url)
    assert c.lock(name).acquire()
    assert c.semaphore(name + "-s", 1).acquire()
    waiter = other.lock(name)
    assert not waiter.try_acquire()
    lock = c.lock(name + "-3")
    assert lock.acquire()
    c.close()
    lock.release()  # given back by the close: nothing to do, no error
    assert not lock.is_lost
    assert waiter.try_acquire(), "closing the client did not release its lock"
    assert other.semaphore(name + "-s", 1).try_acquire()
    waiter.release()


def test_session_ended_on_server_fires_lost(url, name):
    with bakery.Client(url, session_ttl=1.5) as c:
        lock = c.lock(name)
        assert lock.acquire()
        session = c.session_id
        assert session is not None
        # End the session behind the client's back: the next keepalive answers 404.
        httpx.delete(f"{url}/v1/sessions/{session}").raise_for_status()
        assert lock.lost.wait(10), "lost did not fire"
        assert lock.is_lost and not lock.held
        # The next acquire (no release needed after a loss) opens a new session.
        assert lock.acquire(timeout=10)
        assert not lock.is_lost
        assert c.session_id != session
        lock.release()


def test_release_of_a_grant_lost_unnoticed_raises_lost(url, name):
    with bakery.Client(url, session_ttl=60) as c:
        lock = c.lock(name)
        assert lock.acquire()
        httpx.delete(f"{url}/v1/sessions/{c.session_id}").raise_for_status()
        with pytest.raises(bakery.LostError) as err:
            lock.release()
        assert err.value.kind == "lost"
        assert lock.is_lost


def test_acquire_after_session_expired_opens_a_new_one(url, other, name):
    with bakery.Client(url, session_ttl=60) as c:
        httpx.delete(f"{url}/v1/sessions/{c._session_id()}").raise_for_status()
        with c.lock(name) as lock:  # 404 for the old session: a new one, then granted
            assert not other.lock(name).try_acquire()
            assert lock.held


def test_one_object_holds_one_grant(client, name):
    lock = client.lock(name)
    with lock, pytest.raises(RuntimeError):
        lock.acquire()
    with pytest.raises(RuntimeError):
        lock.release()


def test_reset_session_gives_everything_back(client, other, name):
    lock = client.lock(name)
    assert lock.acquire()
    first = client.session_id
    client.reset_session()
    assert lock.is_lost
    assert other.lock(name).try_acquire(), "the reset session still holds the lock"
    assert client.lock(name + "-2").try_acquire()
    assert client.session_id not in (None, first)
