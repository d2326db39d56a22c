"""The multi-process cases: real OS processes, each with its own Client."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from pathlib import Path

import bakery
from conftest import helper

WORKERS = 4


def run_together(cmds: list[list[str]], go: Path, timeout: float = 120) -> list[str]:
    """Start every command, let them go at once, return their stdouts (all must exit 0)."""
    env = {**os.environ, "BAKERY_TEST_GO": str(go)}
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for c in cmds
    ]
    # Every worker imported its modules and stands at the barrier before any
    # goes: interpreter start-up on a busy machine is longer than their work.
    deadline = time.monotonic() + 60
    while len(list(go.parent.glob(go.name + ".ready.*"))) < len(procs):
        exited = [p for p in procs if p.poll() is not None]
        if exited or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    go.touch()
    outs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, f"worker failed ({proc.returncode}): {err}"
            outs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outs


def test_ids_distinct_and_increasing_across_processes(url, name, tmp_path):
    outs = [tmp_path / f"ids-{i}.txt" for i in range(WORKERS)]
    cmds = [helper("ids_worker.py", url, name, "1000", str(o)) for o in outs]
    run_together(cmds, tmp_path / "go")
    every: list[int] = []
    for out in outs:
        ids = [int(line) for line in out.read_text().split()]
        assert len(ids) == 1000
        assert all(a < b for a, b in itertools.pairwise(ids)), "ids not increasing within a process"
        every.extend(ids)
    assert len(set(every)) == WORKERS * 1000, "an id was handed out twice"


def overlap(lines: list[str]) -> str | None:
    """The first overlap in an enter/exit log (two ``enter``s without an
    ``exit`` between them, or an ``exit`` of another holder), or ``None``."""
    holder: tuple[str, str] | None = None
    for n, line in enumerate(lines):
        what, pid, token = line.split()
        if what == "enter":
            if holder is not None:
                return f"line {n}: {pid} entered while {holder} held the lock"
            holder = (pid, token)
        else:
            if holder != (pid, token):
                return f"line {n}: exit {pid} {token} but the holder is {holder}"
            holder = None
    return None if holder is None else f"{holder} never left"


def lock_log(url: str, name: str, tmp_path: Path, rounds: int, *mode: str) -> list[str]:
    log = tmp_path / "lock.log"
    log.touch()
    cmds = [
        helper("lock_worker.py", url, name, str(rounds), str(log), *mode) for _ in range(WORKERS)
    ]
    run_together(cmds, tmp_path / "go")
    lines = log.read_text().splitlines()
    assert len(lines) == 2 * WORKERS * rounds
    assert len({line.split()[1] for line in lines}) == WORKERS
    return lines


def test_lock_never_overlaps_across_processes(url, name, tmp_path):
    lines = lock_log(url, name, tmp_path, 10)
    assert overlap(lines) is None, overlap(lines)
    tokens = [int(line.split()[2]) for line in lines if line.startswith("enter")]
    assert all(a < b for a, b in itertools.pairwise(tokens)), f"tokens not increasing: {tokens}"


def test_overlap_check_sees_the_workers_overlap_without_the_lock(url, name, tmp_path):
    """The negative control: the same workers and the same check, the critical
    section unguarded. If this found no overlap, the test above proved nothing."""
    lines = lock_log(url, name, tmp_path, 10, "unguarded")
    assert overlap(lines) is not None, "no overlap seen without the lock: the check is blind"


def test_stopped_holder_loses_its_lock_and_is_told(url, name):
    holder = subprocess.Popen(
        helper("stopped_holder.py", url, name),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        first = holder.stdout.readline().split()
        assert first[:1] == ["held"], f"holder did not take the lock: {first}"
        held_token = int(first[1])
        os.kill(holder.pid, signal.SIGSTOP)
        try:
            with bakery.Client(url) as waiter:
                lock = waiter.lock(name)
                # Granted once the stopped holder's session (TTL 2 s) expires.
                assert lock.acquire(timeout=30), "the waiter never got the lock"
                assert lock.fencing_token > held_token
                state = waiter.state("locks", name)
                assert [h["token"] for h in state["holders"]] == [lock.fencing_token]
        finally:
            os.kill(holder.pid, signal.SIGCONT)
        out, err = holder.communicate(timeout=60)
        assert holder.returncode == 0, f"holder: {out!r} {err!r}"
        what, after = out.split()
        assert what == "lost"
        # Its session's TTL (2 s) passed while stopped: `lost` fires at once
        # when continued, not after a keepalive or a request times out.
        print(f"lost fired {after}s after SIGCONT")
        assert float(after) <= 2.0 / 3 + 1.0, f"lost fired {after}s after SIGCONT"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_once_runs_exactly_once_across_processes(url, name, tmp_path):
    runs = tmp_path / "runs.txt"
    runs.touch()
    cmds = [helper("once_worker.py", url, "py-once", name, str(runs)) for _ in range(WORKERS)]
    outs = run_together(cmds, tmp_path / "go")
    ran = runs.read_text().splitlines()
    assert len(ran) == 1, f"ran {len(ran)} times: {ran}"
    pid = ran[0].split()[1]
    assert [o.strip() for o in outs] == [f"result of {pid}"] * WORKERS
