"""Errors of the bakery client: every one carries the server's ``kind``."""

from __future__ import annotations

__all__ = [
    "KINDS",
    "BakeryError",
    "ConflictError",
    "CorruptError",
    "ExhaustedError",
    "ForbiddenError",
    "InternalError",
    "InvalidInputError",
    "LostError",
    "NotFoundError",
    "OnceFailedError",
    "UnauthorizedError",
    "UnavailableError",
    "UnknownOutcomeError",
    "error_for",
]

#: Every ``kind`` the server answers with (its ``Kind`` schema).
KINDS = (
    "invalid_input",
    "not_found",
    "unavailable",
    "unknown_outcome",
    "exhausted",
    "corrupt",
    "unauthorized",
    "forbidden",
    "lost",
    "conflict",
    "internal",
)


class BakeryError(Exception):
    """An error of a call to ``bakery serve``.

    Attributes:
        kind: the server's ``kind`` (one of :data:`KINDS`); for a transport
            failure, ``unavailable`` when the request never reached the server
            and ``unknown_outcome`` when it may have.
        status: the HTTP status, or ``None`` when no answer came back.
        message: what went wrong, for a person.
    """

    kind: str = "internal"

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        where = kind if status is None else f"{kind} ({status})"
        super().__init__(f"{where}: {message}")
        self.kind = kind
        self.status = status
        self.message = message
        #: Seconds the server asked to wait before a retry (``Retry-After``), if any.
        self.retry_after: float | None = None


class InvalidInputError(BakeryError):
    """The request is malformed: a bad name, count, size, TTL or field (400)."""


class NotFoundError(BakeryError):
    """No such session, grant, record or route (404)."""


class UnavailableError(BakeryError):
    """Nothing was done: the server or its store refused the call, or the
    connection was refused. Safe to retry (the client already did)."""


class UnknownOutcomeError(BakeryError):
    """The call may or may not have taken effect (a write whose answer never
    came back). The client never resends such a write."""


class ExhaustedError(BakeryError):
    """A sequence has no ids left (409)."""


class CorruptError(BakeryError):
    """A stored row could not be understood (500)."""


class UnauthorizedError(BakeryError):
    """No token, or one the server does not know (401)."""


class ForbiddenError(BakeryError):
    """The token may not do this to this name, or the session is another token's (403)."""


class LostError(BakeryError):
    """A grant or claim is no longer this client's: a waiter may hold it (409, or
    the session ended)."""


class ConflictError(BakeryError):
    """The request contradicts what is stored (409): a once key with another
    payload, a semaphore asked with another permit count, a stale fenced write."""


class OnceFailedError(ConflictError):
    """A once key whose failure was recorded: the server answers its claim
    ``failed`` instead of running it again (kind ``conflict``).

    Attributes:
        attempt: the attempt that failed, if the server said.
        error: the error it was failed with.
    """

    def __init__(
        self, message: str, *, attempt: int | None = None, error: str | None = None
    ) -> None:
        super().__init__("conflict", message)
        self.attempt = attempt
        self.error = error


class InternalError(BakeryError):
    """The server broke an invariant of its own, or answered something this
    client does not understand."""


_BY_KIND: dict[str, type[BakeryError]] = {
    "invalid_input": InvalidInputError,
    "not_found": NotFoundError,
    "unavailable": UnavailableError,
    "unknown_outcome": UnknownOutcomeError,
    "exhausted": ExhaustedError,
    "corrupt": CorruptError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "lost": LostError,
    "conflict": ConflictError,
    "internal": InternalError,
}


def error_for(kind: str, message: str, status: int | None = None) -> BakeryError:
    """The error of ``kind`` (its subclass when the kind is known)."""
    return _BY_KIND.get(kind, BakeryError)(kind, message, status)
