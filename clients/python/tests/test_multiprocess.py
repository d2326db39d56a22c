"""The multi-process cases: real OS processes, each with its own Client."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
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


def test_lock_never_overlaps_across_processes(url, name, tmp_path):
    log = tmp_path / "lock.log"
    log.touch()
    rounds = 10
    cmds = [helper("lock_worker.py", url, name, str(rounds), str(log)) for _ in range(WORKERS)]
    run_together(cmds, tmp_path / "go")
    lines = log.read_text().splitlines()
    assert len(lines) == 2 * WORKERS * rounds
    holder: tuple[str, str] | None = None
    tokens: list[int] = []
    for line in lines:
        what, pid, token = line.split()
        if what == "enter":
            assert holder is None, f"{pid} entered while {holder} held the lock"
            holder = (pid, token)
            tokens.append(int(token))
        else:
            assert holder == (pid, token), f"exit {pid} {token} but the holder is {holder}"
            holder = None
    assert holder is None
    assert all(a < b for a, b in itertools.pairwise(tokens)), f"tokens not increasing: {tokens}"
    assert len({line.split()[1] for line in lines}) == WORKERS


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
        assert out.strip() == "lost"
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
