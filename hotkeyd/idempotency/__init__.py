"""The idempotency guard: layer 1 of the flash-sale template (see docs/idempotency.md).

- :class:`IdempotencyGuard` / :class:`AsyncIdempotencyGuard`: ``begin`` ->
  NEW / IN_PROGRESS / DONE / MISMATCH; ``complete``, ``fail``, ``extend``, ``release``
  fenced by the lease's token. One Lua script (one round trip) per transition.
- :class:`KeepAlive`: renew a lease in the background during a long operation.
- :func:`idempotent`: the same for a plain function.
- :class:`DurableStore`: final results in SQL (DB-API 2) behind a unique key.
- :class:`IdempotencyMetrics`: Prometheus counters of guards (explicit registry).
- :func:`recover`: settle records whose holder died, asking the application.
- :func:`operation_key`, :func:`gateway_key`, :func:`fingerprint`, :func:`check_key`;
  :class:`IdempotencyNames`: the guard's Redis names under a deployment prefix.
- The errors (:mod:`hotkeyd.idempotency.errors`), rooted at :class:`IdempotencyError`.
- :class:`IdempotencyMiddleware` (ASGI) and :class:`IdempotencyWSGIMiddleware` (WSGI)
  honour the Idempotency-Key header as :class:`HttpPolicy` says (409, 422, replay, 400).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hotkeyd.errors import import_extra
from hotkeyd.idempotency.aioguard import AsyncIdempotencyGuard
from hotkeyd.idempotency.asgi import IdempotencyMiddleware
from hotkeyd.idempotency.core import GuardSettings, GuardStats
from hotkeyd.idempotency.decorator import idempotent
from hotkeyd.idempotency.errors import (
    DuplicateCompletionError,
    IdempotencyError,
    IdempotencyInProgress,
    IdempotencyKeyError,
    IdempotencyMismatch,
    IdempotencyUnavailable,
    LeaseLostError,
)
from hotkeyd.idempotency.guard import IdempotencyGuard
from hotkeyd.idempotency.http import REPLAYED_HEADER, HttpPolicy
from hotkeyd.idempotency.keepalive import KeepAlive
from hotkeyd.idempotency.keys import (
    IdempotencyNames,
    check_key,
    fingerprint,
    gateway_key,
    operation_key,
)
from hotkeyd.idempotency.outcome import Begin, Lease, Outcome
from hotkeyd.idempotency.recover import RecoverReport, recover
from hotkeyd.idempotency.store import DurableStore, StoredFinal
from hotkeyd.idempotency.wsgi import IdempotencyWSGIMiddleware

if TYPE_CHECKING:  # imported on first use: prometheus-client is the `metrics` extra
    from hotkeyd.idempotency.metrics import IdempotencyMetrics

__all__ = [
    "REPLAYED_HEADER",
    "AsyncIdempotencyGuard",
    "Begin",
    "DuplicateCompletionError",
    "DurableStore",
    "GuardSettings",
    "GuardStats",
    "HttpPolicy",
    "IdempotencyError",
    "IdempotencyGuard",
    "IdempotencyInProgress",
    "IdempotencyKeyError",
    "IdempotencyMetrics",
    "IdempotencyMiddleware",
    "IdempotencyMismatch",
    "IdempotencyNames",
    "IdempotencyUnavailable",
    "IdempotencyWSGIMiddleware",
    "KeepAlive",
    "Lease",
    "LeaseLostError",
    "Outcome",
    "RecoverReport",
    "StoredFinal",
    "check_key",
    "fingerprint",
    "gateway_key",
    "idempotent",
    "operation_key",
    "recover",
]


def __getattr__(name: str) -> Any:
    if name == "IdempotencyMetrics":
        return import_extra("hotkeyd.idempotency.metrics", name, "metrics")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
