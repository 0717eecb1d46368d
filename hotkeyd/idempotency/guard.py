"""IdempotencyGuard: run an operation once per key, across threads, processes and hosts.

::

    guard = IdempotencyGuard(redis.Redis(), lease=10, ttl=3600)
    b = guard.begin("order-7f3a", fingerprint=request_body)
    if b.outcome is Outcome.NEW:
        result = place_order()                   # runs once per key
        guard.complete(b.lease, result)          # fenced: refused if the lease was taken
    elif b.outcome is Outcome.DONE:
        result = b.result                        # the stored result, replayed as is

Each step is one Lua script (one round trip): there is no check-then-set anywhere.
See ``docs/idempotency.md`` for states, leases, TTLs and failure semantics.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import redis

from hotkeyd.backoff import Backoff
from hotkeyd.clock import Clock, SystemClock
from hotkeyd.idempotency import scripts
from hotkeyd.idempotency.core import (
    REDIS_ERRORS,
    Fingerprint,
    GuardSettings,
    GuardStats,
    Prepared,
    check_client,
    duplicate,
    from_store,
)
from hotkeyd.idempotency.errors import IdempotencyError, LeaseLostError
from hotkeyd.idempotency.outcome import Begin, Lease, Outcome, parse_begin, parse_fenced
from hotkeyd.idempotency.store import DurableStore

__all__ = ["IdempotencyGuard"]


class IdempotencyGuard:
    """The idempotency guard over a redis-py client.

    Args:
        client: a redis-py client with ``decode_responses=False`` (results are bytes).
        store: optional :class:`DurableStore` for final results (failover backstop).
        clock: time source for waiting on another holder.
        sleep: how to wait (tests may pass a fake).
        **settings: :class:`GuardSettings` fields (``lease``, ``ttl``, ``namespace``,
            ``scope``, ``audit_maxlen``, ``max_key_length``, ``on_error``).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        store: DurableStore | None = None,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        **settings: Any,
    ) -> None:
        self.client = client
        self.settings = GuardSettings(**settings)
        check_client(client, self.settings)
        self.store = store
        self.clock = clock or SystemClock()
        self.sleep = sleep
        self._begin = client.register_script(scripts.BEGIN)
        self._complete = client.register_script(scripts.COMPLETE)
        self._extend = client.register_script(scripts.EXTEND)
        self._release = client.register_script(scripts.RELEASE)

    @property
    def stats(self) -> GuardStats:
        """Counters (outcomes, takeovers, lost leases, bad input, outages)."""
        return self.settings.stats

    def begin(self, key: str, fingerprint: Fingerprint = b"", *, wait: float = 0.0) -> Begin:
        """Start the operation of ``key``, or learn why not.

        Args:
            key: the idempotency key (see :func:`~hotkeyd.idempotency.check_key`).
            fingerprint: what identifies the request (e.g. its body); a retry must send
                the same, a different one is a MISMATCH.
            wait: seconds to wait for another holder's result before answering
                IN_PROGRESS (polls with backoff; 0 answers at once).

        Raises:
            IdempotencyKeyError: bad key. IdempotencyUnavailable: Redis or the store
                failed and the guard fails closed.
        """
        p = self.settings.prepare(key, fingerprint)
        deadline = self.clock.monotonic() + wait
        backoff = Backoff(base=0.005, cap=0.25)
        while True:
            b = self._begin_once(p)
            left = deadline - self.clock.monotonic()
            if b.outcome is not Outcome.IN_PROGRESS or left <= 0:
                return self.settings.stats.count(b)
            self.sleep(min(left, b.retry_after, backoff.next_delay()))

    def _begin_once(self, p: Prepared) -> Begin:
        try:
            b = parse_begin(self._begin(keys=p.keys, args=p.args), p.key, p.record, p.fingerprint)
        except REDIS_ERRORS as exc:
            return self.settings.failed(exc, "begin", p)
        if b.outcome is not Outcome.NEW or self.store is None or b.lease is None:
            return b
        try:  # Redis has no record: did it forget a final result (failover, restart)?
            stored = self.store.get(p.digest)
        except Exception as exc:
            if self.settings.on_error == "closed":
                self.abandon(b.lease)
            self.settings.tolerate(exc, "store lookup")
            return b  # failing open: Redis still guards the key
        if stored is None:
            return b
        answer = from_store(stored, p)
        self.settings.stats.store_replays += 1
        if answer.outcome is Outcome.DONE:  # Redis learns it again
            self._write_redis(b.lease, stored.result, stored.failed)
        else:
            self.abandon(b.lease)
        return answer

    def claim(self, key: str) -> Lease | None:
        """Take over ``key`` if it is PROCESSING past its lease (for :func:`recover`).

        Returns the new lease, or None if the key is not stale (running, final, absent).
        """
        p = self.settings.prepare(key, b"", claim=True)
        try:
            reply = self._begin(keys=p.keys, args=p.args)
        except REDIS_ERRORS as exc:
            self.settings.failed(exc, "claim", p)
            return None
        if reply[0] != b"new":
            return None
        return Lease(p.key, p.record, int(reply[1]), reply[3].decode("ascii"))

    def complete(self, lease: Lease, result: bytes, *, failed: bool = False) -> None:
        """Store the final result (DONE, or FAILED with ``failed=True``) and end the lease.

        Raises:
            LeaseLostError: the lease was taken over (the fencing token no longer
                matches) or the record expired: this result is NOT stored.
            DuplicateCompletionError: the durable store already holds another result
                for the key (the operation ran twice after Redis lost the record).
            IdempotencyUnavailable: Redis/store failed (closed mode).
        """
        if not lease.guarded:
            return
        self._write_redis(lease, result, failed)
        if self.store is None:
            return
        try:
            winner = self.store.put(self.settings.final_of(lease, result, failed))
        except Exception as exc:
            self.settings.failed(exc, "store write", lease)
            return
        if winner.token != lease.token:
            self._write_redis(lease, winner.result, winner.failed, repair=True)
            self.settings.stats.duplicates += 1
            raise duplicate(lease, winner)

    def fail(self, lease: Lease, result: bytes = b"") -> None:
        """Record a final failure that retries must see too (e.g. payment declined)."""
        self.complete(lease, result, failed=True)

    def _write_redis(self, lease: Lease, result: bytes, failed: bool, repair: bool = False) -> None:
        call = self.settings.complete_call(lease, bytes(result), failed, repair)
        self._fenced(self._complete, "complete", lease, call)

    def extend(self, lease: Lease, seconds: float | None = None) -> None:
        """Renew the lease for ``seconds`` (default: the configured lease) from now.

        Raises:
            LeaseLostError: the lease was already taken over; stop working.
        """
        self._fenced(self._extend, "extend", lease, self.settings.extend_call(lease, seconds))

    def release(self, lease: Lease) -> None:
        """Give the key back (PROCESSING -> NEW): the next caller runs the operation.

        For failures worth retrying (a timeout downstream, a 5xx).
        """
        self._fenced(self._release, "release", lease, self.settings.release_call(lease))

    def _fenced(
        self, script: Any, what: str, lease: Lease, call: tuple[list[str], list[Any]]
    ) -> None:
        if not lease.guarded:  # failed open: nothing in Redis to update
            return
        try:
            reply = script(keys=call[0], args=call[1])
        except REDIS_ERRORS as exc:
            self.settings.failed(exc, what, lease)
            return
        try:
            parse_fenced(reply, what, lease)
        except LeaseLostError:
            self.settings.stats.lease_lost += 1
            raise

    def abandon(self, lease: Lease) -> None:
        """Release, ignoring a lost lease or an outage (the lease runs out anyway)."""
        with contextlib.suppress(IdempotencyError):
            self.release(lease)
