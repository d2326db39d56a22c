"""Fixtures: a real ``bakery serve`` per test session, unique names, clients.

The server binary comes from ``BAKERY_BIN`` (default ``<repo>/target/debug/bakery``),
the store from ``BAKERY_TEST_URI`` (default an SQLite file in a temporary folder).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import bakery

REPO = Path(__file__).resolve().parents[3]
HELPERS = Path(__file__).resolve().parent / "helpers"


@dataclass
class Server:
    """A running ``bakery serve``."""

    url: str
    uri: str
    proc: subprocess.Popen[str]


def bakery_bin() -> str:
    path = os.environ.get("BAKERY_BIN") or str(REPO / "target" / "debug" / "bakery")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(
            f"no bakery server binary at {path}: build it with "
            "`cargo build -p bakery-cli --features serve` (or set BAKERY_BIN)",
            pytrace=False,
        )
    return path


def start_server(uri: str, *extra: str) -> Server:
    """Start ``bakery serve`` on ``uri`` and wait for its ``listening on`` line."""
    proc = subprocess.Popen(
        [bakery_bin(), "--uri", uri, "serve", "--listen", "127.0.0.1:0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    found: list[str] = []

    def read_first_line() -> None:
        assert proc.stdout is not None
        found.append(proc.stdout.readline())

    reader = threading.Thread(target=read_first_line, daemon=True)
    reader.start()
    reader.join(60)
    line = found[0] if found else ""
    if not line.startswith("listening on "):
        proc.kill()
        proc.wait()
        pytest.fail(f"bakery serve did not start on {uri}: first line {line!r}", pytrace=False)
    # Keep draining stdout so the server never blocks on a full pipe.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return Server(line.split()[-1].strip(), uri, proc)


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    bakery_bin()  # fail first, naming the build command, if there is no binary
    tmp = tempfile.mkdtemp(prefix="bakery-py-test-")
    try:
        uri = os.environ.get("BAKERY_TEST_URI") or f"sqlite://{tmp}/ids.db"
        srv = start_server(uri)
        try:
            yield srv
        finally:
            stop_server(srv)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def url(server: Server) -> str:
    return server.url


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A name no other test (nor an earlier run on the same store) uses."""
    test = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")
    return f"py-{test[:40]}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(url: str) -> Iterator[bakery.Client]:
    with bakery.Client(url) as c:
        yield c


@pytest.fixture
def other(url: str) -> Iterator[bakery.Client]:
    """A second client: its own session."""
    with bakery.Client(url) as c:
        yield c


def helper(script: str, *args: str) -> list[str]:
    """The command line of helper ``script``."""
    return [sys.executable, str(HELPERS / script), *args]
