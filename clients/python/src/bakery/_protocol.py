"""The logic the sync and asyncio clients share, free of any I/O.

Each operation (acquire, claim, ...) is a generator that yields instructions
(:class:`Call`, :data:`NEED_SESSION`, :class:`SessionEnded`) and receives their
results; a driver (:mod:`bakery._sync` or :mod:`bakery._async`) carries them
out with its own transport. Error mapping and the retry rule live here too, so
both clients behave alike.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar
from urllib.parse import quote

import httpx

from ._errors import (
    BakeryError,
    InternalError,
    LostError,
    NotFoundError,
    OnceFailedError,
    UnavailableError,
    UnknownOutcomeError,
    error_for,
)

T = TypeVar("T")

#: The longest long poll the server accepts (``timeout_ms`` of acquire, ``wait_ms`` of claim).
MAX_WAIT_MS: Final = 60_000
#: Consecutive session replacements an operation tries before giving up.
MAX_SESSION_RENEWALS: Final = 3

Json = dict[str, Any]


@dataclass(frozen=True)
class Call:
    """One HTTP request and how it may be retried."""

    method: str
    path: str
    json: Json | None = None
    params: dict[str, str | int] | None = None
    #: Seconds to wait for the answer beyond the client's own deadline (long polls).
    wait: float = 0.0
    #: Resend after an unknown outcome (reads, reservations, keepalives).
    retry_unknown: bool = False
    #: Resend after a ``503 unavailable`` *answer* (connect refusals are always
    #: resent). False for release/complete/fail: the server takes the grant or
    #: claim out of the session before the store write, so a resend finds nothing.
    retry_unavailable_answer: bool = True


@dataclass(frozen=True)
class SessionEnded:
    """Instruction: the server said session ``session`` has ended."""

    session: str


@dataclass(frozen=True)
class CheckSession:
    """Instruction: a call of ``session`` answered ``404``; read the session
    (``GET /v1/sessions/{id}``) and, if the server no longer knows it, end it
    locally (every grant lost). Answers whether the session is gone."""

    session: str


@dataclass(frozen=True)
class ResetSession:
    """Instruction: a call of ``session`` may have taken something the client
    cannot tell (a claim of unknown outcome): close the session, so the server
    gives everything back, and mark every grant of it lost."""

    session: str


class _NeedSession:
    """Instruction: the id of the client's session (opened if needed)."""

    def __repr__(self) -> str:
        return "NEED_SESSION"


NEED_SESSION: Final = _NeedSession()

Instruction = Call | SessionEnded | CheckSession | ResetSession | _NeedSession
Op = Generator[Instruction, Any, T]


# ---------------------------------------------------------------- paths


def seg(name: str) -> str:
    """``name`` as one path segment (the server validates the name itself)."""
    return quote(name, safe="")


# ---------------------------------------------------------------- errors


def error_from_response(status: int, content: bytes, retry_after: str | None = None) -> BakeryError:
    """The error of an HTTP answer ``status`` with body ``content``."""
    kind: str | None = None
    message = ""
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("kind"), str):
        kind = body["kind"]
        message = str(body.get("message", ""))
    if kind is None:
        kind = {
            400: "invalid_input",
            401: "unauthorized",
            403: "forbidden",
            404: "not_found",
            409: "conflict",
            503: "unavailable",
        }.get(status, "internal")
        message = content.decode("utf-8", "replace").strip() or f"HTTP {status}"
    err = error_for(kind, message, status)
    if retry_after is not None and retry_after.strip().isdigit():
        err.retry_after = float(retry_after)
    return err


