"""Strict or available: what a cache does with the watch's heartbeats and invalidations.

One :class:`WatchGate` per cache (HotCache and AsyncHotCache share it; the pure
decisions are in :mod:`hotkeyd.client.watchguard`, run by ``spec/vectors/watch.json``):

- every invalidation goes through its :class:`~hotkeyd.client.watchguard.InvalidationIntake`
  (size cap, signature with ``auth``, per-key rate limit; early drops are applied at the
  key's next read);
- every heartbeat updates the leases; a node's new epoch drops every copy;
- before a read of a hot key, :meth:`WatchGate.admit` says whether the local copy may be
  served. In ``"strict"`` mode only while the watch vouches for it (docs/consistency.md);
  in ``"available"`` mode always (until its TTL), counting the reads the watch did not
  vouch for in ``stats.lapsed``;
- before a fetch, :meth:`WatchGate.before_fetch` records the guard the copy is taken
  under; in strict mode, with no guard, the read goes to Redis and is not cached.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from redis.crc import key_slot

from hotkeyd.client.hotset import HotSet
from hotkeyd.client.watchguard import (
    CONSISTENCY_MODES,
    Consistency,
    Guard,
    InvalidationIntake,
    WatchLeases,
    decode_heartbeat,
)
from hotkeyd.clock import Clock
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.wire import WireError
from hotkeyd.ratelog import RateLimitedLog

__all__ = ["WatchGate", "check_consistency"]

logger = logging.getLogger(__name__)


def check_consistency(mode: str) -> Consistency:
    if mode not in CONSISTENCY_MODES:
        raise ValueError(f"consistency must be 'available' or 'strict', got {mode!r}")
    return mode  # type: ignore[return-value]


class WatchGate:
    """The consistency mode of one cache.

    Args:
        mode: ``"available"`` or ``"strict"``.
        hotset: where a key's announcement seqs come from.
        clock: monotonic time of arrivals and reads; ``time()`` checks heartbeat ts.
        auth: verify heartbeats and invalidations (unsigned ones are counted, dropped).
        drop: drops every local copy of a key (``LocalCache.invalidate``).
        drop_all: drops every local copy (``LocalCache.clear``).
        max_guards: bound on remembered guards (past it, copies refetch once).
    """

    def __init__(
        self,
        mode: Consistency,
        hotset: HotSet,
        clock: Clock,
        *,
        auth: MessageAuth | None,
        drop: Callable[[bytes], object],
        drop_all: Callable[[], object],
        max_guards: int = 100_000,
    ) -> None:
        self.mode = check_consistency(mode)
        self.strict = mode == "strict"
        self.hotset, self.clock, self.auth = hotset, clock, auth
        self.drop, self.drop_all = drop, drop_all
        self.max_guards = max_guards
        self.leases = WatchLeases()
        self.stats = self.leases.stats
        self.intake = InvalidationIntake(auth=auth)
        self._guards: dict[Hashable, Guard] = {}
        self._clustered = False  # some heartbeat carries slots: keys map to nodes
        self._warn = RateLimitedLog(logger)

    # ---------------------------------------------------------------- messages
    def on_invalidation(self, payload: bytes) -> bool:
        """Apply one invalidation; False when it was dropped (counted in intake.stats)."""
        keys = self.intake.receive(payload, self.clock.monotonic())
        if keys is None:
            self._warn(logging.WARNING, "dropped an oversized, unsigned or malformed invalidation")
            return False
        for k in keys:
            self.drop(k)
        return True

    def on_heartbeat(self, payload: bytes) -> None:
        if self.auth is not None:
            body = self.auth.verify(payload)
            if body is None:
                self.stats.bad_heartbeats += 1
                self._warn(logging.WARNING, "dropped an unsigned or forged watch heartbeat")
                return
            payload = body
        try:
            hb = decode_heartbeat(payload, self.clock.time())
        except WireError as exc:
            self.stats.bad_heartbeats += 1
            self._warn(logging.WARNING, "bad watch heartbeat: %s", exc)
            return
        if hb.slots is not None:
            self._clustered = True
        if self.leases.heard(hb, self.clock.monotonic()):
            # the node's watch reconnected: a write in the gap may have gone unseen
            self._guards.clear()
            self.drop_all()

    def reset(self) -> None:
        """The subscription was lost or restored: heartbeats may have been missed."""
        self.leases.forget()
        self._guards.clear()

    # ------------------------------------------------------------------- reads
    def _slot(self, k: bytes) -> int:
        return key_slot(k) if self._clustered else 0

    def settle(self, k: bytes, now: float) -> None:
        """At any read of ``k``: apply its deferred invalidation if its turn came."""
        intake = self.intake
        if intake.pending and k in intake.pending and intake.due(k, now):
            self.drop(k)

    def admit(self, ckey: Hashable, k: bytes, now: float) -> bool:
        """May the local copy under ``ckey`` (if there is one) be served now?"""
        self.settle(k, now)
        if not self.strict and not self.leases.seen:
            return True  # no watch out there: nothing to vouch, nothing to count
        if self.leases.serves(self._guards.get(ckey), self._slot(k), now):
            return True
        self.stats.lapsed += 1
        return not self.strict

    def before_fetch(self, ckey: Hashable, k: bytes, db: int, now: float) -> bool:
        """Record the guard of a fetch beginning now; False: read Redis, do not cache."""
        if not self.strict and not self.leases.seen:
            return True
        g = self.leases.guard(self._slot(k), self.hotset.hot_since(k, db), now)
        if g is None:
            self._guards.pop(ckey, None)
            self.stats.unwatched_copies += 1
            if self.strict:
                self.stats.strict_misses += 1
                return False
            return True
        if self._guards.get(ckey) != g:
            if self.strict:  # a copy (or a fetch in flight) under an older guard must not stay
                self.drop(k)
            if len(self._guards) >= self.max_guards:
                self._guards.clear()
            self._guards[ckey] = g
        return True
