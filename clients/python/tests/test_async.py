"""The asyncio client against the real server."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import bakery


def run(coro):
    return asyncio.run(coro)


def test_sequence(url, name):
    async def main() -> None:
        async with bakery.AsyncClient(url) as c:
            seq = c.sequence(name, block=10)
            ids = [await seq.next() for _ in range(55)]
            assert ids == sorted(set(ids))
            more = []
            async for i in seq:
                more.append(i)
                if len(more) == 5:
                    break
            assert more[0] > ids[-1]
            fresh = c.sequence(name, block=10)
            first = await fresh.next()
            local = [fresh.next_nowait() for _ in range(9)]
            assert local == list(range(first + 1, first + 10)), "a block is 10 consecutive ids"
            assert fresh.next_nowait() is None, "past the block without awaiting"
            assert await fresh.next() > first + 9

    run(main())


def test_lock_try_and_fencing(url, name):
    async def main() -> None:
        async with bakery.AsyncClient(url) as a, bakery.AsyncClient(url) as b:
            async with a.lock(name) as lock:
                first = lock.fencing_token
                assert not await b.lock(name).try_acquire()
                assert not await b.lock(name).acquire(timeout=0.2)
            async with b.lock(name) as lock:
                assert lock.fencing_token > first

    run(main())


def test_waiter_served_and_cancel_withdraws(url, name):
    async def main() -> None:
        async with bakery.AsyncClient(url) as a, bakery.AsyncClient(url) as b:
            holder = a.lock(name)
            assert await holder.acquire()
            cancelled = asyncio.create_task(b.lock(name).acquire())
            waiter = b.lock(name)
            task = asyncio.create_task(waiter.acquire(timeout=30))
            deadline = asyncio.get_running_loop().time() + 10
            while len((await a.state("locks", name))["queue"]) < 2:
                assert asyncio.get_running_loop().time() < deadline, "waiters never queued"
                await asyncio.sleep(0.02)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            await holder.release()
            assert await task
            assert waiter.held
            await waiter.release()

    run(main())


def test_semaphore_and_rwlock(url, name):
    async def main() -> None:
        async with bakery.AsyncClient(url) as c:
            s1, s2, s3 = (c.semaphore(name, 2) for _ in range(3))
            assert await s1.try_acquire() and await s2.try_acquire()
            assert not await s3.try_acquire()
            rw1, rw2 = c.rwlock(name + "-rw"), c.rwlock(name + "-rw")
            async with rw1.read:
                assert await rw2.read.try_acquire()
                assert not await c.rwlock(name + "-rw").write.try_acquire()
                await rw2.read.release()

    run(main())


def test_once_sync_and_async_functions(url, name):
    async def main() -> None:
        async with bakery.AsyncClient(url) as c:
            runs: list[int] = []

            async def work() -> str:
                runs.append(1)
                return "async-result"

            assert await c.once("py-scope", name, "p", work) == "async-result"
            assert await c.once("py-scope", name, "p", lambda: "never") == "async-result"

            @c.once("py-scope", name + "-d", "p")
            def deco() -> str:
                runs.append(2)
                return "deco"

            assert await deco() == "deco" and await deco() == "deco"
            assert runs == [1, 2]

            async def boom() -> str:
                raise ValueError("nope")

            with pytest.raises(ValueError):
                await c.once("py-scope", name + "-f", "p", boom)
            assert await c.once("py-scope", name + "-f", "p", lambda: "retried") == "retried"

    run(main())


def test_election_observe(url, name):
    async def main() -> None:
        async with bakery.AsyncClient(url) as a, bakery.AsyncClient(url) as b:
            ea, eb = a.election(name, "a"), b.election(name, "b")
            async with ea:
                events = ea.observe(timeout=20)
                first = await events.__anext__()
                assert (first.term, first.value) == (ea.term, "a")
                campaign = asyncio.create_task(eb.campaign(timeout=30))
            async for leader in events:
                if leader.value == "b":
                    break
            assert await campaign and eb.is_leader
            assert (await eb.leader()).value == "b"
            await eb.resign()

    run(main())


def test_lost_fires_when_the_session_ends(url, name):
    async def main() -> None:
        async with bakery.AsyncClient(url, session_ttl=1.5) as c:
            lock = c.lock(name)
            assert await lock.acquire()
            async with httpx.AsyncClient() as h:
                (await h.delete(f"{url}/v1/sessions/{c.session_id}")).raise_for_status()
            await asyncio.wait_for(lock.lost.wait(), 10)
            assert lock.is_lost and not lock.held
            await lock.release()

    run(main())


def test_close_releases(url, name):
    async def main() -> None:
        async with bakery.AsyncClient(url) as other:
            c = bakery.AsyncClient(url)
            assert await c.lock(name).acquire()
            assert not await other.lock(name).try_acquire()
            await c.aclose()
            assert await other.lock(name).try_acquire()

    run(main())


def test_errors(url):
    async def main() -> None:
        async with bakery.AsyncClient(url) as c:
            with pytest.raises(bakery.InvalidInputError):
                await c.lock("bad name").acquire()

    run(main())
