"""once against the real server: completed, failed, in progress, conflicts."""

from __future__ import annotations

import threading

import pytest

import bakery


def test_runs_once_then_replays(client, other, name):
    runs: list[int] = []

    def work() -> str:
        runs.append(1)
        return "done-1"

    assert client.once("py-scope", name, "p", work) == "done-1"
    assert other.once("py-scope", name, "p", work) == "done-1"
    assert client.once("py-scope", name, "p", work) == "done-1"
    assert runs == [1]
    state = client.once_state("py-scope", name)
    assert state["status"] == "completed" and state["result"] == "done-1"


def test_failure_releases_the_key_for_a_retry(client, name):
    def boom() -> str:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        client.once("py-scope", name, "p", boom)
    assert client.once("py-scope", name, "p", lambda: "second") == "second"


def test_in_progress_waits_then_gets_the_result(client, other, name):
    started, finish = threading.Event(), threading.Event()
    results: list[str] = []

    def slow() -> str:
        started.set()
        assert finish.wait(30)
        return "slow-result"

    t = threading.Thread(target=lambda: results.append(client.once("py-scope", name, "p", slow)))
    t.start()
    assert started.wait(30)
    with pytest.raises(bakery.OnceTimeoutError) as err:
        other.once("py-scope", name, "p", lambda: "must not run", timeout=0.3)
    assert err.value.kind == "timed_out"
    waiter: list[str] = []
    w = threading.Thread(
        target=lambda: waiter.append(other.once("py-scope", name, "p", lambda: "must not run"))
    )
    w.start()
    finish.set()
    t.join(30)
    w.join(30)
    assert results == ["slow-result"] and waiter == ["slow-result"]


def test_same_key_other_payload_conflicts(client, name):
    assert client.once("py-scope", name, "p1", lambda: "r") == "r"
    with pytest.raises(bakery.ConflictError) as err:
        client.once("py-scope", name, "p2", lambda: "r")
    assert err.value.kind == "conflict"


def test_decorator(client, name):
    runs: list[int] = []

    @client.once("py-scope", name, "p")
    def work() -> str:
        runs.append(1)
        return "decorated"

    assert work() == "decorated"
    assert work() == "decorated"
    assert runs == [1]


def test_non_str_result_fails_the_key(client, name):
    with pytest.raises(TypeError):
        client.once("py-scope", name, "p", lambda: 42)  # type: ignore[arg-type,return-value]
    assert client.once("py-scope", name, "p", lambda: "ok") == "ok"


def test_claim_by_hand_with_its_attempt(client, other, name):
    claim = client.claim("py-scope", name, "p")
    assert claim.claimed and claim.attempt >= 1
    with pytest.raises(bakery.OnceTimeoutError):
        other.claim("py-scope", name, "p", timeout=0.2)
    assert claim.complete("by hand") == "by hand"
    assert not claim.claimed
    again = other.claim("py-scope", name, "p")
    assert not again.claimed and again.result == "by hand"
    with pytest.raises(RuntimeError):
        again.complete("twice")


def test_complete_after_the_session_ended_is_lost(url, name):
    with bakery.Client(url) as c:
        claim = c.claim("py-scope", name, "p")
        c.reset_session()
        with pytest.raises(bakery.LostError) as err:
            claim.complete("too late")
        assert err.value.kind == "lost"
    with bakery.Client(url) as c:
        assert c.once("py-scope", name, "p", lambda: "rerun") == "rerun"