def error_from_transport(exc: httpx.HTTPError) -> BakeryError:
    """The error of a transport failure: ``unavailable`` when the request never
    reached the server, ``unknown_outcome`` when it may have."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        err: BakeryError = UnavailableError("unavailable", f"could not connect: {exc!r}")
    elif isinstance(exc, httpx.TransportError) and not isinstance(
        exc, httpx.UnsupportedProtocol | httpx.ProxyError | httpx.LocalProtocolError
    ):
        err = UnknownOutcomeError(
            "unknown_outcome", f"the request may have reached the server, no answer: {exc!r}"
        )
    else:
        err = InternalError("internal", f"the request could not be made: {exc!r}")
    err.__cause__ = exc
    return err


@dataclass
class RetryPolicy:
    """When a failed call is sent again: ``unavailable`` always (nothing was
    done), ``unknown_outcome`` only for calls marked safe to resend. Jittered
    exponential backoff from ``base`` to ``cap`` seconds, honouring ``Retry-After``.
    """

    retries: int = 5
    base: float = 0.05
    cap: float = 2.0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def delay(self, attempt: int, err: BakeryError, call: Call) -> float | None:
        """Seconds to wait before resending ``call`` after its ``attempt``-th
        failure ``err`` (0-based), or ``None`` to give up."""
        if attempt >= self.retries:
            return None
        if err.kind == "unavailable":
            if err.status is not None and not call.retry_unavailable_answer:
                return None
        elif not (err.kind == "unknown_outcome" and call.retry_unknown):
            return None
        backoff = min(self.cap, self.base * (2.0**attempt)) * (0.5 + self._rng.random() / 2)
        if err.retry_after is not None:
            backoff = max(backoff, min(err.retry_after, self.cap))
        return backoff


def decode(status: int, content: bytes) -> Any:
    """The JSON of a successful answer (``None`` for 204 or an empty body)."""
    if status == 204 or not content:
        return None
    try:
        return json.loads(content)
    except ValueError as e:
        raise InternalError("internal", f"the server answered {status} with no JSON: {e}") from e


# ---------------------------------------------------------------- sessions


def open_session_call(ttl: float) -> Call:
    """Open a session of ``ttl`` seconds (a lost answer leaves a session that expires)."""
    return Call("POST", "/v1/sessions", json={"ttl_ms": int(ttl * 1000)}, retry_unknown=True)


def keepalive_call(session: str) -> Call:
    """Keep ``session`` alive (idempotent; the driver bounds all its attempts
    together to a third of the TTL)."""
    return Call("POST", f"/v1/sessions/{seg(session)}/keepalive", retry_unknown=True)


def show_session_call(session: str) -> Call:
    """Read ``session`` and the grants it holds (``404``: it has ended)."""
    return Call("GET", f"/v1/sessions/{seg(session)}", retry_unknown=True)


def close_session_call(session: str) -> Call:
    """Close ``session``, releasing all it holds (idempotent)."""
    return Call("DELETE", f"/v1/sessions/{seg(session)}", retry_unknown=True)


GrantKey = tuple[str, str, int]


def lost_grants(view: Json, tracked: Iterable[GrantKey]) -> list[GrantKey]:
    """The grants of ``tracked`` that keepalive answer ``view`` shows lost: listed
    with ``held`` false, or not listed at all (``tracked`` must hold only grants
    registered before the keepalive was sent)."""
    held = {
        (str(g["family"]), str(g["name"]), int(g["token"])): bool(g["held"])
        for g in view.get("grants", [])
    }
    return [key for key in tracked if not held.get(key, False)]


# ---------------------------------------------------------------- sequences


def reserve_call(name: str, size: int) -> Call:
    """Reserve ``size`` ids of ``name``; resent after an unknown outcome (a
    block reserved by a lost call is never handed out: a gap, not a duplicate)."""
    return Call(
        "POST",
        f"/v1/sequences/{seg(name)}/reserve",
        params={"size": size},
        retry_unknown=True,
    )


def parse_block(body: Any) -> tuple[int, int]:
    """``(start, end)`` of a reserved block (end excluded)."""
    try:
        start, end = int(body["start"]), int(body["end"])
    except (KeyError, TypeError, ValueError) as e:
        raise InternalError("internal", f"unexpected reserve answer {body!r}") from e
    if end <= start:
        raise InternalError("internal", f"empty block {start}..{end}")
    return start, end


def split_block(start: int, end: int, prefetch_at: float) -> tuple[range, range]:
    """A block as two ranges: handing out the first triggers the prefetch of the
    next block when it runs out (``prefetch_at`` of the block used)."""
    mark = start + max(1, min(end - start, int((end - start) * prefetch_at)))
    return range(start, mark), range(mark, end)


# ---------------------------------------------------------------- locks

FAMILIES: Final = ("locks", "semaphores", "rwlocks", "elections")


def acquire_op(
    family: str,
    name: str,
    extra: Json,
    timeout: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> Op[tuple[str, int] | None]:
    """Wait for a grant up to ``timeout`` seconds (``None``: forever), repeating
    the server's long poll. Returns ``(session, token)``, or ``None`` when not
    granted in time. An acquire is never resent after an unknown outcome."""
    deadline = None if timeout is None else clock() + timeout
    renewals = 0
    while True:
        if deadline is None:
            wait_ms = MAX_WAIT_MS
        else:
            wait_ms = max(1, min(MAX_WAIT_MS, int((deadline - clock()) * 1000)))
        session = yield NEED_SESSION
        body = {"session": session, "timeout_ms": wait_ms, **extra}
        try:
            answer = yield Call(
                "POST", f"/v1/{family}/{seg(name)}/acquire", json=body, wait=wait_ms / 1000
            )
        except NotFoundError:
            # Acquire answers 404 only for a session that ended: nothing was taken.
            renewals += 1
            if renewals > MAX_SESSION_RENEWALS:
                raise
            yield SessionEnded(session)
            continue
        renewals = 0
        if answer.get("granted"):
            return session, _token(answer)
        if deadline is not None and clock() >= deadline:
            return None


def try_op(family: str, name: str, extra: Json) -> Op[tuple[str, int] | None]:
    """Take a grant only if it is free and nobody waits."""
    renewals = 0
    while True:
        session = yield NEED_SESSION
        try:
            answer = yield Call(
                "POST", f"/v1/{family}/{seg(name)}/try", json={"session": session, **extra}
            )
        except NotFoundError:
            renewals += 1
            if renewals > MAX_SESSION_RENEWALS:
                raise
            yield SessionEnded(session)
            continue
        if answer.get("granted"):
            return session, _token(answer)
        return None


def _token(answer: Json) -> int:
    token = answer.get("token")
    if not isinstance(token, int):
        raise InternalError("internal", f"granted without a token: {answer!r}")
    return token


def release_call(family: str, name: str, session: str, token: int) -> Call:
    """Give a grant back (never resent after an unknown outcome or a 503 answer)."""
    return Call(
        "POST",
        f"/v1/{family}/{seg(name)}/release",
        json={"session": session, "token": token},
        retry_unavailable_answer=False,
    )


def state_call(family: str, name: str) -> Call:
    """Who holds ``family`` ``name`` and who waits."""
    return Call("GET", f"/v1/{family}/{seg(name)}", retry_unknown=True)


@dataclass(frozen=True)
class Leader:
    """The leader of an election: ``term`` is its grant's fencing token (0:
    nobody leads), ``owner`` its session (``session ID``), ``value`` what it published."""

    term: int
    owner: str | None
    value: str | None

    @classmethod
    def parse(cls, data: Json) -> Leader:
        """From a ``LeaderEvent``."""
        return cls(int(data.get("term", 0)), data.get("owner"), data.get("value"))


def observe_call(name: str, timeout: float | None) -> Call:
    """The SSE stream of election ``name``'s leaders."""
    params: dict[str, str | int] = {}
    if timeout is not None:
        params["timeout_ms"] = max(1, int(timeout * 1000))
    return Call("GET", f"/v1/elections/{seg(name)}/observe", params=params)


