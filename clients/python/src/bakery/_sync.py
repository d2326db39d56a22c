"""The blocking client: :class:`Client` and its primitives."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar, overload

import httpx

from . import _protocol as p
from ._errors import BakeryError, LostError, NotFoundError, UnknownOutcomeError

log = logging.getLogger("bakery")

T = TypeVar("T")

_DEFAULT_URL = "http://127.0.0.1:7878"


class _Grant:
    """A grant the client's session holds."""

    __slots__ = ("given_back", "key", "lost", "session")

    def __init__(self, key: p.GrantKey, session: str, lost: threading.Event) -> None:
        self.key = key
        self.session = session
        self.lost = lost
        #: Released with the whole session by closing the client.
        self.given_back = False


class Client:
    """A client of ``bakery serve``: one HTTP connection pool, one session
    (opened on first need, kept alive in a background thread every TTL/3).

    Thread-safe. Use it as a context manager, or call :meth:`close`: closing
    ends the session, which releases every grant it holds at once.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:7878``.
        token: a bearer token, when the server has a tokens file.
        session_ttl: seconds the session lives without a keepalive (1 to 3600).
        timeout: seconds every call may take (long polls get their wait on top).
        retries: how many times a call that did nothing (``unavailable``) is resent.
        http: an ``httpx.Client`` to use instead of the client's own.
    """

    def __init__(
        self,
        base_url: str = _DEFAULT_URL,
        token: str | None = None,
        *,
        session_ttl: float = 10.0,
        timeout: float = 10.0,
        retries: int = 5,
        http: httpx.Client | None = None,
    ) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = http or httpx.Client(base_url=base_url, headers=headers, timeout=timeout)
        self._timeout = timeout
        self._policy = p.RetryPolicy(retries=retries)
        self._ttl = session_ttl
        self._open_lock = threading.Lock()  # one session opening at a time
        self._lock = threading.Lock()  # session id, grants
        self._session: str | None = None
        self._last_ok = 0.0
        self._grants: dict[p.GrantKey, _Grant] = {}
        # Acquires in flight per (family, name), and how many ever started: a
        # clean-up after an acquire of unknown outcome leaves a grant it does
        # not know alone while another acquire of that name could be getting it.
        self._inflight: dict[tuple[str, str], int] = {}
        self._started: dict[tuple[str, str], int] = {}
        self._keeper: threading.Thread | None = None
        # Fires every grant's `lost` at last successful keepalive + TTL, whatever
        # request is in flight then.
        self._expiry: threading.Timer | None = None
        self._stop = threading.Event()
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the session (releasing every grant it holds) and the connections."""
        with self._open_lock:
            if self._closed:
                return
            self._closed = True
            with self._lock:
                session, self._session = self._session, None
                for grant in self._grants.values():
                    grant.given_back = True
                self._grants.clear()
                if self._expiry is not None:
                    self._expiry.cancel()
        self._stop.set()
        if self._keeper is not None and self._keeper is not threading.current_thread():
            # A keepalive takes at most a third of the TTL, all its attempts together.
            self._keeper.join(self._ttl / 3 + 1.0)
            if self._keeper.is_alive():
                log.warning("the keepalive thread did not stop in time")
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        try:
            if session is not None:
                try:
                    self._send(p.close_session_call(session))
                except NotFoundError:
                    log.debug("session %s had already ended", session)
        finally:
            self._http.close()

    @property
    def session_id(self) -> str | None:
        """The id of the client's session, if one is open."""
        return self._session

    def reset_session(self) -> None:
        """Close the current session, giving back everything it holds (its grants'
        ``lost`` fire); the next call opens a new one. The remedy after an
        :class:`UnknownOutcomeError` from an acquire or claim, whose grant may be
        held by the session without this client knowing."""
        with self._open_lock:
            session = self._session
            if session is None:
                return
            self._session_ended(session, "reset by the caller")
        self._abandon(session)

    # ------------------------------------------------------------ transport

    def _send(self, call: p.Call, deadline: float | None = None) -> Any:
        """Send ``call``, resending it as the retry policy allows; with a
        ``deadline`` (a ``time.monotonic()`` instant), every attempt and every
        wait between them ends by then, and closing the client stops it."""
        attempt = 0
        while True:
            timeout = self._timeout + call.wait
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    raise UnknownOutcomeError("unknown_outcome", "no answer before the deadline")
            try:
                r = self._http.request(
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
            if deadline is None:
                time.sleep(delay)
            elif time.monotonic() + delay >= deadline or self._stop.wait(delay):
                raise err
            attempt += 1

    def _run(self, op: p.Op[T]) -> T:
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
                    value = self._send(instr)
                elif isinstance(instr, p.SessionEnded):
                    self._session_ended(instr.session, "the server says it has ended")
                elif isinstance(instr, p.CheckSession):
                    value = self._check_session(instr.session)
                elif isinstance(instr, p.ResetSession):
                    self._session_ended(instr.session, "a call of unknown outcome")
                    self._abandon(instr.session)
                else:
                    value = self._session_id()
            except BakeryError as e:
                exc = e

    # ------------------------------------------------------------ session

    def _session_id(self) -> str:
        with self._open_lock:
            if self._closed:
                raise RuntimeError("the bakery client is closed")
            if self._session is not None:
                return self._session
            sent = time.monotonic()
            view = self._send(p.open_session_call(self._ttl))
            session = str(view["id"])
            with self._lock:
                self._session = session
                self._last_ok = sent
                self._arm_expiry(session, sent)
            log.debug("opened session %s (ttl %.1fs)", session, self._ttl)
            if self._keeper is None:
                self._keeper = threading.Thread(
                    target=self._keep_alive, name="bakery-keepalive", daemon=True
                )
                self._keeper.start()
            return session

    def _session_ended(self, session: str, why: str) -> None:
        """Session ``session`` is gone: every grant it held is lost."""
        with self._lock:
            if self._session == session:
                self._session = None
            lost = [g for g in self._grants.values() if g.session == session]
            for g in lost:
                del self._grants[g.key]
        for g in lost:
            log.warning("grant %s lost: session %s ended (%s)", g.key, session, why)
            g.lost.set()

    def _arm_expiry(self, session: str, last_ok: float) -> None:
        """(Under ``_lock``.) End ``session`` at ``last_ok`` + TTL unless a
        keepalive gets through before."""
        if self._expiry is not None:
            self._expiry.cancel()
        if self._closed:
            return
        delay = max(0.0, last_ok + self._ttl - time.monotonic())
        self._expiry = threading.Timer(delay, self._expire, (session, last_ok))
        self._expiry.name = "bakery-expiry"
        self._expiry.daemon = True
        self._expiry.start()

    def _expire(self, session: str, last_ok: float) -> bool:
        """End ``session`` if no keepalive got through since ``last_ok`` and a
        TTL has passed since: the server may have given everything away."""
        with self._lock:
            due = (
                self._session == session
                and self._last_ok == last_ok
                and time.monotonic() >= last_ok + self._ttl
            )
        if not due:
            return False
        self._session_ended(session, "no keepalive answered within its TTL")
        if threading.current_thread() is self._expiry:
            self._abandon(session)
        else:
            threading.Thread(
                target=self._abandon, args=(session,), name="bakery-abandon", daemon=True
            ).start()
        return True

    def _is_lost(self, grant: _Grant) -> bool:
        """Whether ``grant`` is lost, firing its ``lost`` if its session's TTL
        has passed since the last keepalive that got through."""
        if grant.lost.is_set():
            return True
        with self._lock:
            session, last_ok = self._session, self._last_ok
        if grant.session == session and time.monotonic() >= last_ok + self._ttl:
            self._expire(session, last_ok)
        return grant.lost.is_set()

    def _keep_alive(self) -> None:
        every = self._ttl / 3
        next_at = time.monotonic() + every
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            with self._lock:
                session = self._session
                before = [k for k, g in self._grants.items() if g.session == session]
            sent = time.monotonic()
            next_at = sent + every
            if session is None:
                continue
            try:
                # Every attempt together within a third of the TTL: the timer
                # ends the session at its TTL whatever this request does.
                view = self._send(p.keepalive_call(session), deadline=sent + every)
            except NotFoundError:
                self._session_ended(session, "keepalive answered not_found")
                continue
            except BakeryError as e:
                log.warning("keepalive of session %s failed: %s", session, e)
                continue
            except RuntimeError:
                if self._stop.is_set():
                    return  # the client closed its connections under the request
                raise
            lost = p.lost_grants(view, before)
            with self._lock:
                if self._session == session and sent > self._last_ok:
                    self._last_ok = sent
                    self._arm_expiry(session, sent)
                grants = [self._grants.pop(k) for k in lost if k in self._grants]
            for g in grants:
                log.warning("grant %s lost: the server no longer holds it", g.key)
                g.lost.set()

    def _check_session(self, session: str) -> bool:
        """After a ``404`` on a call of ``session``: read it; if the server no
        longer knows it, end it here (every grant lost). True if it is gone."""
        try:
            self._send(p.show_session_call(session))
        except NotFoundError:
            self._session_ended(session, "the server no longer knows it")
            return True
        except BakeryError as e:
            log.warning("could not read session %s: %s", session, e)
        return False

    def _begin(self, key: tuple[str, str]) -> int:
        """An acquire of ``key`` starts: returns its number."""
        with self._lock:
            self._inflight[key] = self._inflight.get(key, 0) + 1
            self._started[key] = self._started.get(key, 0) + 1
            return self._started[key]

    def _finish(self, key: tuple[str, str]) -> None:
        with self._lock:
            left = self._inflight.get(key, 0) - 1
            if left > 0:
                self._inflight[key] = left
            else:
                self._inflight.pop(key, None)

    def _reconcile(self, key: tuple[str, str], seen: int) -> None:
        """After an acquire of ``key`` (number ``seen``) of unknown outcome, in
        the background: release what the session holds of ``key`` unknown here."""
        with self._lock:
            session = self._session
        if session is None or self._closed:
            return
        threading.Thread(
            target=self._clean_up, args=(session, key, seen), name="bakery-cleanup", daemon=True
        ).start()

    def _clean_up(self, session: str, key: tuple[str, str], seen: int) -> None:
        family, name = key
        try:
            view = self._send(p.show_session_call(session))
        except NotFoundError:
            self._session_ended(session, "the server no longer knows it")
            return
        except (BakeryError, RuntimeError) as e:
            log.warning("could not read session %s to clean up %s: %s", session, key, e)
            return
        for g in view.get("grants", []):
            if (g.get("family"), g.get("name")) != key:
                continue
            token = int(g["token"])
            with self._lock:
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
                self._send(p.release_call(family, name, session, token))
            except (BakeryError, RuntimeError) as e:
                log.warning("could not release %s %r token %d: %s", family, name, token, e)

    def _abandon(self, session: str) -> None:
        """Close a session given up locally, so whatever it still holds is freed now."""
        try:
            self._send(p.close_session_call(session))
        except NotFoundError:
            pass  # it had ended on the server too: nothing to free
        except (BakeryError, RuntimeError) as e:  # RuntimeError: the client closed
            log.warning("closing abandoned session %s failed (it expires): %s", session, e)

    def _register(self, family: str, name: str, session: str, token: int) -> _Grant:
        grant = _Grant((family, name, token), session, threading.Event())
        with self._lock:
            alive = self._session == session
            if alive:
                self._grants[grant.key] = grant
        if not alive:
            log.warning("grant %s lost: its session ended as it was granted", grant.key)
            grant.lost.set()
        return grant

    def _release(self, grant: _Grant) -> None:
        with self._lock:
            self._grants.pop(grant.key, None)
            alive = self._session == grant.session
        family, name, token = grant.key
        if grant.given_back:
            return
        if alive:
            try:
                self._send(p.release_call(family, name, grant.session, token))
                return
            except LostError as e:
                err: BakeryError = e
            except NotFoundError as e:
                # The grant is not there: lost alone, or with its whole session.
                err = e
                if self._check_session(grant.session):
                    err = LostError("lost", f"session {grant.session} ended", e.status)
        else:
            err = LostError("lost", f"session {grant.session} ended before the release")
        if grant.lost.is_set():
            log.debug("released lost grant %s: %s", grant.key, err)
            return
        grant.lost.set()
        raise LostError("lost", f"{family} {name!r} token {token} was lost: {err.message}") from err

    def _prefetch(self, fn: Callable[[], T]) -> Future[T]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bakery-seq")
            return self._executor.submit(fn)

    # ------------------------------------------------------------ primitives

    def sequence(self, name: str, block: int = 1000, *, prefetch_at: float = 0.8) -> Sequence:
        """The sequence ``name``, handing out ids from blocks of ``block``."""
        return Sequence(self, name, block, prefetch_at=prefetch_at)

    def lock(self, name: str, *, data: str | None = None, timeout: float | None = None) -> Lock:
        """The lock ``name`` (``timeout``: the wait of its ``with`` form)."""
        return Lock(self, name, data=data, timeout=timeout)

    def semaphore(self, name: str, permits: int, *, timeout: float | None = None) -> Semaphore:
        """The semaphore ``name`` of ``permits`` permits."""
        return Semaphore(self, name, permits, timeout=timeout)

    def rwlock(self, name: str, *, timeout: float | None = None) -> RWLock:
        """The RW lock ``name``."""
        return RWLock(self, name, timeout=timeout)

    def election(self, name: str, value: str = "", *, timeout: float | None = None) -> Election:
        """The election ``name``; ``value`` is published while leading."""
        return Election(self, name, value, timeout=timeout)

    def reserve(self, name: str, size: int) -> range:
        """Reserve ``size`` consecutive ids of sequence ``name`` (one round trip)."""
        return range(*p.parse_block(self._send(p.reserve_call(name, size))))

    def state(self, family: str, name: str) -> dict[str, Any]:
        """Who holds ``family`` (``locks``, ``semaphores``, ...) ``name``, who waits."""
        result: dict[str, Any] = self._send(p.state_call(family, name))
        return result

    @overload
    def once(
        self,
        scope: str,
        key: str,
        payload: str,
        fn: Callable[[], str],
        *,
        timeout: float | None = None,
    ) -> str: ...

    @overload
    def once(
        self,
        scope: str,
        key: str,
        payload: str,
        fn: None = None,
        *,
        timeout: float | None = None,
    ) -> Callable[[Callable[[], str]], Callable[[], str]]: ...

    def once(
        self,
        scope: str,
        key: str,
        payload: str,
        fn: Callable[[], str] | None = None,
        *,
        timeout: float | None = None,
    ) -> str | Callable[[Callable[[], str]], Callable[[], str]]:
        """Run ``fn`` exactly once for ``key`` of ``scope`` across every process.

        Claims the key: if claimed, runs ``fn`` and completes the key with its
        result (a ``str``); if ``fn`` raises, fails the key (the next caller
        runs it again) and re-raises. If the key was completed before, returns
        the stored result without running ``fn``; while another worker runs it,
        waits (up to ``timeout`` seconds, ``None``: forever).

        Without ``fn``, returns a decorator: ``@client.once(scope, key, payload)``
        turns a function into one that, when called, runs it this way.
        """
        if fn is None:

            def decorate(f: Callable[[], str]) -> Callable[[], str]:
                @functools.wraps(f)
                def run() -> str:
                    return self.once(scope, key, payload, f, timeout=timeout)

                return run

            return decorate
        claim = self.claim(scope, key, payload, timeout=timeout)
        if not claim.claimed:
            return str(claim.result)
        try:
            result = fn()
            if not isinstance(result, str):
                raise TypeError(f"a once function returns a str, not {type(result).__name__}")
        except BaseException as exc:
            try:
                claim.fail(f"{type(exc).__name__}: {exc}")
            except BakeryError as e:
                log.warning("could not report the failure of %r/%r: %s", scope, key, e)
            raise
        return claim.complete(result)

    def claim(self, scope: str, key: str, payload: str, *, timeout: float | None = None) -> Claim:
        """Claim ``key`` of ``scope`` (the steps :meth:`once` takes, for a caller
        that runs the work itself): a :class:`Claim` that is either ``claimed``
        (do the work, fencing its writes with ``attempt``, then ``complete`` or
        ``fail`` it) or carries the ``result`` stored before. Waits while another
        worker runs the key (``OnceTimeoutError`` past ``timeout``)."""
        try:
            got = self._run(p.claim_op(scope, key, payload, timeout))
        except BakeryError:
            raise
        except BaseException:
            # Interrupted mid-claim: the key may be claimed in the session.
            with self._lock:
                session = self._session
            if session is not None:
                self._session_ended(session, "a claim was interrupted")
                threading.Thread(target=self._abandon, args=(session,), daemon=True).start()
            raise
        if isinstance(got, p.Completed):
            return Claim(self, scope, key, None, got.result)
        return Claim(self, scope, key, got, None)

    def once_state(self, scope: str, key: str) -> dict[str, Any]:
        """Where ``key`` of ``scope`` stands (``status``, ``attempt``, ``result``, ``error``)."""
        result: dict[str, Any] = self._send(p.once_state_call(scope, key))
        return result

    def _stream_lines(self, call: p.Call) -> Iterator[str]:
        timeout = httpx.Timeout(self._timeout, read=None)
        with self._http.stream(call.method, call.path, params=call.params, timeout=timeout) as r:
            if r.status_code >= 400:
                raise p.error_from_response(r.status_code, r.read())
            yield from r.iter_lines()


class Claim:
    """The answer to :meth:`Client.claim`."""

    def __init__(
        self,
        client: Client,
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
        return f"<Claim {self.scope}/{self.key} claimed={self.claimed} result={self.result!r}>"

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

    def _finish(self, outcome: str, *, complete: bool) -> dict[str, Any]:
        if not self.claimed or self._claimed is None:
            raise RuntimeError(f"{self!r}: nothing to finish")
        self._finished = True
        op = p.finish_op(self.scope, self.key, self._claimed, outcome, complete=complete)
        return self._client._run(op)

    def complete(self, result: str) -> str:
        """Store ``result`` for every later caller; raises :class:`LostError` if the
        claim was lost (its session ended, or another worker took over)."""
        state = self._finish(result, complete=True)
        self.result = str(state.get("result", result))
        return self.result

    def fail(self, error: str) -> None:
        """Report a failure: the key is released and the next claim runs it again."""
        self._finish(error, complete=False)


class Sequence:
    """Unique ids of sequence ``name``, increasing within this object, handed
    out from blocks reserved locally; when a block is ``prefetch_at`` used the
    next one is reserved in the background. Thread-safe; ``next()`` takes no
    lock unless a block ends. Unused ids of a block are a gap, never a duplicate.

    It is an iterator too: ``for id in seq``.
    """

    def __init__(
        self, client: Client, name: str, block: int = 1000, *, prefetch_at: float = 0.8
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
        self._pending: Future[tuple[int, int]] | None = None
        self._mutex = threading.Lock()

    def next(self) -> int:
        """The next id."""
        try:
            return next(self._it)
        except StopIteration:
            return self._refill()

    __next__ = next

    def __iter__(self) -> Sequence:
        return self

    def _reserve(self) -> tuple[int, int]:
        return p.parse_block(self._client._send(p.reserve_call(self.name, self.block)))

    def _refill(self) -> int:
        with self._mutex:
            while True:
                v = next(self._it, None)  # another thread may have refilled
                if v is not None:
                    return v
                if self._tail is not None:
                    self._it, self._tail = self._tail, None
                    if self._pending is None:
                        self._pending = self._client._prefetch(self._reserve)
                    continue
                pending, self._pending = self._pending, None
                block = pending.result() if pending is not None else self._reserve()
                head, tail = p.split_block(*block, self._prefetch_at)
                self._it, self._tail = iter(head), iter(tail)


class _Primitive:
    """One grant at a time of a member of the lock family."""

    _family = "locks"

    def __init__(
        self, client: Client, name: str, extra: dict[str, Any], timeout: float | None
    ) -> None:
        self._client = client
        self.name = name
        self._extra = extra
        self.timeout = timeout
        self._grant: _Grant | None = None
        self._last_lost = threading.Event()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {'held' if self.held else 'not held'}>"

    def acquire(self, timeout: float | None = None, *, blocking: bool = True) -> bool:
        """Wait for the grant, first come first served, up to ``timeout`` seconds
        (``None``: forever). ``blocking=False``: :meth:`try_acquire`. True if granted."""
        if self._grant is not None:
            if not self._client._is_lost(self._grant):
                raise RuntimeError(f"{self!r}: this object already holds a grant")
            grant, self._grant = self._grant, None
            self._client._release(grant)  # quiet: its loss was reported
        op = (
            p.acquire_op(self._family, self.name, self._extra, timeout)
            if blocking
            else p.try_op(self._family, self.name, self._extra)
        )
        client, key = self._client, (self._family, self.name)
        seen = client._begin(key)
        try:
            got = client._run(op)
            if got is not None:
                self._grant = client._register(self._family, self.name, *got)
                self._last_lost = self._grant.lost
        except BaseException as e:
            client._finish(key)
            if not isinstance(e, BakeryError) or e.kind == "unknown_outcome":
                # It may have been granted: give back what the session holds
                # of this name that no acquire of this client knows of.
                client._reconcile(key, seen)
            raise
        client._finish(key)
        return got is not None

    def try_acquire(self) -> bool:
        """Take the grant only if it is free and nobody waits (never queues)."""
        return self.acquire(blocking=False)

    def release(self) -> None:
        """Give the grant back (the next waiter is served in the same write).

        Raises :class:`LostError` if the grant had been lost and :attr:`lost`
        had not fired yet (whatever was done under it may have overlapped).
        """
        grant, self._grant = self._grant, None
        if grant is None:
            raise RuntimeError(f"{self!r}: release of a grant not held")
        self._client._release(grant)

    def __enter__(self) -> _Primitive:
        if not self.acquire(self.timeout):
            raise p.WaitTimeoutError(
                "timed_out", f"{self._family} {self.name!r} not granted in {self.timeout}s"
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._grant is not None:
            self.release()

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
    def lost(self) -> threading.Event:
        """Set once the current (or last) grant is lost: stop working under it."""
        return self._last_lost

    @property
    def is_lost(self) -> bool:
        """Whether the current (or last) grant is lost (sets :attr:`lost` if its
        session went a whole TTL without a keepalive getting through)."""
        if self._grant is not None:
            return self._client._is_lost(self._grant)
        return self._last_lost.is_set()


class Lock(_Primitive):
    """A fair, fenced lock: one holder at a time, served in order.

    ``with client.lock("name") as lock: ... lock.fencing_token ... lock.lost``
    """

    _family = "locks"

    def __init__(
        self, client: Client, name: str, *, data: str | None = None, timeout: float | None = None
    ) -> None:
        super().__init__(client, name, {} if data is None else {"data": data}, timeout)

    def __enter__(self) -> Lock:
        super().__enter__()
        return self


class Semaphore(_Primitive):
    """A counting semaphore: up to ``permits`` holders at once (every caller must
    give the same number). One object holds one permit."""

    _family = "semaphores"

    def __init__(
        self, client: Client, name: str, permits: int, *, timeout: float | None = None
    ) -> None:
        super().__init__(client, name, {"permits": permits}, timeout)
        self.permits = permits

    def __enter__(self) -> Semaphore:
        super().__enter__()
        return self


class _RWSide(_Primitive):
    _family = "rwlocks"

    def __init__(self, client: Client, name: str, mode: str, timeout: float | None) -> None:
        super().__init__(client, name, {"mode": mode}, timeout)
        self.mode = mode

    def __enter__(self) -> _RWSide:
        super().__enter__()
        return self


class RWLock:
    """A read-write lock: many readers or one writer (writers are not starved).

    ``with rw.read: ...`` / ``with rw.write: ...``; each side holds one grant;
    make another :class:`RWLock` for another concurrent reader in this process.
    """

    def __init__(self, client: Client, name: str, *, timeout: float | None = None) -> None:
        self.name = name
        #: The read side: shared with other readers.
        self.read = _RWSide(client, name, "read", timeout)
        #: The write side: exclusive.
        self.write = _RWSide(client, name, "write", timeout)


class Election(_Primitive):
    """A leader election: the holder leads and publishes ``value``; its term is
    its fencing token. ``with election: ...`` campaigns, then resigns."""

    _family = "elections"

    def __init__(
        self, client: Client, name: str, value: str = "", *, timeout: float | None = None
    ) -> None:
        super().__init__(client, name, {"data": value}, timeout)
        self.value = value

    def __enter__(self) -> Election:
        super().__enter__()
        return self

    def campaign(self, timeout: float | None = None) -> bool:
        """Wait to lead (up to ``timeout`` seconds); True once leading."""
        return self.acquire(timeout)

    def resign(self) -> None:
        """Stop leading."""
        self.release()

    @property
    def is_leader(self) -> bool:
        """True while this object leads."""
        return self.held

    @property
    def term(self) -> int:
        """The term of this object's leadership (its fencing token)."""
        return self.fencing_token

    def leader(self) -> p.Leader:
        """The current leader, read from the store."""
        state = self._client.state("elections", self.name)
        holders = state.get("holders") or []
        if not holders:
            return p.Leader(0, None, None)
        h = holders[0]
        return p.Leader(int(h.get("token") or 0), h.get("owner"), h.get("data"))

    def observe(self, timeout: float | None = None) -> Iterator[p.Leader]:
        """The leader now, then every change (for ``timeout`` seconds, default the
        server's 10 minutes; iterate again to follow longer)."""
        parser = p.SseParser()
        for line in self._client._stream_lines(p.observe_call(self.name, timeout)):
            event = parser.line(line)
            if event is not None:
                leader = p.leader_of(*event)
                if leader is not None:
                    yield leader
