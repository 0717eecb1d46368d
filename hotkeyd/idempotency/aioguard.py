"""AsyncIdempotencyGuard: the guard for asyncio code (redis.asyncio), e.g. ASGI apps.

Same scripts, same records, same answers as :class:`IdempotencyGuard`: a thread app and
an asyncio app can guard the same keys. DB-API stores are blocking, so store calls run
in a worker thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis.asyncio as aioredis

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

__all__ = ["AsyncIdempotencyGuard"]


class AsyncIdempotencyGuard:
    """The idempotency guard over a ``redis.asyncio`` client.

    Args: as :class:`~hotkeyd.idempotency.IdempotencyGuard` (``client`` is a
    ``redis.asyncio.Redis`` with ``decode_responses=False``).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        store: DurableStore | None = None,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        self.client = client
        self.settings = GuardSettings(**settings)
        check_client(client, self.settings)
        self.store = store
        self.clock = clock or SystemClock()
        self._begin = client.register_script(scripts.BEGIN)
        self._complete = client.register_script(scripts.COMPLETE)
        self._extend = client.register_script(scripts.EXTEND)
        self._release = client.register_script(scripts.RELEASE)

    @property
    def stats(self) -> GuardStats:
        """Counters (outcomes, takeovers, lost leases, bad input, outages)."""
        return self.settings.stats

    async def begin(self, key: str, fingerprint: Fingerprint = b"", *, wait: float = 0.0) -> Begin:
        """See :meth:`IdempotencyGuard.begin`."""
        p = self.settings.prepare(key, fingerprint)
        deadline = self.clock.monotonic() + wait
        backoff = Backoff(base=0.005, cap=0.25)
        while True:
            b = await self._begin_once(p)
            left = deadline - self.clock.monotonic()
            if b.outcome is not Outcome.IN_PROGRESS or left <= 0:
                return self.settings.stats.count(b)
            await asyncio.sleep(min(left, b.retry_after, backoff.next_delay()))

    async def _begin_once(self, p: Prepared) -> Begin:
        try:
            reply = await self._begin(keys=p.keys, args=p.args)
        except REDIS_ERRORS as exc:
            return self.settings.failed(exc, "begin", p)
        b = parse_begin(reply, p.key, p.record, p.fingerprint)
        if b.outcome is not Outcome.NEW or self.store is None or b.lease is None:
            return b
        try:
            stored = await asyncio.to_thread(self.store.get, p.digest)
        except Exception as exc:
            if self.settings.on_error == "closed":
                await self.abandon(b.lease)
            self.settings.tolerate(exc, "store lookup")
            return b  # failing open: Redis still guards the key
        if stored is None:
            return b
        answer = from_store(stored, p)
        self.settings.stats.store_replays += 1
        if answer.outcome is Outcome.DONE:
            await self._write_redis(b.lease, stored.result, stored.failed)
        else:
            await self.abandon(b.lease)
        return answer

    async def complete(self, lease: Lease, result: bytes, *, failed: bool = False) -> None:
        """See :meth:`IdempotencyGuard.complete`."""
        if not lease.guarded:
            return
        await self._write_redis(lease, result, failed)
        if self.store is None:
            return
        try:
            final = self.settings.final_of(lease, result, failed)
            winner = await asyncio.to_thread(self.store.put, final)
        except Exception as exc:
            self.settings.failed(exc, "store write", lease)
            return
        if winner.token != lease.token:
            await self._write_redis(lease, winner.result, winner.failed, repair=True)
            self.settings.stats.duplicates += 1
            raise duplicate(lease, winner)

    async def fail(self, lease: Lease, result: bytes = b"") -> None:
        """See :meth:`IdempotencyGuard.fail`."""
        await self.complete(lease, result, failed=True)

    async def _write_redis(
        self, lease: Lease, result: bytes, failed: bool, repair: bool = False
    ) -> None:
        call = self.settings.complete_call(lease, bytes(result), failed, repair)
        await self._fenced(self._complete, "complete", lease, call)

    async def extend(self, lease: Lease, seconds: float | None = None) -> None:
        """See :meth:`IdempotencyGuard.extend`."""
        await self._fenced(self._extend, "extend", lease, self.settings.extend_call(lease, seconds))

    async def release(self, lease: Lease) -> None:
        """See :meth:`IdempotencyGuard.release`."""
        await self._fenced(self._release, "release", lease, self.settings.release_call(lease))

    async def _fenced(
        self, script: Any, what: str, lease: Lease, call: tuple[list[str], list[Any]]
    ) -> None:
        if not lease.guarded:
            return
        try:
            reply = await script(keys=call[0], args=call[1])
        except REDIS_ERRORS as exc:
            self.settings.failed(exc, what, lease)
            return
        try:
            parse_fenced(reply, what, lease)
        except LeaseLostError:
            self.settings.stats.lease_lost += 1
            raise

    async def abandon(self, lease: Lease) -> None:
        """See :meth:`IdempotencyGuard.abandon`."""
        with contextlib.suppress(IdempotencyError):
            await self.release(lease)
