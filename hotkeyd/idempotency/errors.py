"""The idempotency guard's errors, under :class:`hotkeyd.errors.ClientError`.

::

    ClientError
     └── IdempotencyError               the idempotency guard refused or failed
          ├── IdempotencyKeyError(ValueError)   empty/oversized/non-ASCII key, body too big
          ├── IdempotencyInProgress       another caller holds the lease (retry later)
          ├── IdempotencyMismatch         same key, different request fingerprint
          ├── LeaseLostError              a fenced step came from a holder that lost its lease
          ├── IdempotencyUnavailable(ConnectionError)  Redis/store broken, guard fails closed
          └── DuplicateCompletionError    the durable store already holds another final result
"""

from __future__ import annotations

from hotkeyd.errors import ClientError

__all__ = [
    "DuplicateCompletionError",
    "IdempotencyError",
    "IdempotencyInProgress",
    "IdempotencyKeyError",
    "IdempotencyMismatch",
    "IdempotencyUnavailable",
    "LeaseLostError",
]


class IdempotencyError(ClientError):
    """The idempotency guard refused a request or could not decide."""


class IdempotencyKeyError(IdempotencyError, ValueError):
    """An Idempotency-Key or a guarded request is malformed (empty, too long, non-ASCII, too big)."""


class IdempotencyInProgress(IdempotencyError):
    """Another caller holds the lease of this key; retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class IdempotencyMismatch(IdempotencyError):
    """The key was used before with a different request: a client bug, never a replay."""


class LeaseLostError(IdempotencyError):
    """A fenced step (complete, fail, extend, release) came from a holder whose lease was taken."""


class IdempotencyUnavailable(IdempotencyError, ConnectionError):
    """Redis (or the durable store) failed and the guard fails closed."""


class DuplicateCompletionError(IdempotencyError):
    """The durable store already holds a different final result for this key.

    The operation ran twice (Redis lost the record, e.g. a failover); the unique key
    caught the second completion. ``stored`` is the result that won.
    """

    def __init__(self, message: str, stored: bytes = b"") -> None:
        super().__init__(message)
        self.stored = stored
