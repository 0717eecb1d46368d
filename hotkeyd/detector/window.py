"""A ring of sub-window sketches: the sliding-window rate estimator.

The window of ``N = window / tick`` sub-windows is held as ``N + 1`` sketches: the
open one (index ``cur``) takes ingest, the ``N`` closed ones before it are what a
rate sums over. Closing a sub-window is moving ``cur`` forward and clearing the
sketch that held sub-window ``cur - N - 1``; old traffic thus drops out of the rate
exactly ``N`` ticks after the tick that closed it, with no per-key work.

Sub-windows are numbered by tick since the detector started (``index``); slot
``index % (N + 1)`` holds it. Events with an event time may land in a closed
sub-window still inside the window (see the detector's event-time policy); such a
slot's caches are dropped so the next evaluation sees the new counts.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import Any

from hotkeyd.sketch import CountMinTopK, HeavyKeeper, SketchLike, window_sums
from hotkeyd.sketch._sketch_py import window_sums as window_sums_py

__all__ = ["SubWindowRing"]

_NATIVE = (HeavyKeeper, CountMinTopK)  # what window_sums takes (the twin takes anything)


class _Slot:
    """One sub-window: its sketch and how many events (raw and scaled) went in."""

    __slots__ = ("est", "index", "raw", "rw", "scaled", "sketch", "top")

    def __init__(self, sketch: SketchLike, index: int) -> None:
        self.sketch = sketch
        self.index = index
        self.raw = 0
        self.scaled = 0.0
        self.rw = False  # a batch that could tell reads from writes landed here
        self.top: dict[bytes, int] | None = None  # cached topk(), None = stale
        self.est: dict[bytes, int] = {}  # cached estimate() per key

    def reset(self, index: int) -> None:
        if self.raw or self.top:
            self.sketch.clear()
        self.index = index
        self.raw = 0
        self.scaled = 0.0
        self.rw = False
        self.top = None
        self.est = {}

    def touched(self, events: int, scale: float, rw: bool) -> None:
        self.raw += events
        self.scaled += events * scale
        self.rw = self.rw or rw
        self.top = None
        if self.est:
            self.est = {}

    @property
    def factor(self) -> float:
        """Mean ``Batch.scale`` of the events in this sub-window, weighted by count."""
        return self.scaled / self.raw if self.raw else 1.0


Arrays = tuple[Any, list[SketchLike], list[dict], list[float], list[dict], list[int]]


def _arrays(slots: list[_Slot], tops: list[dict]) -> Arrays:
    """``slots`` as ``_tick.evaluate`` takes a lane: window sums function, then per slot its
    sketch, estimate cache, scale factor, candidate top-k and the sketch's k."""
    sketches = [s.sketch for s in slots]
    fn = window_sums if all(type(sk) in _NATIVE for sk in sketches) else window_sums_py
    return (
        fn,
        sketches,
        [s.est for s in slots],
        [s.factor for s in slots],
        tops,
        [getattr(s.sketch, "k", 1 << 62) for s in slots],
    )


