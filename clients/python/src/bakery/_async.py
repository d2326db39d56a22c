"""The asyncio client: :class:`AsyncClient` and its primitives.

The same operations as :mod:`bakery._sync` (shared in :mod:`bakery._protocol`),
carried out with ``httpx.AsyncClient``; the session is kept alive by a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, TypeVar, overload

import httpx

from . import _protocol as p
from ._errors import BakeryError, LostError, NotFoundError, UnknownOutcomeError

log = logging.getLogger("bakery")

T = TypeVar("T")

OnceFn = Callable[[], "str | Awaitable[str]"]


class _Grant:
    __slots__ = ("given_back", "key", "lost", "session")

    def __init__(self, key: p.GrantKey, session: str, lost: asyncio.Event) -> None:
        self.key = key
        self.session = session
        self.lost = lost
        #: Released with the whole session by closing the client.
        self.given_back = False


class AsyncClient:
    """The asyncio client of ``bakery serve``: one connection pool, one session
    (opened on first need, kept alive by a background task every TTL/3).

    Use it with ``async with``, or await :meth:`aclose`, which ends the session
    and so releases every grant it holds. Arguments as :class:`bakery.Client`.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:7878",
        token: str | None = None,
        *,
        session_ttl: float = 10.0,
        timeout: float = 10.0,
        retries: int = 5,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = http or httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)
        self._timeout = timeout
        self._policy = p.RetryPolicy(retries=retries)
        self._ttl = session_ttl
        self._open_lock = asyncio.Lock()
        self._session: str | None = None
        self._last_ok = 0.0
        self._grants: dict[p.GrantKey, _Grant] = {}
        # Acquires in flight per (family, name), and how many ever started (see
        # bakery.Client): a clean-up leaves alone what one of them could be getting.
        self._inflight: dict[tuple[str, str], int] = {}
        self._started: dict[tuple[str, str], int] = {}
        self._keeper: asyncio.Task[None] | None = None
        # Fires every grant's `lost` at last successful keepalive + TTL.
        self._expiry: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._prefetches: set[asyncio.Task[tuple[int, int]]] = set()
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session (releasing every grant it holds) and the connections."""
        if self._closed:
            return
        self._closed = True
        session, self._session = self._session, None
        for grant in self._grants.values():
            grant.given_back = True
        self._grants.clear()
        if self._expiry is not None:
            self._expiry.cancel()
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        for bg in list(self._background):
            bg.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for task in self._prefetches:
            task.cancel()
        for result in await asyncio.gather(*self._prefetches, return_exceptions=True):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.debug("a block prefetched for nobody failed: %r", result)
        try:
            if session is not None:
                try:
                    await self._send(p.close_session_call(session))
                except NotFoundError:
                    log.debug("session %s had already ended", session)
        finally:
            await self._http.aclose()

    @property
    def session_id(self) -> str | None:
        """The id of the client's session, if one is open."""
        return self._session

    async def reset_session(self) -> None:
        """Close the current session, giving back everything it holds (its grants'
        ``lost`` fire); the next call opens a new one. See
        :meth:`bakery.Client.reset_session`."""
        async with self._open_lock:
            session = self._session
            if session is None:
                return
            self._session_ended(session, "reset by the caller")
        await self._abandon(session)

    # ------------------------------------------------------------ transport

    async def _send(self, call: p.Call, deadline: float | None = None) -> Any:
        """Send ``call`` as the retry policy allows; with a ``deadline`` (a
        ``time.monotonic()`` instant) every attempt and wait ends by then."""
        attempt = 0
        while True:
            timeout = self._timeout + call.wait
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    raise UnknownOutcomeError("unknown_outcome", "no answer before the deadline")
            try:
                r = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params, timeout=timeout
                )
            except httpx.HTTPError as e:
                err = p.error_from_transport(e)
            else:
                if r.status_code < 400:
                    return p.decode(r.status_code, r.content)
                err = p.error_from_response(r.status_code, r.content, r.headers.get("retry-after"))
            delay = self._policy.delay(attempt, err, call)
            if delay is None:
                raise err
            log.debug("%s %s: %s; retrying in %.2fs", call.method, call.path, err, delay)
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise err
            await asyncio.sleep(delay)
            attempt += 1

    async def _run(self, op: p.Op[T]) -> T:
        value: Any = None
        exc: BakeryError | None = None
        while True:
            try:
                instr = op.throw(exc) if exc is not None else op.send(value)
            except StopIteration as stop:
                result: T = stop.value
                return result
            value, exc = None, None
            try:
                if isinstance(instr, p.Call):
                    value = await self._send(instr)
                elif isinstance(instr, p.SessionEnded):
                    self._session_ended(instr.session, "the server says it has ended")
                elif isinstance(instr, p.CheckSession):
                    value = await self._check_session(instr.session)
                elif isinstance(instr, p.ResetSession):
                    self._session_ended(instr.session, "a call of unknown outcome")
                    await self._abandon(instr.session)
                else:
                    value = await self._session_id()
            except BakeryError as e:
                exc = e

    # ------------------------------------------------------------ session

    async def _session_id(self) -> str:
        async with self._open_lock:
            if self._closed:
                raise RuntimeError("the bakery client is closed")
            if self._session is not None:
                return self._session
            sent = time.monotonic()
            view = await self._send(p.open_session_call(self._ttl))
            self._session = str(view["id"])
            self._last_ok = sent
            self._arm_expiry(self._session, sent)
            log.debug("opened session %s (ttl %.1fs)", self._session, self._ttl)
            if self._keeper is None:
                self._keeper = asyncio.create_task(self._keep_alive(), name="bakery-keepalive")
            return self._session

    def _session_ended(self, session: str, why: str) -> None:
        if self._session == session:
            self._session = None
        lost = [g for g in self._grants.values() if g.session == session]
        for g in lost:
            del self._grants[g.key]
            log.warning("grant %s lost: session %s ended (%s)", g.key, session, why)
            g.lost.set()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background (cancelled by :meth:`aclose`)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # e.g. `held` read after the loop ended
            coro.close()
            return
        task = loop.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _arm_expiry(self, session: str, last_ok: float) -> None:
        """End ``session`` at ``last_ok`` + TTL unless a keepalive gets through before."""
        if self._expiry is not None:
            self._expiry.cancel()
        if self._closed:
            return
        delay = max(0.0, last_ok + self._ttl - time.monotonic())
        self._expiry = asyncio.get_running_loop().call_later(delay, self._expire, session, last_ok)

    def _expire(self, session: str, last_ok: float) -> None:
        """End ``session`` if no keepalive got through since ``last_ok`` for a TTL."""
        if self._closed or self._session != session or self._last_ok != last_ok:
            return
        if time.monotonic() < last_ok + self._ttl:
            return
        self._session_ended(session, "no keepalive answered within its TTL")
        self._spawn(self._abandon(session))

    def _is_lost(self, grant: _Grant) -> bool:
        """Whether ``grant`` is lost (firing ``lost`` if its session's TTL passed
        since the last keepalive that got through)."""
        due = time.monotonic() >= self._last_ok + self._ttl
        if not grant.lost.is_set() and grant.session == self._session and due:
            self._expire(grant.session, self._last_ok)
        return grant.lost.is_set()

    async def _keep_alive(self) -> None:
        every = self._ttl / 3
        next_at = time.monotonic() + every
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            sent = time.monotonic()
            next_at = sent + every
            session = self._session
            if session is None:
                continue
            before = [k for k, g in self._grants.items() if g.session == session]
            try:
                # All attempts within a third of the TTL; the expiry timer ends
                # the session at its TTL whatever this request does.
                view = await self._send(p.keepalive_call(session), deadline=sent + every)
            except NotFoundError:
                self._session_ended(session, "keepalive answered not_found")
                continue
            except BakeryError as e:
                log.warning("keepalive of session %s failed: %s", session, e)
                continue
            if self._session == session and sent > self._last_ok:
                self._last_ok = sent
                self._arm_expiry(session, sent)
            for key in p.lost_grants(view, before):
                g = self._grants.pop(key, None)
                if g is not None:
                    log.warning("grant %s lost: the server no longer holds it", key)
                    g.lost.set()

    async def _check_session(self, session: str) -> bool:
        """After a ``404`` on a call of ``session``: read it; if the server no
        longer knows it, end it here (every grant lost). True if it is gone."""
        try:
            await self._send(p.show_session_call(session))
        except NotFoundError:
            self._session_ended(session, "the server no longer knows it")
            return True
        except BakeryError as e:
            log.warning("could not read session %s: %s", session, e)
        return False

    def _begin(self, key: tuple[str, str]) -> int:
        self._inflight[key] = self._inflight.get(key, 0) + 1
        self._started[key] = self._started.get(key, 0) + 1
        return self._started[key]

    def _finish(self, key: tuple[str, str]) -> None:
        left = self._inflight.get(key, 0) - 1
        if left > 0:
            self._inflight[key] = left
        else:
            self._inflight.pop(key, None)

    def _reconcile(self, key: tuple[str, str], seen: int) -> None:
        """After an acquire of ``key`` (number ``seen``) of unknown outcome, in
        the background: release what the session holds of ``key`` unknown here."""
        session = self._session
        if session is not None and not self._closed:
            self._spawn(self._clean_up(session, key, seen))

    async def _clean_up(self, session: str, key: tuple[str, str], seen: int) -> None:
        family, name = key
        try:
            view = await self._send(p.show_session_call(session))
        except NotFoundError:
            self._session_ended(session, "the server no longer knows it")
            return
        except BakeryError as e:
            log.warning("could not read session %s to clean up %s: %s", session, key, e)
            return
        for g in view.get("grants", []):
            if (g.get("family"), g.get("name")) != key:
                continue
            token = int(g["token"])
            known = (family, name, token) in self._grants
            busy = (
                self._inflight.get(key, 0) > 0
                or self._started.get(key, 0) != seen
                or self._session != session
                or self._closed
            )
            if known or busy:
                continue
            log.info("releasing %s %r token %d an interrupted acquire took", family, name, token)
            try:
                await self._send(p.release_call(family, name, session, token))
            except BakeryError as e:
                log.warning("could not release %s %r token %d: %s", family, name, token, e)

    async def _abandon(self, session: str) -> None:
        try:
            await self._send(p.close_session_call(session))
        except NotFoundError:
            pass  # it had ended on the server too: nothing to free
        except BakeryError as e:
            log.warning("closing abandoned session %s failed (it expires): %s", session, e)

    def _register(self, family: str, name: str, session: str, token: int) -> _Grant:
        grant = _Grant((family, name, token), session, asyncio.Event())
        if self._session == session:
            self._grants[grant.key] = grant
        else:
            log.warning("grant %s lost: its session ended as it was granted", grant.key)
            grant.lost.set()
        return grant

    async def _release(self, grant: _Grant) -> None:
        self._grants.pop(grant.key, None)
        family, name, token = grant.key
        if grant.given_back:
            return
        if self._session == grant.session:
            try:
                await self._send(p.release_call(family, name, grant.session, token))
                return
            except LostError as e:
                err: BakeryError = e
            except NotFoundError as e:
                # The grant is not there: lost alone, or with its whole session.
                err = e
                if await self._check_session(grant.session):
                    err = LostError("lost", f"session {grant.session} ended", e.status)
        else:
            err = LostError("lost", f"session {grant.session} ended before the release")
        if grant.lost.is_set():
            log.debug("released lost grant %s: %s", grant.key, err)
            return
        grant.lost.set()
        raise LostError("lost", f"{family} {name!r} token {token} was lost: {err.message}") from err

    def _prefetch(
        self, reserve: Coroutine[Any, Any, tuple[int, int]]
    ) -> asyncio.Task[tuple[int, int]]:
        task = asyncio.create_task(reserve)
        self._prefetches.add(task)
        task.add_done_callback(self._prefetches.discard)
        return task

    # ------------------------------------------------------------ primitives

    def sequence(self, name: str, block: int = 1000, *, prefetch_at: float = 0.8) -> AsyncSequence:
        """The sequence ``name``, handing out ids from blocks of ``block``."""
        return AsyncSequence(self, name, block, prefetch_at=prefetch_at)

    def lock(
        self, name: str, *, data: str | None = None, timeout: float | None = None
    ) -> AsyncLock:
        """The lock ``name`` (``timeout``: the wait of its ``async with`` form)."""
        return AsyncLock(self, name, data=data, timeout=timeout)

    def semaphore(self, name: str, permits: int, *, timeout: float | None = None) -> AsyncSemaphore:
        """The semaphore ``name`` of ``permits`` permits."""
        return AsyncSemaphore(self, name, permits, timeout=timeout)

    def rwlock(self, name: str, *, timeout: float | None = None) -> AsyncRWLock:
        """The RW lock ``name``."""
        return AsyncRWLock(self, name, timeout=timeout)

    def election(
        self, name: str, value: str = "", *, timeout: float | None = None
    ) -> AsyncElection:
        """The election ``name``; ``value`` is published while leading."""
        return AsyncElection(self, name, value, timeout=timeout)

    async def reserve(self, name: str, size: int) -> range:
        """Reserve ``size`` consecutive ids of sequence ``name`` (one round trip)."""
        return range(*p.parse_block(await self._send(p.reserve_call(name, size))))

    async def state(self, family: str, name: str) -> dict[str, Any]:
        """Who holds ``family`` ``name``, who waits."""
        result: dict[str, Any] = await self._send(p.state_call(family, name))
        return result

    @overload
    def once(
        self, scope: str, key: str, payload: str, fn: OnceFn, *, timeout: float | None = None
    ) -> Awaitable[str]: ...

    @overload
    def once(
        self, scope: str, key: str, payload: str, fn: None = None, *, timeout: float | None = None
    ) -> Callable[[OnceFn], Callable[[], Awaitable[str]]]: ...

    def once(
        self,
        scope: str,
        key: str,
        payload: str,
        fn: OnceFn | None = None,
        *,
        timeout: float | None = None,
    ) -> Awaitable[str] | Callable[[OnceFn], Callable[[], Awaitable[str]]]:
        """Run ``fn`` (sync or async, returning a ``str``) exactly once for ``key``
        of ``scope`` across every process; see :meth:`bakery.Client.once`.

        ``await client.once(scope, key, payload, fn)``, or as a decorator:
        ``@client.once(scope, key, payload)`` over a function ``f`` makes
        ``await f()`` run it this way.
        """
        if fn is None:

            def decorate(f: OnceFn) -> Callable[[], Awaitable[str]]:
                @functools.wraps(f)
                async def run() -> str:
                    return await self._once(scope, key, payload, f, timeout)

                return run

            return decorate
        return self._once(scope, key, payload, fn, timeout)

    async def _once(
        self, scope: str, key: str, payload: str, fn: OnceFn, timeout: float | None
    ) -> str:
        claim = await self.claim(scope, key, payload, timeout=timeout)
        if not claim.claimed:
            return str(claim.result)
        try:
            result = fn()
            if inspect.isawaitable(result):
                result = await result
            if not isinstance(result, str):
                raise TypeError(f"a once function returns a str, not {type(result).__name__}")
        except BaseException as exc:
            try:
                await claim.fail(f"{type(exc).__name__}: {exc}")
            except BakeryError as e:
                log.warning("could not report the failure of %r/%r: %s", scope, key, e)
            raise
        return await claim.complete(result)

    async def claim(
        self, scope: str, key: str, payload: str, *, timeout: float | None = None
    ) -> AsyncClaim:
        """Claim ``key`` of ``scope``; see :meth:`bakery.Client.claim`."""
        try:
            got = await self._run(p.claim_op(scope, key, payload, timeout))
        except BakeryError:
            raise
        except BaseException:
            # Cancelled mid-claim: the key may be claimed in the session.
            session = self._session
            if session is not None and not self._closed:
                self._session_ended(session, "a claim was interrupted")
                self._spawn(self._abandon(session))
            raise
        if isinstance(got, p.Completed):
            return AsyncClaim(self, scope, key, None, got.result)
        return AsyncClaim(self, scope, key, got, None)

    async def once_state(self, scope: str, key: str) -> dict[str, Any]:
        """Where ``key`` of ``scope`` stands."""
        result: dict[str, Any] = await self._send(p.once_state_call(scope, key))
        return result

    async def _stream_lines(self, call: p.Call) -> AsyncIterator[str]:
        timeout = httpx.Timeout(self._timeout, read=None)
        async with self._http.stream(
            call.method, call.path, params=call.params, timeout=timeout
        ) as r:
            if r.status_code >= 400:
                raise p.error_from_response(r.status_code, await r.aread())
            async for line in r.aiter_lines():
                yield line