class SseParser:
    """Server-Sent Events, one line at a time: :meth:`line` returns the
    ``(event, data)`` of a finished event."""

    def __init__(self) -> None:
        self._event = "message"
        self._data: list[str] = []

    def line(self, line: str) -> tuple[str, str] | None:
        """Feed one line (without its end of line)."""
        if not line:
            if not self._data:
                self._event = "message"
                return None
            event, data = self._event, "\n".join(self._data)
            self._event, self._data = "message", []
            return event, data
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


def leader_of(event: str, data: str) -> Leader | None:
    """The leader an SSE event announces (``None`` for other events); an
    ``error`` event raises :class:`UnavailableError`."""
    if event == "leader":
        return Leader.parse(json.loads(data))
    if event == "error":
        raise UnavailableError("unavailable", f"observing failed on the server: {data}")
    return None


# ---------------------------------------------------------------- once


@dataclass(frozen=True)
class Claimed:
    """This caller claimed the key: run it, then complete or fail ``attempt``."""

    session: str
    attempt: int


@dataclass(frozen=True)
class Completed:
    """The key was done before: its stored ``result``."""

    result: str


class OnceTimeoutError(BakeryError, TimeoutError):
    """Another worker still ran the key when the caller's timeout passed."""


class WaitTimeoutError(BakeryError, TimeoutError):
    """A grant was not given within the caller's timeout (raised by the
    scoped forms; ``acquire`` returns ``False`` instead)."""


