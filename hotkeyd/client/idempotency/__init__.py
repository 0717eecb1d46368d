"""The idempotency guard: layer 1 of the flash-sale template (see docs/idempotency.md).

- :class:`IdempotencyGuard` / :class:`AsyncIdempotencyGuard`: ``begin`` ->
  NEW / IN_PROGRESS / DONE / MISMATCH; ``complete``, ``fail``, ``extend``, ``release``
  fenced by the lease's token. One Lua script (one round trip) per transition.
- :class:`KeepAlive`: renew a lease in the background during a long operation.
- :func:`idempotent`: the same for a plain function.
- :class:`DurableStore`: final results in SQL (DB-API 2) behind a unique key.
- :class:`IdempotencyMetrics`: Prometheus counters of guards (explicit registry).
- :func:`recover`: settle records whose holder died, asking the application.
- :func:`operation_key`, :func:`gateway_key`, :func:`fingerprint`, :func:`check_key`.
- :class:`IdempotencyMiddleware` (ASGI) and :class:`IdempotencyWSGIMiddleware` (WSGI)
  honour the Idempotency-Key header as :class:`HttpPolicy` says (409, 422, replay, 400).
"""

from __future__ import annotations

from hotkeyd.client.idempotency.aioguard import AsyncIdempotencyGuard
from hotkeyd.client.idempotency.asgi import IdempotencyMiddleware
from hotkeyd.client.idempotency.core import GuardSettings, GuardStats
from hotkeyd.client.idempotency.decorator import idempotent
from hotkeyd.client.idempotency.guard import IdempotencyGuard
from hotkeyd.client.idempotency.http import REPLAYED_HEADER, HttpPolicy
from hotkeyd.client.idempotency.keepalive import KeepAlive
from hotkeyd.client.idempotency.keys import check_key, fingerprint, gateway_key, operation_key
from hotkeyd.client.idempotency.metrics import IdempotencyMetrics
from hotkeyd.client.idempotency.outcome import Begin, Lease, Outcome
from hotkeyd.client.idempotency.recover import RecoverReport, recover
from hotkeyd.client.idempotency.store import DurableStore, StoredFinal
from hotkeyd.client.idempotency.wsgi import IdempotencyWSGIMiddleware

__all__ = [
    "REPLAYED_HEADER",
    "AsyncIdempotencyGuard",
    "Begin",
    "DurableStore",
    "GuardSettings",
    "GuardStats",
    "HttpPolicy",
    "IdempotencyGuard",
    "IdempotencyMetrics",
    "IdempotencyMiddleware",
    "IdempotencyWSGIMiddleware",
    "KeepAlive",
    "Lease",
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
