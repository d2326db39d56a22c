"""The failure cases of test_failures.py for the asyncio client."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

import bakery
from stub_server import Stub
from test_failures import TTL, session_routes


def run(coro):
    return asyncio.run(coro)


class AsyncDropAnswers(httpx.AsyncHTTPTransport):
    """Loses the answer of the first request whose path ends with each of
    ``drop``; with ``hang``, the request then never returns (until cancelled)."""

    def __init__(self, *drop: str, hang: bool = False) -> None:
        super().__init__()
        self.drop = list(drop)
        self.hang = hang
        self.answered = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        for suffix in self.drop:
            if request.url.path.endswith(suffix):
                self.drop.remove(suffix)
                await response.aread()
                await response.aclose()
                self.answered.set()
                if self.hang:
                    await asyncio.Event().wait()
                raise httpx.ReadError("the test lost the answer", request=request)
        return response


def dropping(url: str, transport: httpx.AsyncBaseTransport) -> bakery.AsyncClient:
    return bakery.AsyncClient(url, http=httpx.AsyncClient(base_url=url, transport=transport))


async def wait_until(cond, timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_keepalive_to_a_silent_server_fires_lost_by_last_ok_plus_ttl(name):
    async def main() -> None:
        routes = session_routes()
        routes[f"POST /v1/locks/{name}/try"] = (200, {"granted": True, "token": 7})
        with Stub(routes) as stub:
            async with bakery.AsyncClient(stub.url, session_ttl=TTL, timeout=5.0) as client:
                before_open = time.monotonic()
                lock = client.lock(name)
                assert await lock.try_acquire() and lock.held
                await asyncio.wait_for(lock.lost.wait(), TTL + 2.0)
                elapsed = time.monotonic() - before_open
                assert TTL - 0.05 <= elapsed <= TTL + 0.5, f"lost after {elapsed:.2f}s"
                assert stub.count("POST /v1/sessions/s1/keepalive") >= 1
                assert not lock.held and lock.is_lost
                started = time.monotonic()
            assert time.monotonic() - started < TTL / 3 + 1.0, "aclose was slow"

    run(main())


def test_grant_of_an_acquire_whose_answer_was_lost_is_released(url, name):
    async def main() -> None:
        async with (
            bakery.AsyncClient(url) as other,
            dropping(url, AsyncDropAnswers("/acquire")) as client,
        ):
            with pytest.raises(bakery.UnknownOutcomeError):
                await client.lock(name).acquire(timeout=5)

            async def freed() -> bool:
                return not (await other.state("locks", name))["holders"]

            await wait_until(freed, what="the stray grant gone")
            assert await other.lock(name).try_acquire()

    run(main())


def test_grant_of_a_cancelled_acquire_is_released(url, name):
    async def main() -> None:
        transport = AsyncDropAnswers("/acquire", hang=True)
        async with bakery.AsyncClient(url) as other, dropping(url, transport) as client:
            task = asyncio.create_task(client.lock(name).acquire(timeout=5))
            await asyncio.wait_for(transport.answered.wait(), 10)  # granted, answer in transit
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

            async def freed() -> bool:
                return not (await other.state("locks", name))["holders"]

            await wait_until(freed, what="the grant of the cancelled acquire gone")

    run(main())


def test_claim_of_unknown_outcome_resets_the_session(url, name):
    async def main() -> None:
        async with (
            bakery.AsyncClient(url) as other,
            dropping(url, AsyncDropAnswers("/claim")) as client,
        ):
            lock = client.lock(name)
            assert await lock.try_acquire()
            with pytest.raises(bakery.UnknownOutcomeError):
                await client.claim("py-unknown-async", name, "p", timeout=5)
            assert lock.is_lost and not lock.held
            claim = await other.claim("py-unknown-async", name, "p", timeout=5)
            assert claim.claimed
            await claim.complete("done")

    run(main())