class AsyncClaim:
    """The answer to :meth:`AsyncClient.claim`; see :class:`bakery.Claim`."""

    def __init__(
        self,
        client: AsyncClient,
        scope: str,
        key: str,
        claimed: p.Claimed | None,
        result: str | None,
    ) -> None:
        self._client = client
        self.scope = scope
        self.key = key
        self._claimed = claimed
        #: The stored result, when the key was completed before (or by :meth:`complete`).
        self.result = result
        self._finished = False

    def __repr__(self) -> str:
        return f"<AsyncClaim {self.scope}/{self.key} claimed={self.claimed} result={self.result!r}>"

    @property
    def claimed(self) -> bool:
        """True if this caller must run the work, then complete or fail it."""
        return self._claimed is not None and not self._finished

    @property
    def attempt(self) -> int:
        """The claim's attempt: a fencing token for the work's writes."""
        if self._claimed is None:
            raise RuntimeError("the key was completed before: no attempt of this caller")
        return self._claimed.attempt

    async def _finish(self, outcome: str, *, complete: bool) -> dict[str, Any]:
        if not self.claimed or self._claimed is None:
            raise RuntimeError(f"{self!r}: nothing to finish")
        self._finished = True
        op = p.finish_op(self.scope, self.key, self._claimed, outcome, complete=complete)
        return await self._client._run(op)

    async def complete(self, result: str) -> str:
        """Store ``result`` for every later caller (:class:`LostError` if the claim was lost)."""
        state = await self._finish(result, complete=True)
        self.result = str(state.get("result", result))
        return self.result

    async def fail(self, error: str) -> None:
        """Report a failure: the key is released and the next claim runs it again."""
        await self._finish(error, complete=False)


