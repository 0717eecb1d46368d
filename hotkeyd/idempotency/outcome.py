"""What the guard answers, and how the scripts' replies become those answers.

Shared by the thread and asyncio guards: they differ only in how they wait for Redis.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from hotkeyd.idempotency.errors import IdempotencyError, LeaseLostError

__all__ = ["Begin", "Lease", "Outcome", "parse_begin", "parse_fenced"]


class Outcome(enum.Enum):
    """The four answers of ``begin``."""

    NEW = "new"  # run the operation; you hold the lease
    IN_PROGRESS = "in_progress"  # another caller holds the lease
    DONE = "done"  # finished before: replay ``Begin.result`` as is
    MISMATCH = "mismatch"  # same key, different request: a client bug


@dataclass(frozen=True)
class Lease:
    """The right to run one operation, proven by a fencing token.

    Pass ``token`` on to downstream writes (e.g. a ``WHERE fence < :token`` update) so a
    store can refuse a holder that lost its lease. ``guarded`` is False only when the
    guard failed open (Redis unreachable): nothing in Redis protects this run.
    """

    key: str
    record: str
    token: int
    fingerprint: str = ""
    guarded: bool = True


@dataclass(frozen=True)
class Begin:
    """The answer of ``begin``.

    Attributes:
        outcome: see :class:`Outcome`.
        lease: set when ``outcome`` is NEW.
        result: the stored result when ``outcome`` is DONE.
        failed: the stored result is a recorded failure (``fail()``), still replayed.
        retry_after: seconds until the holder's lease runs out (IN_PROGRESS).
        takeover: NEW because an earlier holder's lease expired (it may have crashed).
    """

    outcome: Outcome
    lease: Lease | None = None
    result: bytes | None = None
    failed: bool = False
    retry_after: float = 0.0
    takeover: bool = False


def _s(v: Any) -> str:
    return v.decode("ascii") if isinstance(v, bytes) else str(v)


def parse_begin(reply: list[Any], key: str, record: str, fp: str) -> Begin:
    """Turn the reply of ``spec/lua/idempotency_begin.lua`` into a :class:`Begin`."""
    kind = _s(reply[0])
    if kind == "new":
        lease = Lease(key=key, record=record, token=int(reply[1]), fingerprint=fp)
        return Begin(Outcome.NEW, lease=lease, takeover=_s(reply[2]) == "takeover")
    if kind == "busy":
        return Begin(Outcome.IN_PROGRESS, retry_after=max(0.001, int(reply[2]) / 1000.0))
    if kind in ("done", "failed"):
        res = reply[2]
        return Begin(Outcome.DONE, result=bytes(res or b""), failed=kind == "failed")
    if kind == "mismatch":
        return Begin(Outcome.MISMATCH)
    raise IdempotencyError(f"unexpected reply from the begin script: {reply!r}")


def parse_fenced(reply: list[Any], what: str, lease: Lease) -> Any:
    """Check the reply of a fenced script; raise :class:`LeaseLostError` if refused."""
    if _s(reply[0]) == "ok":
        return reply[1]
    why = _s(reply[1])
    detail = {
        "gone": "the record expired or was released (lease/TTL too short?)",
        "fenced": "another holder took over after the lease ran out",
        "final": "the record is already final",
    }.get(why, why)
    raise LeaseLostError(
        f"{what} refused for idempotency key {lease.key!r} (token {lease.token}): {detail}"
    )