def claim_op(
    scope: str,
    key: str,
    payload: str,
    timeout: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> Op[Claimed | Completed]:
    """Claim ``key``: returns :class:`Claimed` or :class:`Completed`, waiting
    while another worker runs it (up to ``timeout`` seconds; ``None``: forever)."""
    deadline = None if timeout is None else clock() + timeout
    renewals = 0
    path = f"/v1/once/{seg(scope)}/{seg(key)}/claim"
    while True:
        if deadline is None:
            wait_ms = MAX_WAIT_MS
        else:
            wait_ms = max(0, min(MAX_WAIT_MS, int((deadline - clock()) * 1000)))
        session = yield NEED_SESSION
        body = {"session": session, "payload": payload, "wait_ms": wait_ms}
        try:
            state = yield Call("POST", path, json=body, wait=wait_ms / 1000)
        except UnknownOutcomeError:
            # It may have claimed the key in this session, and a session's
            # claims cannot be read back: give the session up (the server
            # releases the claim with it) and tell the caller.
            yield ResetSession(session)
            raise
        except NotFoundError:
            renewals += 1
            if renewals > MAX_SESSION_RENEWALS:
                raise
            yield SessionEnded(session)
            continue
        renewals = 0
        status = state.get("status")
        if status == "claimed":
            return Claimed(session, int(state["attempt"]))
        if status == "completed":
            return Completed(str(state.get("result") or ""))
        if status == "failed":
            attempt = state.get("attempt")
            raise OnceFailedError(
                f"key {key!r} of {scope!r} failed before and the failure was recorded: "
                f"{state.get('error')}",
                attempt=attempt if isinstance(attempt, int) else None,
                error=state.get("error"),
            )
        if status != "in_progress":
            raise InternalError("internal", f"unexpected claim answer {state!r}")
        if deadline is not None and clock() >= deadline:
            raise OnceTimeoutError(
                "timed_out", f"key {key!r} of {scope!r} is still run by another worker"
            )


def finish_op(scope: str, key: str, claimed: Claimed, outcome: str, *, complete: bool) -> Op[Json]:
    """Complete (or fail) a claim with ``outcome``. Never resent: an unknown
    outcome reaches the caller; a session that ended lost the claim."""
    verb = "complete" if complete else "fail"
    body = {"session": claimed.session, "attempt": claimed.attempt, "outcome": outcome}
    try:
        state: Json = yield Call(
            "POST",
            f"/v1/once/{seg(scope)}/{seg(key)}/{verb}",
            json=body,
            retry_unavailable_answer=False,
        )
    except NotFoundError as e:
        # The claim is not there; whether the whole session ended, only a read says.
        gone = yield CheckSession(claimed.session)
        why = "its session ended" if gone else e.message
        raise LostError(
            "lost", f"the claim of {key!r} of {scope!r} was lost: {why}", e.status
        ) from e
    return state


def once_state_call(scope: str, key: str) -> Call:
    """Where a key stands."""
    return Call("GET", f"/v1/once/{seg(scope)}/{seg(key)}", retry_unknown=True)
