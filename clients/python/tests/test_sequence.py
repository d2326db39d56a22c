"""Sequence against the real server."""

from __future__ import annotations

import threading

import pytest

import bakery


def test_ids_increase_across_blocks(client, name):
    seq = client.sequence(name, block=10)
    ids = [seq.next() for _ in range(95)]
    assert ids == sorted(set(ids))
    assert len(ids) == 95


def test_next_block_is_prefetched_in_the_background(client, name):
    seq = client.sequence(name, block=10, prefetch_at=0.5)
    first = seq.next()
    for _ in range(5):
        seq.next()  # past half of the block: the next one is being reserved
    pending = seq._pending
    assert pending is not None, "no prefetch started at the mark"
    start, end = pending.result(timeout=10)
    assert start >= first + 10 and end - start == 10
    rest = [seq.next() for _ in range(10)]
    assert rest[-1] >= start, "the prefetched block was not used"


def test_two_sequences_of_one_name_never_share_an_id(client, other, name):
    a, b = client.sequence(name, block=7), other.sequence(name, block=7)
    ids_a = [a.next() for _ in range(50)]
    ids_b = [b.next() for _ in range(50)]
    assert not set(ids_a) & set(ids_b)


def test_threads_share_one_sequence(client, name):
    seq = client.sequence(name, block=100)
    got: list[list[int]] = [[] for _ in range(4)]

    def draw(i: int) -> None:
        got[i].extend(seq.next() for _ in range(2000))

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for ids in got for i in ids]
    assert len(set(every)) == 8000
    for ids in got:
        assert ids == sorted(ids)


def test_iterates(client, name):
    seq = client.sequence(name, block=3)
    ids = [i for i, _ in zip(seq, range(7), strict=False)]
    assert ids == sorted(set(ids)) and len(ids) == 7


def test_reserve_returns_a_block(client, name):
    block = client.reserve(name, 100)
    assert len(block) == 100
    assert client.reserve(name, 1).start >= block.stop


def test_invalid_block_size():
    with bakery.Client("http://127.0.0.1:1") as c, pytest.raises(ValueError):
        c.sequence("x", block=0)
