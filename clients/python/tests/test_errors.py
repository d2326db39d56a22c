"""Errors carry the server's kind, status and message; transport failures map
to unavailable (never reached the server) or unknown_outcome (may have)."""

from __future__ import annotations

import socket
import threading

import pytest

import bakery


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_invalid_name_is_invalid_input(client):
    with pytest.raises(bakery.InvalidInputError) as err:
        client.lock("no spaces allowed").acquire(timeout=1)
    e = err.value
    assert (e.kind, e.status) == ("invalid_input", 400)
    assert "no spaces allowed" in e.message
    assert isinstance(e, bakery.BakeryError)


def test_invalid_sequence_name(client):
    with pytest.raises(bakery.InvalidInputError):
        client.sequence("bad/name").next()


def test_invalid_session_ttl(url, name):
    with bakery.Client(url, session_ttl=0.2) as c, pytest.raises(bakery.InvalidInputError):
        c.lock(name).acquire()


def test_connection_refused_is_unavailable():
    with bakery.Client(f"http://127.0.0.1:{free_port()}", retries=1) as c:
        with pytest.raises(bakery.UnavailableError) as err:
            c.sequence("x").next()
        assert err.value.kind == "unavailable" and err.value.status is None


def test_unknown_route_is_not_found(client):
    with pytest.raises(bakery.NotFoundError) as err:
        client.state("locks", "never-taken-" + "x" * 8)
    assert err.value.kind == "not_found" and err.value.status == 404


class BreakingServer:
    """A TCP server that reads each request and closes the connection without
    answering: the outcome of every call is unknown. Counts the requests."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.requests = 0
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                if conn.recv(65536):
                    self.requests += 1

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def breaking():
    srv = BreakingServer()
    yield srv
    srv.close()


def test_acquire_is_not_resent_after_an_unknown_outcome(breaking):
    with bakery.Client(breaking.url, retries=3) as c:
        c._session = "s"  # skip opening a session: the acquire itself breaks
        try:
            with pytest.raises(bakery.UnknownOutcomeError) as err:
                c.lock("x").acquire(timeout=1)
            assert err.value.kind == "unknown_outcome"
            assert breaking.requests == 1
        finally:
            # No session to close on exit (closing it would break too and
            # hide what failed here).
            c._session = None


def test_reserve_is_resent_after_an_unknown_outcome(breaking):
    with bakery.Client(breaking.url, retries=2) as c, pytest.raises(bakery.UnknownOutcomeError):
        c.reserve("x", 10)
    assert breaking.requests == 3


def test_every_kind_has_its_class():
    for kind in bakery.KINDS:
        err = bakery._errors.error_for(kind, "m", 400)
        assert err.kind == kind and type(err) is not bakery.BakeryError
