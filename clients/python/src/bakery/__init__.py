"""bakery: the Python client of ``bakery serve``.

Unique increasing ids (:class:`Sequence`), fair fenced locks (:class:`Lock`,
:class:`Semaphore`, :class:`RWLock`, :class:`Election`) and exactly-once
processing (:meth:`Client.once`), blocking (:class:`Client`) or asyncio
(:class:`AsyncClient`). Logs to the ``bakery`` logger.
"""

from ._async import (
    AsyncClaim,
    AsyncClient,
    AsyncElection,
    AsyncLock,
    AsyncRWLock,
    AsyncSemaphore,
    AsyncSequence,
)
from ._errors import (
    KINDS,
    BakeryError,
    ConflictError,
    CorruptError,
    ExhaustedError,
    ForbiddenError,
    InternalError,
    InvalidInputError,
    LostError,
    NotFoundError,
    OnceFailedError,
    UnauthorizedError,
    UnavailableError,
    UnknownOutcomeError,
)
from ._protocol import Leader, OnceTimeoutError, RetryPolicy, WaitTimeoutError
from ._sync import Claim, Client, Election, Lock, RWLock, Semaphore, Sequence

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "AsyncClaim",
    "AsyncClient",
    "AsyncElection",
    "AsyncLock",
    "AsyncRWLock",
    "AsyncSemaphore",
    "AsyncSequence",
    "BakeryError",
    "Claim",
    "Client",
    "ConflictError",
    "CorruptError",
    "Election",
    "ExhaustedError",
    "ForbiddenError",
    "InternalError",
    "InvalidInputError",
    "Leader",
    "Lock",
    "LostError",
    "NotFoundError",
    "OnceFailedError",
    "OnceTimeoutError",
    "RWLock",
    "RetryPolicy",
    "Semaphore",
    "Sequence",
    "UnauthorizedError",
    "UnavailableError",
    "UnknownOutcomeError",
    "WaitTimeoutError",
]