class SubWindowRing:
    """``subwindows + 1`` sketches in a ring.

    Args:
        subwindows: ``N``, closed sub-windows a rate sums over.
        factory: makes one empty sketch (called ``N + 1`` times, once each).
        cache_cap: bound of each slot's estimate cache (entries).
        start: index of the open sub-window (a ring made later joins in step).
        renew: called with a recycled slot's sketch and its cached top keys (or None);
            returns a replacement sized for the keys seen, or None to reuse the sketch
            (``hotkeyd.detector.sizing.KeySizer.renew``).
    """

    def __init__(
        self,
        subwindows: int,
        factory: Callable[[], SketchLike],
        cache_cap: int,
        start: int = 0,
        renew: Callable[[SketchLike, Iterable[bytes] | None], SketchLike | None] | None = None,
    ) -> None:
        self.n = subwindows
        self._renew = renew
        self.cur = start
        self._cache_cap = cache_cap
        self._slots = [_Slot(factory(), 0) for _ in range(subwindows + 1)]
        for index in range(start - subwindows, start + 1):
            self._slots[index % (subwindows + 1)].index = index

    @property
    def nbytes(self) -> int:
        return sum(int(s.sketch.nbytes) for s in self._slots)

    def slot(self, index: int) -> _Slot:
        """The slot holding sub-window ``index`` (must be within ``[cur - N, cur]``)."""
        s = self._slots[index % (self.n + 1)]
        if s.index != index:
            raise IndexError(f"sub-window {index} is not in the ring (cur={self.cur})")
        return s

    def advance(self, to: int) -> int:
        """Close sub-windows until ``to`` is the open one; return how many closed."""
        if to <= self.cur:
            return 0
        closed = to - self.cur
        first = max(self.cur + 1, to - self.n)  # older ones would be cleared again anyway
        for index in range(first, to + 1):
            slot = self._slots[index % (self.n + 1)]
            if self._renew is not None and slot.raw:
                fresh = self._renew(slot.sketch, slot.top)
                if fresh is not None:
                    slot.sketch = fresh
                    slot.raw = 0  # nothing to clear in a new sketch
                    slot.top = None
            slot.reset(index)
        self.cur = to
        return closed

    def cache_entries(self) -> int:
        """Largest per-slot cache (estimates or top-k), for bounds checks and debugging."""
        return max(max(len(s.est), len(s.top or ())) for s in self._slots)

    def closed_range(self) -> range:
        """Indexes of the closed sub-windows inside the window (oldest first)."""
        return range(self.cur - self.n, self.cur)

    def any_rw(self) -> bool:
        """Whether a read/write-aware batch landed in a closed sub-window of the window."""
        return any(self._slots[i % (self.n + 1)].rw for i in self.closed_range() if i >= 0)

    def _closed_slots(self) -> Iterable[_Slot]:
        for i in self.closed_range():
            if i >= 0:
                s = self._slots[i % (self.n + 1)]
                if s.raw:
                    yield s

    def partial_arrays(self) -> Arrays | None:
        """The open sub-window and the ``N - 1`` closed ones before it, for a crossing check.

        That is at most one window of traffic (the open one is partial), each with its
        top-k (the closed ones' bound a key's count there; the open one's are the
        candidates). None when nothing went into the open one yet.
        """
        now = self._slots[self.cur % (self.n + 1)]
        if not now.raw:
            return None
        slots = [now]
        for i in range(self.cur - self.n + 1, self.cur):
            if i >= 0:
                s = self._slots[i % (self.n + 1)]
                if s.raw:
                    slots.append(s)
        for s in slots:
            if s.top is None:
                s.top = dict(s.sketch.topk())
        return _arrays(slots, [s.top or {} for s in slots])

    def crossing_bound(self, hot: Container[bytes], nhot: int) -> float | None:
        """A bound of what ``_tick.may_cross`` can give a key not in ``hot`` (None: nothing).

        No such key's bound there (its count in the open sub-window, plus per closed one
        its count in that top-k or the top-k's floor, times the factors) can exceed the
        open sub-window's largest count outside ``hot`` plus, per closed sub-window of
        :meth:`partial_arrays`, the larger of its largest top-k count outside ``hot`` and
        its floor, times the same factors, summed in the same order. Below ``need`` the
        crossing check has nothing to find: it costs one ``topk(nhot + 1)`` call instead
        of the open sub-window's whole top-k and the candidate selection.
        """
        now = self._slots[self.cur % (self.n + 1)]
        if not now.raw:
            return None
        first = now.top.items() if now.top is not None else now.sketch.topk(nhot + 1)
        bound = next((c for key, c in first if key not in hot), 0) * now.factor
        for i in range(self.cur - self.n + 1, self.cur):
            if i < 0:
                continue
            s = self._slots[i % (self.n + 1)]
            if not s.raw:
                continue
            if s.top is None:
                s.top = dict(s.sketch.topk())
            top = s.top
            if not top:
                continue
            # Count-descending: the first entry outside ``hot`` is the largest one.
            c = next((c for key, c in top.items() if key not in hot), 0)
            k = getattr(s.sketch, "k", 1 << 62)
            low = min(top.values()) if len(top) >= k else 0
            bound += max(c, low) * s.factor
        return bound

    def arrays(self) -> Arrays:
        """This ring's closed sub-windows as the per-tick work takes them (``_tick.evaluate``).

        The window sums function, then per closed sub-window with events: its sketch,
        estimate cache, scale factor, top-k (fetched once per sub-window) and the sketch's k.
        """
        slots = list(self._closed_slots())
        for s in slots:
            if s.top is None:
                s.top = dict(s.sketch.topk())
        return _arrays(slots, [s.top or {} for s in slots])

    def sums(self, keys: Iterable[bytes]) -> dict[bytes, float]:
        """Scaled access counts of ``keys`` over the closed sub-windows of the window.

        One ``window_sums`` call for all keys and sub-windows (C core; its pure-Python twin
        for sketches it does not know, e.g. the exact counters tests inject): this is most
        of an evaluation's cost. Each slot's estimates are cached until it is touched.
        """
        keys = list(keys)
        slots = list(self._closed_slots())
        if not slots:
            return dict.fromkeys(keys, 0.0)
        for s in slots:
            if len(s.est) > self._cache_cap:
                s.est.clear()
        sketches = [s.sketch for s in slots]
        fn = window_sums if all(type(sk) in _NATIVE for sk in sketches) else window_sums_py
        got = fn(sketches, [s.est for s in slots], [s.factor for s in slots], keys)
        return dict(zip(keys, got, strict=True))