class AsyncSequence:
    """Unique ids of sequence ``name`` from locally reserved blocks, increasing
    within this object; the next block is reserved by a background task once a
    block is ``prefetch_at`` used. ``await seq.next()``, or ``async for``."""

    def __init__(
        self, client: AsyncClient, name: str, block: int = 1000, *, prefetch_at: float = 0.8
    ) -> None:
        if block < 1:
            raise ValueError("block must be at least 1")
        if not 0.0 < prefetch_at <= 1.0:
            raise ValueError("prefetch_at must be in (0, 1]")
        self._client = client
        self.name = name
        self.block = block
        self._prefetch_at = prefetch_at
        self._it: Iterator[int] = iter(())
        self._tail: Iterator[int] | None = None
        self._pending: asyncio.Task[tuple[int, int]] | None = None
        self._mutex = asyncio.Lock()

    async def next(self) -> int:
        """The next id."""
        try:
            return next(self._it)
        except StopIteration:
            return await self._refill()

    def next_nowait(self) -> int | None:
        """The next id if one is reserved locally, else ``None`` (no await, no I/O;
        a prefetch it triggers runs in the background)."""
        v = next(self._it, None)
        if v is None and self._tail is not None and not self._mutex.locked():
            self._switch_to_tail()
            v = next(self._it, None)
        return v

    def _switch_to_tail(self) -> None:
        assert self._tail is not None
        self._it, self._tail = self._tail, None
        if self._pending is None:
            self._pending = self._client._prefetch(self._reserve())

    def __aiter__(self) -> AsyncSequence:
        return self

    async def __anext__(self) -> int:
        return await self.next()

    async def _reserve(self) -> tuple[int, int]:
        return p.parse_block(await self._client._send(p.reserve_call(self.name, self.block)))

    async def _refill(self) -> int:
        async with self._mutex:
            while True:
                v = next(self._it, None)
                if v is not None:
                    return v
                if self._tail is not None:
                    self._switch_to_tail()
                    continue
                pending, self._pending = self._pending, None
                block = await pending if pending is not None else await self._reserve()
                head, tail = p.split_block(*block, self._prefetch_at)
                self._it, self._tail = iter(head), iter(tail)


