"""The shared, I/O-free logic."""

from __future__ import annotations

import httpx

from bakery import _protocol as p
from bakery._errors import LostError, UnavailableError


def test_error_from_response_reads_kind():
    err = p.error_from_response(409, b'{"kind":"lost","message":"gone"}')
    assert isinstance(err, LostError) and (err.kind, err.status, err.message) == (
        "lost",
        409,
        "gone",
    )


def test_error_from_response_without_json_uses_status():
    err = p.error_from_response(503, b"busy", "1")
    assert isinstance(err, UnavailableError) and err.retry_after == 1.0


def test_transport_errors():
    assert p.error_from_transport(httpx.ConnectError("refused")).kind == "unavailable"
    assert p.error_from_transport(httpx.ReadTimeout("slow")).kind == "unknown_outcome"
    assert p.error_from_transport(httpx.RemoteProtocolError("closed")).kind == "unknown_outcome"


def test_retry_rule():
    policy = p.RetryPolicy(retries=3)
    acquire = p.Call("POST", "/a")
    reserve = p.reserve_call("s", 10)
    release = p.release_call("locks", "n", "s", 1)
    unknown = p.error_from_transport(httpx.ReadError("reset"))
    refused = p.error_from_transport(httpx.ConnectError("refused"))
    answered = p.error_from_response(503, b'{"kind":"unavailable","message":"x"}')
    assert policy.delay(0, unknown, acquire) is None
    assert policy.delay(0, unknown, reserve) is not None
    assert policy.delay(0, refused, release) is not None
    assert policy.delay(0, answered, acquire) is not None
    assert policy.delay(0, answered, release) is None
    assert policy.delay(3, refused, acquire) is None


def test_split_block():
    head, tail = p.split_block(100, 110, 0.8)
    assert (list(head), list(tail)) == (list(range(100, 108)), [108, 109])
    head, tail = p.split_block(5, 6, 0.8)
    assert list(head) + list(tail) == [5]


def test_lost_grants():
    view = {
        "grants": [
            {"family": "locks", "name": "a", "token": 1, "held": True},
            {"family": "locks", "name": "b", "token": 2, "held": False},
        ]
    }
    tracked = [("locks", "a", 1), ("locks", "b", 2), ("locks", "c", 3)]
    assert p.lost_grants(view, tracked) == [("locks", "b", 2), ("locks", "c", 3)]


def test_sse_parser():
    parser = p.SseParser()
    lines = ["event: leader", 'data: {"term":3,"owner":"session x","value":"v"}', "", ": ping", ""]
    events = [e for e in map(parser.line, lines) if e]
    assert events == [("leader", '{"term":3,"owner":"session x","value":"v"}')]
    assert p.leader_of(*events[0]) == p.Leader(3, "session x", "v")


def test_names_are_one_path_segment():
    assert p.seg("a/b c") == "a%2Fb%20c"
    assert p.seg("a:b@c+d=e") == "a%3Ab%40c%2Bd%3De"
