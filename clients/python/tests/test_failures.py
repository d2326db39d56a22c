"""Failures the happy path never shows: a server that accepts and never
answers, answers lost on the way back, a session that ends behind the
client's back, a claim of unknown outcome."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pytest

import bakery
from bakery import _protocol as p
from stub_server import Stub

TTL = 1.5


def wait_until(cond: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what or cond}"
        time.sleep(0.01)


def session_routes(ttl: float = TTL, grants: list[dict[str, object]] | None = None) -> dict:
    view = {"id": "s1", "ttl_ms": int(ttl * 1000), "grants": grants or []}
    return {
        "POST /v1/sessions": (201, view),
        "GET /v1/sessions/s1": (200, view),
        "DELETE /v1/sessions/s1": (204, None),
    }


class DropAnswers(httpx.HTTPTransport):
    """Sends every request to the real server, but loses the answer of the
    first request whose path ends with each of ``drop`` (its outcome is then
    unknown to the client); requests matching ``gate`` wait for the event."""

    def __init__(self, *drop: str) -> None:
        super().__init__()
        self.drop = list(drop)
        self.gate: tuple[Callable[[httpx.Request], bool], threading.Event] | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.gate is not None and self.gate[0](request):
            self.gate[1].wait(30)
        response = super().handle_request(request)
        for suffix in self.drop:
            if request.url.path.endswith(suffix):
                self.drop.remove(suffix)
                response.read()
                response.close()
                raise httpx.ReadError("the test lost the answer", request=request)
        return response


def dropping_client(url: str, transport: httpx.BaseTransport, **kw: object) -> bakery.Client:
    return bakery.Client(url, http=httpx.Client(base_url=url, transport=transport), **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- keepalive (item A)


def test_keepalive_to_a_silent_server_fires_lost_by_last_ok_plus_ttl(name):
    routes = session_routes()
    routes[f"POST /v1/locks/{name}/try"] = (200, {"granted": True, "token": 7})
    with Stub(routes) as stub:
        client = bakery.Client(stub.url, session_ttl=TTL, timeout=5.0)
        try:
            before_open = time.monotonic()
            lock = client.lock(name)
            assert lock.try_acquire() and lock.held
            # The keepalives hang (5 s per attempt would be allowed): the grant must
            # still be reported lost when the TTL since the session opened is up.
            assert lock.lost.wait(TTL + 2.0), "lost never fired"
            elapsed = time.monotonic() - before_open
            assert elapsed <= TTL + 0.5, f"lost fired {elapsed:.2f}s after the last keepalive"
            assert elapsed >= TTL - 0.05, f"lost fired early: {elapsed:.2f}s"
            assert stub.count("POST /v1/sessions/s1/keepalive") >= 1
            assert not lock.held and lock.is_lost
        finally:
            client.close()


def test_held_is_false_once_the_ttl_passed_even_before_the_timer(name):
    routes = session_routes()
    routes[f"POST /v1/locks/{name}/try"] = (200, {"granted": True, "token": 7})
    with Stub(routes) as stub:
        client = bakery.Client(stub.url, session_ttl=TTL, timeout=5.0)
        try:
            lock = client.lock(name)
            assert lock.try_acquire()
            with client._lock:  # as if the process had been stopped past its TTL
                client._last_ok -= TTL
            assert not lock.held and lock.is_lost and lock.lost.is_set()
        finally:
            client.close()


def test_close_stops_a_hanging_keepalive_promptly(name):
    routes = session_routes()
    routes[f"POST /v1/locks/{name}/try"] = (200, {"granted": True, "token": 7})
    with Stub(routes) as stub:
        client = bakery.Client(stub.url, session_ttl=TTL, timeout=5.0)
        lock = client.lock(name)
        assert lock.try_acquire()
        wait_until(lambda: stub.count("POST /v1/sessions/s1/keepalive") >= 1, what="a keepalive")
        started = time.monotonic()
        client.close()
        took = time.monotonic() - started
        assert client._keeper is not None and not client._keeper.is_alive()
        assert took < TTL / 3 + 1.0, f"close took {took:.2f}s"
        assert stub.count("DELETE /v1/sessions/s1") == 1


# ---------------------------------------------------------------- acquire of unknown outcome (B)


def test_acquire_to_a_silent_server_is_unknown_not_resent_then_cleaned_up(name):
    stray = {"family": "locks", "name": name, "token": 9, "held": True}
    routes = session_routes(ttl=30, grants=[stray])
    routes[f"POST /v1/locks/{name}/release"] = (204, None)
    with Stub(routes) as stub:
        client = bakery.Client(stub.url, session_ttl=30, timeout=0.5)
        try:
            with pytest.raises(bakery.UnknownOutcomeError) as err:
                client.lock(name).acquire(timeout=0.2)
            assert err.value.kind == "unknown_outcome"
            # The session shows a grant of the name nobody here knows: released.
            wait_until(lambda: stub.count(f"POST /v1/locks/{name}/release") == 1, what="release")
            assert stub.count(f"POST /v1/locks/{name}/acquire") == 1, "the acquire was resent"
            released = [b for r, b in stub.bodies if r.endswith("/release")]
            assert b'"token":9' in released[0].replace(b" ", b"")
        finally:
            client.close()


def test_grant_of_an_acquire_whose_answer_was_lost_is_released(url, other, name):
    client = dropping_client(url, DropAnswers("/acquire"))
    try:
        with pytest.raises(bakery.UnknownOutcomeError):
            client.lock(name).acquire(timeout=5)
        wait_until(lambda: not other.state("locks", name)["holders"], what="the stray grant gone")
        assert other.lock(name).try_acquire()
    finally:
        client.close()


def test_clean_up_spares_a_grant_another_acquire_of_the_name_may_be_getting(url, name):
    transport = DropAnswers("/acquire")
    gate = threading.Event()
    transport.gate = (
        lambda r: r.method == "GET" and r.url.path.startswith("/v1/sessions/"),
        gate,
    )
    client = dropping_client(url, transport)
    try:
        with pytest.raises(bakery.UnknownOutcomeError):
            client.lock(name).acquire(timeout=5)
        # The clean-up waits at the gate; meanwhile another Lock object of the
        # same name (same client) starts an acquire.
        second = client.lock(name)
        got: list[bool] = []
        t = threading.Thread(target=lambda: got.append(second.acquire(timeout=3)))
        t.start()
        wait_until(lambda: client.state("locks", name)["queue"], what="the second acquire queued")
        gate.set()
        for th in [th for th in threading.enumerate() if th.name == "bakery-cleanup"]:
            th.join(10)
        assert len(client.state("locks", name)["holders"]) == 1, "a grant in question was released"
        t.join(10)
        assert got == [False]
    finally:
        gate.set()
        client.close()


# ---------------------------------------------------------------- claim of unknown outcome (B)


def test_claim_of_unknown_outcome_resets_the_session(url, other, name):
    client = dropping_client(url, DropAnswers("/claim"))
    try:
        lock = client.lock(name)
        assert lock.try_acquire()
        first = client.session_id
        with pytest.raises(bakery.UnknownOutcomeError):
            client.claim("py-unknown", name, "p", timeout=5)
        assert lock.is_lost and not lock.held, "the session was reset: its grants are lost"
        assert client.session_id != first
        # The claim went with the session: another worker claims it at once.
        claim = other.claim("py-unknown", name, "p", timeout=5)
        assert claim.claimed
        claim.complete("done")
    finally:
        client.close()


# ---------------------------------------------------------------- release answered 404 (C)


def test_release_404_with_a_live_session_loses_only_that_grant(url, name):
    with bakery.Client(url, session_ttl=60) as client:
        a, b = client.lock(name + "-a"), client.lock(name + "-b")
        assert a.try_acquire() and b.try_acquire()
        session = client.session_id
        client._send(p.release_call("locks", name + "-a", session, a.fencing_token))
        with pytest.raises(bakery.LostError):
            a.release()
        assert client.session_id == session
        assert b.held and not b.is_lost
        b.release()


def test_release_404_with_an_ended_session_loses_every_grant(url, name):
    with bakery.Client(url, session_ttl=60) as client:
        a, b = client.lock(name + "-a"), client.lock(name + "-b")
        assert a.try_acquire() and b.try_acquire()
        session = client.session_id
        httpx.delete(f"{url}/v1/sessions/{session}").raise_for_status()
        with pytest.raises(bakery.LostError):
            a.release()
        assert b.lost.is_set() and not b.held
        assert client.session_id is None
        b.release()  # quiet: the loss was reported


# ---------------------------------------------------------------- once failed


def test_a_failed_claim_is_a_once_failed_error():
    op = p.claim_op("s", "k", "p", None)
    assert op.send(None) is p.NEED_SESSION
    assert isinstance(op.send("sess"), p.Call)
    with pytest.raises(bakery.OnceFailedError) as err:
        op.send({"status": "failed", "attempt": 3, "error": "boom"})
    assert isinstance(err.value, bakery.ConflictError) and err.value.kind == "conflict"
    assert (err.value.attempt, err.value.error) == (3, "boom")
