"""recover(): settle PROCESSING records whose holder vanished.

A holder that crashes leaves a PROCESSING record behind. The next retry takes it over
after the lease, but if no client retries (a background job, a user who gave up) the
operation is left undecided. ``recover`` finds such records, claims each one with a new
fencing token (so a holder that was only slow cannot complete it any more), and asks the
application whether the operation actually happened - the "look up the transaction in
the database" job - then marks it DONE with that result or releases it for a retry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hotkeyd.idempotency.core import REDIS_ERRORS
from hotkeyd.idempotency.errors import IdempotencyError, IdempotencyUnavailable
from hotkeyd.idempotency.guard import IdempotencyGuard
from hotkeyd.idempotency.outcome import Lease

__all__ = ["RecoverReport", "recover"]


@dataclass
class RecoverReport:
    """What one :func:`recover` pass did."""

    scanned: int = 0
    stale: int = 0
    completed: int = 0
    released: int = 0
    errors: int = 0


def recover(
    guard: IdempotencyGuard,
    check: Callable[[Lease], bytes | None],
    *,
    limit: int = 10_000,
) -> RecoverReport:
    """Settle PROCESSING records past their lease (at most ``limit`` records scanned).

    Args:
        guard: the guard whose records (namespace) are scanned.
        check: called with a freshly claimed :class:`Lease` (``lease.key`` is the
            idempotency key); returns the operation's result if it completed (the record
            becomes DONE with it) or None if it did not (the record is released, the next
            retry runs it). An exception leaves the record claimed until its new lease
            ends, and is counted in ``errors``.

    Raises:
        IdempotencyUnavailable: Redis failed.
    """
    s = guard.settings
    report = RecoverReport()
    pattern = s.names.record("*")
    try:
        for raw in guard.client.scan_iter(match=pattern, count=500):
            if report.scanned >= limit:
                break
            report.scanned += 1
            record = raw.decode() if isinstance(raw, bytes) else str(raw)
            _settle(guard, record, check, report)
    except REDIS_ERRORS as exc:
        raise IdempotencyUnavailable(f"recover: Redis failed: {exc}") from exc
    return report


def _settle(
    guard: IdempotencyGuard, record: str, check: Callable[[Lease], bytes | None], r: RecoverReport
) -> None:
    st, op = guard.client.hmget(record, ["st", "op"])
    if st != b"P" or op is None:
        return
    key = op.decode("ascii") if isinstance(op, bytes) else str(op)
    if guard.settings.prepare(key, b"").record != record:  # another scope's record
        return
    lease = guard.claim(key)
    if lease is None:  # lease still running, or settled meanwhile
        return
    r.stale += 1
    try:
        result = check(lease)
    except Exception:
        r.errors += 1
        return
    try:
        if result is None:
            guard.release(lease)
            r.released += 1
        else:
            guard.complete(lease, result)
            r.completed += 1
    except IdempotencyError:
        r.errors += 1
