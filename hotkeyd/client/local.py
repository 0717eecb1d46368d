"""A bounded in-process cache with single-flight refresh and logical expiry.

Why single-flight: a key is promoted *because* thousands of callers read it; when its
entry is missing or expires, letting each of them go to Redis would recreate the very
spike the cache exists to absorb. So exactly one caller (the *leader*) refreshes an
entry; the others get the stale value while it is within ``stale_for`` seconds of its
expiry (logical expiry), or wait up to ``wait_timeout`` for the leader's result.

Invalidation beats refresh: a refresh that was in flight when its Redis key was
invalidated does not store its (possibly old) value, so no write can be undone by a
slow read that started before it.

Bounds: ``max_entries`` and ``max_bytes`` (an estimate of the value sizes plus a fixed
per-entry overhead), least recently used evicted first; a single value larger than
``max_bytes / 8`` is served but not cached, so one huge key cannot flush the rest.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from hotkeyd.clock import Clock, SystemClock

__all__ = ["CacheStats", "Flight", "LocalCache"]

T = TypeVar("T")
_ENTRY_OVERHEAD = 120  # bytes: entry object, dict slot, index entry (order of magnitude)


@dataclass
class CacheStats:
    """Counters of a :class:`LocalCache` (plain ints: cheap on the hot path; a racing
    increment may rarely be lost, which is acceptable for metrics)."""

    hits: int = 0
    stale_hits: int = 0
    misses: int = 0
    refreshes: int = 0
    waits: int = 0
    invalidations: int = 0
    evictions: int = 0
    too_big: int = 0


class _Entry:
    __slots__ = ("expires", "rkey", "size", "value")

    def __init__(self, value: Any, rkey: bytes, size: int, expires: float) -> None:
        self.value = value
        self.rkey = rkey
        self.size = size
        self.expires = expires


class Flight:
    """One refresh in progress; waiters block on :attr:`done`."""

    __slots__ = ("ckey", "done", "error", "rkey", "tainted", "value")

    def __init__(self, ckey: Hashable, rkey: bytes) -> None:
        self.ckey = ckey
        self.rkey = rkey
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.tainted = False


def estimate_size(value: Any) -> int:
    """Rough memory of a Redis reply (bytes/str, dict, list, number, None)."""
    if value is None:
        return 0
    if isinstance(value, (bytes, str)):
        return len(value)
    if isinstance(value, dict):
        return sum(estimate_size(k) + estimate_size(v) + 16 for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(estimate_size(v) + 8 for v in value)
    return sys.getsizeof(value)


class LocalCache:
    """Bounded LRU of Redis replies keyed by ``ckey`` and indexed by Redis key.

    Args:
        max_entries: entry bound.
        max_bytes: size bound (see :func:`estimate_size`).
        clock: ``monotonic()`` drives expiry.
        stale_for: seconds past expiry during which a stale value may be served while
            one caller refreshes it.
        wait_timeout: how long a caller without a stale value waits for the leader's
            refresh before reading Redis itself (uncached).
    """

    def __init__(
        self,
        max_entries: int = 10_000,
        max_bytes: int = 32 << 20,
        *,
        clock: Clock | None = None,
        stale_for: float = 1.0,
        wait_timeout: float = 0.5,
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(
                f"max_entries and max_bytes must be >= 1, got {max_entries}, {max_bytes}"
            )
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.stale_for = stale_for
        self.wait_timeout = wait_timeout
        self.stats = CacheStats()
        self.nbytes = 0
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._by_rkey: dict[bytes, set[Hashable]] = {}
        self._flights: dict[Hashable, Flight] = {}

    def __len__(self) -> int:
        return len(self._data)

    # ------------------------------------------------------------------ reads
    def get_fresh(self, ckey: Hashable, now: float) -> tuple[bool, Any]:
        """``(True, value)`` on a fresh hit, else ``(False, None)``. Lock-free."""
        e = self._data.get(ckey)
        if e is not None and e.expires > now:
            self.stats.hits += 1
            # KeyError: evicted by another thread meanwhile; the value is still good.
            with contextlib.suppress(KeyError):
                self._data.move_to_end(ckey)
            return True, e.value
        return False, None

    def peek(self, ckey: Hashable) -> tuple[Any, float] | None:
        """``(value, expires)`` of ``ckey`` even if expired (for logical expiry), or None."""
        e = self._data.get(ckey)
        return None if e is None else (e.value, e.expires)

    def load(self, ckey: Hashable, rkey: bytes, loader: Callable[[], T], ttl: float) -> T:
        """Return the cached value or refresh it with ``loader`` (single-flight)."""
        now = self.clock.monotonic()
        hit, value = self.get_fresh(ckey, now)
        if hit:
            return value
        flight, stale = self.begin(ckey, rkey, now)
        if flight is None:
            return self._follow(ckey, stale, loader)
        try:
            value = loader()
        except BaseException as exc:
            self.fail(flight, exc)
            raise
        self.finish(flight, value, ttl)
        return value

    def begin(self, ckey: Hashable, rkey: bytes, now: float) -> tuple[Flight | None, _Entry | None]:
        """Become the leader of a refresh of ``ckey`` (returns the flight), or learn that
        someone else is refreshing (returns ``(None, entry-or-None)``)."""
        with self._lock:
            e = self._data.get(ckey)
            if e is not None and e.expires > now:  # refreshed while we took the lock
                self.stats.hits += 1
                return None, e
            self.stats.misses += 1
            if ckey in self._flights:
                return None, e
            f = self._flights[ckey] = Flight(ckey, rkey)
            self.stats.refreshes += 1
            return f, None

    def _follow(self, ckey: Hashable, e: _Entry | None, loader: Callable[[], T]) -> T:
        now = self.clock.monotonic()
        if e is not None and now < e.expires + self.stale_for:
            if e.expires <= now:
                self.stats.stale_hits += 1
            return e.value
        f = self._flights.get(ckey)
        if f is not None:
            self.stats.waits += 1
            if f.done.wait(self.wait_timeout):
                if f.error is not None:
                    raise f.error
                return f.value
        hit, value = self.get_fresh(ckey, self.clock.monotonic())
        if hit:
            return value
        return loader()  # leader too slow: read through, uncached

    def finish(self, flight: Flight, value: Any, ttl: float) -> None:
        """Store the leader's value (unless invalidated meanwhile) and wake waiters."""
        flight.value = value
        size = estimate_size(value) + len(flight.rkey) + _ENTRY_OVERHEAD
        with self._lock:
            self._flights.pop(flight.ckey, None)
            if not flight.tainted and ttl > 0:
                if size > self.max_bytes // 8:
                    self.stats.too_big += 1
                else:
                    self._store(flight.ckey, flight.rkey, value, size, self.clock.monotonic() + ttl)
        flight.done.set()

    def fail(self, flight: Flight, exc: BaseException) -> None:
        """The leader's refresh failed: waiters see the same error."""
        flight.error = exc
        with self._lock:
            self._flights.pop(flight.ckey, None)
        flight.done.set()

    # ----------------------------------------------------------- invalidation
    def invalidate(self, rkey: bytes) -> int:
        """Drop every entry of Redis key ``rkey`` and spoil refreshes in flight."""
        with self._lock:
            for f in self._flights.values():
                if f.rkey == rkey:
                    f.tainted = True
            ckeys = self._by_rkey.pop(rkey, None)
            if not ckeys:
                return 0
            for ck in ckeys:
                e = self._data.pop(ck, None)
                if e is not None:
                    self.nbytes -= e.size
            self.stats.invalidations += len(ckeys)
            return len(ckeys)

    def clear(self) -> None:
        """Drop everything (e.g. after a reconnect, when invalidations may be lost)."""
        with self._lock:
            for f in self._flights.values():
                f.tainted = True
            n = len(self._data)
            self._data.clear()
            self._by_rkey.clear()
            self.nbytes = 0
            self.stats.invalidations += n

    def __contains__(self, rkey: object) -> bool:
        """Whether any entry of Redis key ``rkey`` is cached."""
        return rkey in self._by_rkey

    # ---------------------------------------------------------------- internal
    def _store(self, ckey: Hashable, rkey: bytes, value: Any, size: int, expires: float) -> None:
        old = self._data.pop(ckey, None)
        if old is not None:
            self.nbytes -= old.size
        self._data[ckey] = _Entry(value, rkey, size, expires)
        self.nbytes += size
        self._by_rkey.setdefault(rkey, set()).add(ckey)
        while len(self._data) > self.max_entries or self.nbytes > self.max_bytes:
            ck, e = self._data.popitem(last=False)
            self.nbytes -= e.size
            self.stats.evictions += 1
            s = self._by_rkey.get(e.rkey)
            if s is not None:
                s.discard(ck)
                if not s:
                    del self._by_rkey[e.rkey]