class _AsyncPrimitive:
    _family = "locks"

    def __init__(
        self, client: AsyncClient, name: str, extra: dict[str, Any], timeout: float | None
    ) -> None:
        self._client = client
        self.name = name
        self._extra = extra
        self.timeout = timeout
        self._grant: _Grant | None = None
        self._last_lost: asyncio.Event | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {'held' if self.held else 'not held'}>"

    async def acquire(self, timeout: float | None = None, *, blocking: bool = True) -> bool:
        """Wait for the grant, first come first served, up to ``timeout`` seconds
        (``None``: forever); cancelling the task withdraws the request. True if granted."""
        if self._grant is not None:
            if not self._client._is_lost(self._grant):
                raise RuntimeError(f"{self!r}: this object already holds a grant")
            grant, self._grant = self._grant, None
            await self._client._release(grant)  # quiet: its loss was reported
        op = (
            p.acquire_op(self._family, self.name, self._extra, timeout)
            if blocking
            else p.try_op(self._family, self.name, self._extra)
        )
        client, key = self._client, (self._family, self.name)
        seen = client._begin(key)
        try:
            got = await client._run(op)
            if got is not None:
                self._grant = client._register(self._family, self.name, *got)
                self._last_lost = self._grant.lost
        except BaseException as e:
            client._finish(key)
            if not isinstance(e, BakeryError) or e.kind == "unknown_outcome":
                # It may have been granted (cancelled mid-poll, connection
                # broken): give back what the session holds of this name that
                # no acquire of this client knows of.
                client._reconcile(key, seen)
            raise
        client._finish(key)
        return got is not None

    async def try_acquire(self) -> bool:
        """Take the grant only if it is free and nobody waits (never queues)."""
        return await self.acquire(blocking=False)

    async def release(self) -> None:
        """Give the grant back; raises :class:`LostError` if it had been lost and
        :attr:`lost` had not fired yet."""
        grant, self._grant = self._grant, None
        if grant is None:
            raise RuntimeError(f"{self!r}: release of a grant not held")
        await self._client._release(grant)

    async def _enter(self) -> None:
        if not await self.acquire(self.timeout):
            raise p.WaitTimeoutError(
                "timed_out", f"{self._family} {self.name!r} not granted in {self.timeout}s"
            )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._grant is not None:
            await self.release()

    @property
    def held(self) -> bool:
        """True while this object holds a grant not known lost."""
        return self._grant is not None and not self._client._is_lost(self._grant)

    @property
    def fencing_token(self) -> int:
        """The held grant's fencing token: send it with every write made under it."""
        if self._grant is None:
            raise RuntimeError(f"{self!r}: no grant held")
        return self._grant.key[2]

    @property
    def lost(self) -> asyncio.Event:
        """Set once the current (or last) grant is lost: stop working under it."""
        if self._last_lost is None:
            self._last_lost = asyncio.Event()
        return self._last_lost

    @property
    def is_lost(self) -> bool:
        """Whether the current (or last) grant is lost (sets :attr:`lost` if its
        session went a whole TTL without a keepalive getting through)."""
        if self._grant is not None:
            return self._client._is_lost(self._grant)
        return self._last_lost is not None and self._last_lost.is_set()


class AsyncLock(_AsyncPrimitive):
    """A fair, fenced lock (``async with client.lock("name") as lock``)."""

    _family = "locks"

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        data: str | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(client, name, {} if data is None else {"data": data}, timeout)

    async def __aenter__(self) -> AsyncLock:
        await self._enter()
        return self


class AsyncSemaphore(_AsyncPrimitive):
    """A counting semaphore of ``permits``; one object holds one permit."""

    _family = "semaphores"

    def __init__(
        self, client: AsyncClient, name: str, permits: int, *, timeout: float | None = None
    ) -> None:
        super().__init__(client, name, {"permits": permits}, timeout)
        self.permits = permits

    async def __aenter__(self) -> AsyncSemaphore:
        await self._enter()
        return self


class _AsyncRWSide(_AsyncPrimitive):
    _family = "rwlocks"

    def __init__(self, client: AsyncClient, name: str, mode: str, timeout: float | None) -> None:
        super().__init__(client, name, {"mode": mode}, timeout)
        self.mode = mode

    async def __aenter__(self) -> _AsyncRWSide:
        await self._enter()
        return self


class AsyncRWLock:
    """A read-write lock: ``async with rw.read`` / ``async with rw.write``."""

    def __init__(self, client: AsyncClient, name: str, *, timeout: float | None = None) -> None:
        self.name = name
        #: The read side: shared with other readers.
        self.read = _AsyncRWSide(client, name, "read", timeout)
        #: The write side: exclusive.
        self.write = _AsyncRWSide(client, name, "write", timeout)


class AsyncElection(_AsyncPrimitive):
    """A leader election; ``async with election`` campaigns, then resigns."""

    _family = "elections"

    def __init__(
        self, client: AsyncClient, name: str, value: str = "", *, timeout: float | None = None
    ) -> None:
        super().__init__(client, name, {"data": value}, timeout)
        self.value = value

    async def __aenter__(self) -> AsyncElection:
        await self._enter()
        return self

    async def campaign(self, timeout: float | None = None) -> bool:
        """Wait to lead (up to ``timeout`` seconds); True once leading."""
        return await self.acquire(timeout)

    async def resign(self) -> None:
        """Stop leading."""
        await self.release()

    @property
    def is_leader(self) -> bool:
        """True while this object leads."""
        return self.held

    @property
    def term(self) -> int:
        """The term of this object's leadership (its fencing token)."""
        return self.fencing_token

    async def leader(self) -> p.Leader:
        """The current leader, read from the store."""
        state = await self._client.state("elections", self.name)
        holders = state.get("holders") or []
        if not holders:
            return p.Leader(0, None, None)
        h = holders[0]
        return p.Leader(int(h.get("token") or 0), h.get("owner"), h.get("data"))

    async def observe(self, timeout: float | None = None) -> AsyncIterator[p.Leader]:
        """The leader now, then every change (for ``timeout`` seconds)."""
        parser = p.SseParser()
        async for line in self._client._stream_lines(p.observe_call(self.name, timeout)):
            event = parser.line(line)
            if event is not None:
                leader = p.leader_of(*event)
                if leader is not None:
                    yield leader
